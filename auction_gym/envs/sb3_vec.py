"""Stable-Baselines3's face of `auction_gym.envs.vector.MarketBatch`, in a module of its own so that
`import auction_gym` does not import SB3 (and PyTorch)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

from .batch import MarketBatch


class RadixAuctionVecEnv(VecEnv):
    """Stable-Baselines3's `VecEnv` over a `MarketBatch` (SAME_STEP): an env whose episode ends is
    reset at once, its info holds the last observation as `terminal_observation` and
    `TimeLimit.truncated` (truncated and not terminated), as `DummyVecEnv` does, and its reset info
    goes to `reset_infos`. A drop-in for `DummyVecEnv(env_fns)`: the same observations, rewards
    (float32), dones and infos, so the same training, over the same `env_fns` (SB3's `Monitor`
    around each env makes its `episode` entries)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        self.batch = MarketBatch(env_fns, AutoresetMode.SAME_STEP)
        super().__init__(self.batch.num_envs, self.batch.single_observation_space, self.batch.single_action_space)
        self.metadata = self.batch.metadata
        self.actions: np.ndarray | None = None

    def reset(self):
        options = [o or None for o in self._options]
        obs, infos = self.batch.reset(self._seeds, options)
        self.reset_infos = list(infos)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self.actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminated, truncated, infos = self.batch.step(self.actions)
        dones = terminated | truncated
        for i in np.flatnonzero(dones):
            infos[i] = {**infos[i]["final_info"], "terminal_observation": infos[i]["final_obs"]}
            self.reset_infos[i] = self.batch.reset_infos[i]
        for info, term, trunc in zip(infos, terminated, truncated):
            info["TimeLimit.truncated"] = bool(trunc and not term)
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.batch.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            return [None] * self.num_envs
        return list(self.batch.render())

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [env.get_wrapper_attr(attr_name) for env in self._envs(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Sets the attribute on each env's outermost wrapper, as `DummyVecEnv.set_attr` does."""
        for env in self._envs(indices):
            setattr(env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        return [env.get_wrapper_attr(method_name)(*method_args, **method_kwargs) for env in self._envs(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [is_wrapped(env, wrapper_class) for env in self._envs(indices)]

    def _envs(self, indices: VecEnvIndices) -> list[gym.Env]:
        return [self.batch.envs[i] for i in self._get_indices(indices)]

"""Many markets per call: `MarketBatch` steps N copies of the env through one boundary, and two thin
faces put it behind Gymnasium's `VectorEnv` (`RadixAuctionVectorEnv`, here) and Stable-Baselines3's
`VecEnv` (`auction_gym.envs.sb3_vec.RadixAuctionVecEnv`).

Everything N markets do in a step (the learner's actions, the built-in bidders' pacers, the
auctions, the engines, the resets of finished episodes) happens inside `MarketBatch.step`, so a
core that steps N markets in one compiled call replaces that one object and neither face. Today it
holds N Python `RadixAuctionEnv`s and steps them in turn: the same episodes, bit for bit, as
Gymnasium's `SyncVectorEnv` and SB3's `DummyVecEnv` over the same envs and seeds
(tests/test_vector.py). Env i is seeded `seed + i`, as both libraries seed theirs.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from .radix_auction_env import RadixAuctionEnv

AUTORESET_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
"""The autoreset conventions `MarketBatch` keeps (Gymnasium's names; SB3's is SAME_STEP's)."""
VECTOR_APIS = ("gymnasium", "sb3")
"""The faces `make_vec` builds: `RadixAuctionVectorEnv` and `RadixAuctionVecEnv`."""


def seeds_of(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Each of `n` envs' seed: `seed + i` for an int (as Gymnasium's vector reset and SB3's
    `VecEnv.seed` give them), None for all, or one per env as given."""
    if seed is None:
        return [None] * n
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(n)]
    if len(seed) != n:
        raise ValueError(f"expected {n} seeds, one per env, got {len(seed)}")
    return list(seed)


class MarketBatch:
    """N markets as one: `reset(seeds)` and `step(actions[N, ...]) -> (obs[N, ...], rewards[N],
    terminated[N], truncated[N], infos)`, finished episodes reset as `autoreset_mode` says:

    - NEXT_STEP: the step after an episode ends resets that env instead of stepping it (its action
      ignored): its reset observation, reward 0, not terminated nor truncated, its reset info.
    - SAME_STEP: an env whose episode ends in this step is reset at once; the step returns its reset
      observation, and its info is the reset info with `final_obs` (the episode's last
      observation) and `final_info` (the last step's info).

    `infos[i]` is env i's info dict. `reset_infos[i]` is the info of env i's latest reset.
    `envs` are the N envs (each as its factory made it, wrappers included)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]],
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP) -> None:
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        if self.autoreset_mode not in AUTORESET_MODES:
            raise ValueError(f"autoreset_mode must be one of {[m.value for m in AUTORESET_MODES]}, "
                             f"got {self.autoreset_mode.value!r}")
        self.envs = [fn() for fn in env_fns]
        if not self.envs:
            raise ValueError("a batch needs at least one env")
        if len({id(env.unwrapped) for env in self.envs}) != len(self.envs):
            raise ValueError("the env factories returned the same env more than once: each must make a new one")
        first = self.envs[0]
        self.num_envs = len(self.envs)
        self.single_observation_space, self.single_action_space = first.observation_space, first.action_space
        for env in self.envs:
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise ValueError("the envs of a batch must share their observation and action spaces")
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode, self.metadata = first.render_mode, first.metadata
        self.reset_infos: list[dict[str, Any]] = [{} for _ in self.envs]
        self._env_obs: list[Any] = [None] * self.num_envs
        self._obs = create_empty_array(self.single_observation_space, self.num_envs, fn=np.zeros)
        self._ended = np.zeros(self.num_envs, dtype=np.bool_)  # NEXT_STEP: reset at the next step

    def reset(self, seeds: Sequence[int | None], options: Sequence[dict[str, Any] | None] | None = None,
              mask: np.ndarray | None = None) -> tuple[Any, list[dict[str, Any] | None]]:
        """Reset env i with `seeds[i]` and `options[i]` (every env, or those `mask` marks); the
        batch's observations and each env's reset info (None for an env not reset)."""
        mask = np.ones(self.num_envs, dtype=np.bool_) if mask is None else np.asarray(mask, dtype=np.bool_)
        options = [None] * self.num_envs if options is None else options
        infos: list[dict[str, Any] | None] = [None] * self.num_envs
        for i in np.flatnonzero(mask):
            self._env_obs[i], infos[i] = self.envs[i].reset(seed=seeds[i], options=options[i])
            self.reset_infos[i] = infos[i]
        self._ended[mask] = False
        return self._observations(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step every env with its row of `actions` (see the class docstring for ended episodes)."""
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=np.bool_)
        truncated = np.zeros(self.num_envs, dtype=np.bool_)
        infos: list[dict[str, Any]] = []
        for i, (env, action) in enumerate(zip(self.envs, iterate(self.action_space, actions), strict=True)):
            if self._ended[i]:  # NEXT_STEP only: SAME_STEP resets in the step that ends
                self._env_obs[i], info = env.reset()
                self.reset_infos[i] = info
            else:
                self._env_obs[i], rewards[i], terminated[i], truncated[i], info = env.step(action)
                if self.autoreset_mode is AutoresetMode.SAME_STEP and (terminated[i] or truncated[i]):
                    final_obs, final_info = self._env_obs[i], info
                    self._env_obs[i], self.reset_infos[i] = env.reset()
                    info = {"final_obs": final_obs, "final_info": final_info, **self.reset_infos[i]}
            infos.append(info)
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:
            self._ended = terminated | truncated
        return self._observations(), rewards, terminated, truncated, infos

    def _observations(self) -> Any:
        """A copy of the envs' latest observations, batched."""
        self._obs = concatenate(self.single_observation_space, self._env_obs, self._obs)
        return copy.deepcopy(self._obs)

    def render(self) -> tuple[Any, ...]:
        return tuple(env.render() for env in self.envs)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class RadixAuctionVectorEnv(VectorEnv):
    """Gymnasium's `VectorEnv` over a `MarketBatch`: `reset(seed=s)` seeds env i `s + i`; a
    finished episode resets as `autoreset_mode` says (NEXT_STEP, Gymnasium's default, or SAME_STEP:
    `MarketBatch`), and infos are Gymnasium's dict of arrays with `_key` masks. The episodes are
    `SyncVectorEnv`'s over the same `env_fns`."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]],
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP) -> None:
        self.batch = MarketBatch(env_fns, autoreset_mode)
        self.num_envs = self.batch.num_envs
        self.single_observation_space = self.batch.single_observation_space
        self.single_action_space = self.batch.single_action_space
        self.observation_space, self.action_space = self.batch.observation_space, self.batch.action_space
        self.render_mode = self.batch.render_mode
        self.metadata = {**self.batch.metadata, "autoreset_mode": self.batch.autoreset_mode}
        self.next_seeds: list[int | None] | None = None
        """Seeds a `reset()` without a seed uses, once (`make_vec`'s `seed`)."""

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        if seed is None and self.next_seeds is not None:
            seed = self.next_seeds
        self.next_seeds = None
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        obs, infos = self.batch.reset(seeds_of(seed, self.num_envs), [options or None] * self.num_envs, mask)
        return obs, self._vector_infos(infos)

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.batch.step(actions)
        return obs, rewards, terminated, truncated, self._vector_infos(infos)

    def _vector_infos(self, infos: list[dict[str, Any] | None]) -> dict[str, Any]:
        """Per-env infos as Gymnasium batches them (`VectorEnv._add_info`)."""
        out: dict[str, Any] = {}
        for i, info in enumerate(infos):
            if info is not None:
                out = self._add_info(out, info, i)
        return out

    def render(self) -> tuple[Any, ...]:
        return self.batch.render()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's method `name` called with the arguments (an attribute's value if not callable)."""
        values = [env.get_wrapper_attr(name) for env in self.batch.envs]
        return tuple(v(*args, **kwargs) if callable(v) else v for v in values)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return tuple(env.get_wrapper_attr(name) for env in self.batch.envs)

    def set_attr(self, name: str, values: Any) -> None:
        """Sets `name` on every env: `values[i]` on env i for a list or tuple, else `values` on all."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} values, one per env, got {len(values)}")
        for env, value in zip(self.batch.envs, values):
            env.set_wrapper_attr(name, value)

    def close_extras(self, **kwargs: Any) -> None:
        self.batch.close()


def vector_env(num_envs: int = 1, autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
               **env_kwargs: Any) -> RadixAuctionVectorEnv:
    """`num_envs` `RadixAuctionEnv(**env_kwargs)` as a `RadixAuctionVectorEnv`: the ids'
    `vector_entry_point`, so `gym.make_vec("RadixAuction-v2", num_envs=8)` builds it (the id's
    defaults under `env_kwargs`, as for `gym.make`)."""
    return RadixAuctionVectorEnv([lambda: RadixAuctionEnv(**copy.deepcopy(env_kwargs)) for _ in range(num_envs)],
                                 autoreset_mode)


def make_vec(env_id: str = "RadixAuction-v2", num_envs: int = 1, seed: int | None = None,
             vector_api: str = "gymnasium", autoreset_mode: AutoresetMode | str | None = None,
             **env_kwargs: Any) -> VectorEnv | Any:
    """`num_envs` envs of the registered `env_id` (its defaults under `env_kwargs`) stepped as one
    `MarketBatch`, env i's first episode seeded `seed + i` (None: unseeded). `vector_api="gymnasium"`:
    a `RadixAuctionVectorEnv` resetting as `autoreset_mode` says (default NEXT_STEP), whose first
    `reset()` without a seed uses those seeds. "sb3": a `RadixAuctionVecEnv` (SB3 resets as
    SAME_STEP, so no `autoreset_mode`) of envs in SB3's `Monitor`, as `make_vec_env` wraps them."""
    if vector_api not in VECTOR_APIS:
        raise ValueError(f"vector_api must be one of {list(VECTOR_APIS)}, got {vector_api!r}")
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if vector_api == "gymnasium":
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                           autoreset_mode=autoreset_mode or AutoresetMode.NEXT_STEP, **env_kwargs)
        env.next_seeds = None if seed is None else seeds_of(seed, num_envs)
        return env
    if autoreset_mode is not None:
        raise ValueError("vector_api='sb3' resets as SB3 does (SAME_STEP): leave autoreset_mode out")
    from stable_baselines3.common.monitor import Monitor

    from .sb3_vec import RadixAuctionVecEnv

    venv = RadixAuctionVecEnv([lambda: Monitor(gym.make(env_id, **copy.deepcopy(env_kwargs)))
                               for _ in range(num_envs)])
    if seed is not None:
        venv.seed(seed)
    return venv

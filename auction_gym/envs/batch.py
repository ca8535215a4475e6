"""`MarketBatch`: N markets stepped through one boundary, the object that Gymnasium's and SB3's
vector faces (`auction_gym.envs.vector`, `auction_gym.envs.sb3_vec`) both step.

Everything N markets do in a step (the learner's actions, the built-in bidders' pacers, the
auctions, the engines, the resets of finished episodes) happens inside `MarketBatch.step`, so a
core that steps N markets in one compiled call replaces this one object and neither face. Today it
holds N Python envs and steps them in turn: the same episodes, bit for bit, as Gymnasium's
`SyncVectorEnv` and SB3's `DummyVecEnv` over the same envs and seeds (tests/test_vector.py).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from .._checks import is_int_typed

AUTORESET_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
"""The autoreset conventions `MarketBatch` keeps (Gymnasium's names; SB3's is SAME_STEP's)."""


def _finite(row: Any) -> bool:
    """Whether an action row is numbers, all finite."""
    try:
        return bool(np.isfinite(np.asarray(row, dtype=np.float64)).all())
    except (TypeError, ValueError):
        return False


def seeds_of(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Each of `n` envs' seed: `seed + i` for an int (as Gymnasium's vector reset and SB3's
    `VecEnv.seed` give them), None for all, or one per env as given; numpy's ints made Python's.
    Checked whole, so that a wrong one refuses the reset before any env resets: TypeError for a
    seed that is not an int or None, ValueError for a negative one or a count other than `n`."""
    if seed is None:
        return [None] * n
    if is_seed(seed):
        seeds = [int(seed) + i for i in range(n)]
    elif isinstance(seed, (Sequence, np.ndarray)) and not isinstance(seed, (str, bytes)):
        seeds = list(seed)
        if len(seeds) != n:
            raise ValueError(f"expected {n} seeds, one per env, got {len(seeds)}")
    else:
        raise TypeError(f"seed must be an int, None, or one int or None per env, got {seed!r}")
    for s in seeds:
        if s is not None and not is_seed(s):  # the rule a lone seed meets: a bool is no seed
            raise TypeError(f"a seed must be an int or None, got {s!r}")
        if s is not None and s < 0:
            raise ValueError(f"a seed must be >= 0, got {s}")
    return [None if s is None else int(s) for s in seeds]


def is_seed(x: object) -> bool:
    """Whether `x` is an int, Python's or numpy's (not a bool): the package's strict int test
    (`_checks.is_int_typed`), for a lone seed and each of a list's alike."""
    return is_int_typed(x)


class MarketBatch:
    """N markets as one: `reset(seeds)` and `step(actions[N, ...]) -> (obs[N, ...], rewards[N],
    terminated[N], truncated[N], infos)`, finished episodes reset as `autoreset_mode` says:

    - NEXT_STEP: the step after an episode ends resets that env instead of stepping it (its action
      ignored): its reset observation, reward 0, not terminated nor truncated, its reset info.
    - SAME_STEP: an env whose episode ends in this step is reset at once; the step returns its reset
      observation, and its info is the reset info with `final_obs` (the episode's last
      observation) and `final_info` (the last step's info).

    Wrong `actions` (not one row per env, or a row of an env that steps that is not finite
    numbers) raise ValueError before any env steps. `infos[i]` is env i's info dict.
    `reset_infos[i]` is the info of env i's latest reset.
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
        if mask.shape != (self.num_envs,):
            raise ValueError(f"reset_mask must be {self.num_envs} booleans, one per env, got shape {mask.shape}")
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
        for i, (env, action) in enumerate(zip(self.envs, self._rows(actions))):
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

    def _rows(self, actions: Any) -> list[Any]:
        """Each env's action, read from `actions` and checked before any env steps, so that a wrong
        call changes nothing: one row per env, and under a float Box (every market env's action
        space) rows of finite numbers for the envs that step, which each env would refuse only
        after the envs before it had stepped."""
        try:
            rows = list(iterate(self.action_space, actions))
        except (TypeError, ValueError, IndexError):  # a scalar, None, ...: nothing to iterate
            rows = None
        if rows is None or len(rows) != self.num_envs:
            got = f"{type(actions).__name__} of shape {np.shape(actions)}" if isinstance(actions, np.ndarray) else (
                f"{actions!r:.80}")
            raise ValueError(f"expected one action per env, {self.num_envs} rows of {self.single_action_space}, "
                             f"got {got}; no env was stepped")
        space = self.single_action_space
        if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
            if isinstance(actions, np.ndarray) and actions.dtype.kind == "f":  # the usual call: one numpy pass
                finite = np.isfinite(actions.reshape(self.num_envs, -1)).all(axis=1)
            else:
                finite = np.array([_finite(row) for row in rows], dtype=np.bool_)
            if (wrong := np.flatnonzero(~finite & ~self._ended)).size:  # an ended env's row is not read (NEXT_STEP)
                raise ValueError(f"the action of env {wrong[0]} must be finite numbers, got {rows[wrong[0]]!r}; "
                                 "no env was stepped")
        return rows

    def _observations(self) -> Any:
        """A copy of the envs' latest observations, batched."""
        self._obs = concatenate(self.single_observation_space, self._env_obs, self._obs)
        return copy.deepcopy(self._obs)

    def render(self) -> tuple[Any, ...]:
        return tuple(env.render() for env in self.envs)

    def close(self) -> None:
        for env in self.envs:
            env.close()

"""Many markets per call: Gymnasium's `VectorEnv` over a `MarketBatch` (`auction_gym.envs.batch`),
`make_vec` (this face or SB3's, `auction_gym.envs.sb3_vec`) and the ids' `vector_entry_point`.
Env i is seeded `seed + i`, as Gymnasium and SB3 seed theirs."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from .._checks import check_count
from .batch import MarketBatch, is_seed, seeds_of
from .radix_auction_env import RadixAuctionEnv

VECTOR_APIS = ("gymnasium", "sb3")
"""The faces `make_vec` builds: `RadixAuctionVectorEnv` and `auction_gym.envs.sb3_vec.RadixAuctionVecEnv`."""


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
        """Per-env infos as Gymnasium batches them (`VectorEnv._add_info`), key by key where
        `batch_infos` takes them, else env by env through `_add_info` itself."""
        out = batch_infos(infos, self.num_envs)
        if out is None:
            out = {}
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
        # Gymnasium's __del__ closes a vector env whose __init__ raised (a wrong autoreset_mode, an
        # env factory's error) too: without a batch there is nothing to close, not an AttributeError.
        if (batch := getattr(self, "batch", None)) is not None:
            batch.close()


def batch_infos(infos: Sequence[dict[str, Any] | None], num_envs: int) -> dict[str, Any] | None:
    """What `VectorEnv._add_info` makes of env i's info `infos[i]` (None: env i has none) added in
    turn, the same keys in the same order, dtypes and values: each key's values in one array of
    `num_envs` rows, the first value's type its dtype, and its `_key` mask of the envs that have it.
    Built a key at a time (scalars of one type in one call), not an env at a time (one small numpy
    write per key and env, about 7 µs of each env step). None for what the env-by-env rules order
    otherwise: a key beginning "_" (which a mask's name could meet), a key whose values are dicts
    for some envs and not for others, or a value its column cannot hold (which the env-by-env
    rules refuse with their own error)."""
    columns = _info_columns(infos)
    if columns is None:
        return None
    out: dict[str, Any] = {}
    every = np.ones(num_envs, dtype=np.bool_)  # copied: a mask for each key
    for key, (envs, values) in columns.items():
        try:
            array = _info_column(key, envs, values, num_envs)
        except (TypeError, ValueError, OverflowError):
            return None
        if array is None:
            return None
        if len(envs) == num_envs:
            mask = every.copy()
        else:
            mask = np.zeros(num_envs, dtype=np.bool_)
            mask[envs] = True
        out[key], out[f"_{key}"] = array, mask
    return out


def _info_columns(infos: Sequence[dict[str, Any] | None]) -> dict[str, tuple[list[int], Sequence[Any]]] | None:
    """Each key's envs and values, keys in the order they first appear (env by env); None for a
    key beginning "_". Infos of the same keys in the same order (a batch's, most steps) are
    transposed in one `zip`."""
    envs = [i for i, info in enumerate(infos) if info]
    if not envs:
        return {}
    keys = list(infos[envs[0]])
    if any(key.startswith("_") for key in keys):
        return None
    if all(list(infos[i]) == keys for i in envs):
        return dict(zip(keys, ((envs, values) for values in zip(*(infos[i].values() for i in envs)))))
    columns: dict[str, tuple[list[int], list[Any]]] = {}
    for i in envs:
        for key, value in infos[i].items():
            if key.startswith("_"):
                return None
            at, values = columns.setdefault(key, ([], []))
            at.append(i)
            values.append(value)
    return columns


def _info_column(key: str, envs: list[int], values: Sequence[Any], num_envs: int) -> Any:
    """One key's batched values (`batch_infos`), envs[k]'s value values[k]; None where the
    env-by-env rules would mix a dict with other values."""
    kind, kinds = type(values[0]), set(map(type, values))
    scalar = kind in (int, float, bool) or issubclass(kind, np.number)
    if key == "final_obs":
        array = np.full(num_envs, fill_value=None, dtype=object)
    elif scalar and len(kinds) == 1:  # in one call: the same values, no mixed casts
        if len(envs) == num_envs:
            return np.array(values, dtype=kind)
        array = np.zeros(num_envs, dtype=kind)
        array[envs] = values
        return array
    elif any(issubclass(k, dict) for k in kinds):
        if not all(issubclass(k, dict) for k in kinds):
            return None
        nested: list[dict[str, Any] | None] = [None] * num_envs
        for i, value in zip(envs, values):
            nested[i] = value
        return batch_infos(nested, num_envs)
    elif scalar:
        array = np.zeros(num_envs, dtype=kind)
    elif isinstance(values[0], np.ndarray):
        array = np.zeros((num_envs, *values[0].shape), dtype=values[0].dtype)
    else:
        array = np.full(num_envs, fill_value=None, dtype=object)
    for i, value in zip(envs, values):
        array[i] = value
    return array


def vector_env(num_envs: int = 1, autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
               **env_kwargs: Any) -> RadixAuctionVectorEnv:
    """`num_envs` `RadixAuctionEnv(**env_kwargs)` as a `RadixAuctionVectorEnv`: the ids'
    `vector_entry_point`, so `gym.make_vec("RadixAuction-v2", num_envs=8)` builds it (the id's
    defaults under `env_kwargs`, as for `gym.make`)."""
    return RadixAuctionVectorEnv([partial(RadixAuctionEnv, **env_kwargs)] * check_count("num_envs", num_envs),
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
    num_envs = check_count("num_envs", num_envs)
    if seed is not None and not is_seed(seed):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    first = None if seed is None else seeds_of(seed, num_envs)  # a negative one refused before any env is made
    if vector_api == "gymnasium":
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                           autoreset_mode=autoreset_mode or AutoresetMode.NEXT_STEP, **env_kwargs)
        env.next_seeds = first
        return env
    if autoreset_mode is not None:
        raise ValueError("vector_api='sb3' resets as SB3 does (SAME_STEP): leave autoreset_mode out")
    from stable_baselines3.common.monitor import Monitor

    from .sb3_vec import RadixAuctionVecEnv

    venv = RadixAuctionVecEnv([lambda: Monitor(gym.make(env_id, **env_kwargs))] * num_envs)
    if first is not None:
        venv.seed(first[0])  # a Python int, which Gymnasium's seeding asks for (not numpy's)
    return venv

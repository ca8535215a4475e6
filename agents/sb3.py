"""Stable-Baselines3 plumbing: algorithms, RL Zoo hyperparameter files, environments, saved models.

A trained run directory holds `model.zip` (a policy search's: `model.npz`, `agents.policy_search`),
`vecnormalize.pkl` when the hyperparameters ask for observation/reward normalization,
`config.json` (algorithm, seed, environment arguments, hyperparameters) and the TensorBoard event
files. Checkpoints go to `checkpoints/` in SB3's
naming (`<algo>_<steps>_steps.zip`, `<algo>_vecnormalize_<steps>_steps.pkl`).
"""

from __future__ import annotations

import inspect
import json
import re
import zipfile
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecFrameStack, VecNormalize

import auction_gym  # noqa: F401  (registers RadixAuction-v0, -v1 and -v2)
from auction_gym.action import DEFAULT_ACTION_TYPE
from auction_gym.envs.sb3_vec import RadixAuctionVecEnv
from auction_gym.market import Obs
from auction_gym.registry import resolve

from .learners import LEARNERS, learner


class SB3Algorithms(Mapping):
    """A live view {name: class} of the Stable-Baselines3 learners of `agents.learners.LEARNERS`
    (`ALGOS`): a learner registered later is in it too. A class is imported when first looked up."""

    def __getitem__(self, name: str) -> type[BaseAlgorithm]:
        entry = LEARNERS.get(name)
        if entry is None or entry.family != "sb3":
            raise KeyError(name)
        return resolve(entry.model)

    def __iter__(self) -> Iterator[str]:
        return (name for name, entry in LEARNERS.items() if entry.family == "sb3")

    def __len__(self) -> int:
        return sum(1 for _ in self)


ALGOS = SB3Algorithms()
"""The Stable-Baselines3 learners of `agents.learners.LEARNERS`, name -> class (a live view)."""
ENV_ID = "RadixAuction-v2"
"""The env id a run trains and evaluates on unless its config names another (`TrainConfig.env_id`)."""
VEC_ENVS: dict[str, type[VecEnv]] = {"batched": RadixAuctionVecEnv, "dummy": DummyVecEnv, "subproc": SubprocVecEnv}
"""How `make_env` runs its envs: "batched", all in this process stepped as one batch of markets
(the default; `auction_gym.envs.vector.MarketBatch`), "dummy", all in this process one by one
(SB3's DummyVecEnv: the same episodes and training as "batched"), or "subproc", a process per env
(on a few cores, a subprocess per env of parallel runs oversubscribes them)."""
DEFAULT_VEC_ENV = "batched"
"""The `vec_env` of `make_env` and `TrainConfig` unless told otherwise."""
SEARCH_MODEL_SUFFIX = ".npz"
"""How a policy search's saved model ends (an SB3 model's ends in ".zip")."""
MODEL_SUFFIXES = (".zip", SEARCH_MODEL_SUFFIX)
HYPERPARAMS_DIR = Path(__file__).resolve().parent / "hyperparams"
# RL Zoo keys that configure the run rather than the algorithm's constructor; `train_env_kwargs`:
# env arguments the training envs take over the run's (a training reward such as "paired"), which the
# evaluations never see; `action_kwargs`: the action the learner's policy plays in, over the run's,
# in training and in every evaluation of its models (`agents.training.train`).
_RUN_KEYS = ("n_timesteps", "n_envs", "normalize", "frame_stack", "policy", "noise_type", "noise_std",
             "train_env_kwargs", "action_kwargs")
TRAINING_ONLY = ("reward", "reference_policy", "reward_scale")
"""The env arguments `train_env_kwargs` may set: what a policy learns from. The action type and the
market are the run's own, so a model plays in evaluation the env it was trained in."""
ACTING = ("action_type", "delta_bound", "delta_start", "residual_base", "residual_scale")
"""The env arguments `action_kwargs` may set: the action type a learner's policy plays and its
map's parameters. The market is the run's own, so every learner of a comparison meets the same
episodes."""


def check_action_kwargs(value: Any) -> None:
    """ValueError unless `value` is a mapping of `ACTING` env arguments (a hyperparameter file's
    `action_kwargs`, for SB3 learners and policy searches alike); the env checks their values."""
    if not isinstance(value, dict) or set(value) - set(ACTING):
        raise ValueError(f"hyperparameter action_kwargs={value!r}: expected a mapping of {', '.join(ACTING)} "
                         "(the action the policy plays, never the market)")
# Constructor arguments that training sets itself.
_FIXED_KEYS = ("self", "env", "seed", "device", "verbose", "tensorboard_log", "_init_setup_model")
_NOISES = {"normal": NormalActionNoise, "ornstein-uhlenbeck": OrnsteinUhlenbeckActionNoise}


def check_algo(algo: str) -> type[BaseAlgorithm]:
    """The SB3 class of an algorithm name; ValueError lists the valid names."""
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; valid: {', '.join(ALGOS)}")
    return ALGOS[algo]


def load_hyperparams(algo: str, path: str | Path | None = None, env_id: str = ENV_ID,
                     overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """An algorithm's hyperparameters for `env_id` from an RL Zoo YAML file (`agents/hyperparams/<algo>.yml`
    by default), with `overrides` applied on top. Values are as in the file (`policy_kwargs` and a
    dict-valued `normalize` may be Python expression strings, RL Zoo style). `algo` is any learner of
    `agents.learners.LEARNERS`."""
    learner(algo)
    path = Path(path) if path is not None else HYPERPARAMS_DIR / f"{algo}.yml"
    if not path.is_file():
        raise ValueError(f"hyperparameter file not found: {path}")
    try:
        table = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"{path} is not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(table, dict) or env_id not in table:
        has = sorted(table) if isinstance(table, dict) else []
        raise ValueError(f"{path} has no entry for {env_id!r}; it has {has}")
    return {**table[env_id], **(overrides or {})}


def check_hyperparams(algo: str, hyperparams: dict[str, Any]) -> None:
    """ValueError for a key that neither `algo`'s constructor nor RL Zoo's run settings know, or a
    value whose type does not match the constructor's numeric or boolean default (a schedule string
    for `learning_rate` is not supported here); the message names the key and what is valid."""
    params = inspect.signature(check_algo(algo).__init__).parameters
    valid = sorted({*params, *_RUN_KEYS} - set(_FIXED_KEYS))
    for key, value in hyperparams.items():
        if key not in valid:
            raise ValueError(f"unknown hyperparameter {key!r} for {algo}; valid: {', '.join(valid)}")
        default = params[key].default if key in params else None
        if key == "train_env_kwargs" and (not isinstance(value, dict) or set(value) - set(TRAINING_ONLY)):
            raise ValueError(f"hyperparameter train_env_kwargs={value!r}: expected a mapping of "
                             f"{', '.join(TRAINING_ONLY)} (what the policy learns from, never what it plays in)")
        if key == "action_kwargs":
            check_action_kwargs(value)
        if key == "frame_stack" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"hyperparameter frame_stack={value!r}: expected an integer >= 1 (observations stacked)")
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, (list, tuple))
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            continue
        if not ok:
            raise ValueError(f"hyperparameter {key}={value!r} for {algo}: expected {type(default).__name__} "
                             f"like the default {default!r}")


def _expr(value: Any) -> Any:
    """RL Zoo writes dicts as strings such as "dict(net_arch=[64, 64])"; evaluate those (no builtins)."""
    if isinstance(value, str):
        return eval(value, {"__builtins__": {}}, {"dict": dict})  # noqa: S307 (trusted config file)
    return value


def normalize_kwargs(hyperparams: dict[str, Any]) -> dict[str, Any] | None:
    """VecNormalize arguments from the `normalize` entry (false/absent: None; true: defaults)."""
    norm = _expr(hyperparams.get("normalize", False))
    if norm is False or norm is None:
        return None
    kwargs = {} if norm is True else dict(norm)
    kwargs.setdefault("gamma", hyperparams.get("gamma", 0.99))
    return kwargs


def algo_kwargs(hyperparams: dict[str, Any], action_dim: int = 1) -> dict[str, Any]:
    """The algorithm constructor's keyword arguments of a hyperparameter dict (RL Zoo semantics:
    `noise_type`/`noise_std` become `action_noise`)."""
    kwargs = {k: v for k, v in hyperparams.items() if k not in _RUN_KEYS}
    if "policy_kwargs" in kwargs:
        kwargs["policy_kwargs"] = _expr(kwargs["policy_kwargs"])
    noise = hyperparams.get("noise_type")
    if noise is not None:
        if noise not in _NOISES:
            raise ValueError(f"unknown noise_type {noise!r}; valid: {', '.join(_NOISES)}")
        std = float(hyperparams.get("noise_std", 0.1))
        kwargs["action_noise"] = _NOISES[noise](mean=np.zeros(action_dim), sigma=std * np.ones(action_dim))
    return kwargs


def make_env(env_kwargs: dict[str, Any], n_envs: int, seed: int, normalize: dict[str, Any] | None = None,
             frame_stack: int = 1, env_id: str = ENV_ID, vec_env: str = DEFAULT_VEC_ENV) -> VecEnv:
    """`n_envs` monitored copies of the env `env_id` (run as `vec_env` says, `VEC_ENVS`), env i
    seeded `seed + i`, wrapped in VecNormalize when `normalize` is given, then, with `frame_stack` >
    1, in VecFrameStack (RL Zoo's order: each observation is normalized, then the last `frame_stack`
    are concatenated, oldest first)."""
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    if vec_env not in VEC_ENVS:
        raise ValueError(f"unknown vec_env {vec_env!r}; valid: {', '.join(VEC_ENVS)}")
    venv = VEC_ENVS[vec_env]([partial(_monitored_env, env_kwargs, env_id) for _ in range(n_envs)])
    venv.seed(seed)
    if normalize is not None:
        venv = VecNormalize(venv, **normalize)
    return VecFrameStack(venv, frame_stack) if frame_stack > 1 else venv


def _monitored_env(env_kwargs: dict[str, Any], env_id: str) -> Monitor:
    """One env in SB3's Monitor (episode returns and lengths for rollout/ep_rew_mean), made by the id
    that imports auction_gym first, so that SubprocVecEnv workers can build it too."""
    return Monitor(gym.make(f"auction_gym:{env_id}", **env_kwargs))


def detect_algo(path: str | Path) -> str:
    """The algorithm that saved a model zip, read from the zip's `data` (no weights loaded)."""
    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not an SB3 model zip")
    with zipfile.ZipFile(path) as z:
        if "data" not in z.namelist():
            raise ValueError(f"{path} is not an SB3 model zip: it has no 'data' entry")
        try:
            data = json.loads(z.read("data"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is not an SB3 model zip: its 'data' entry is not JSON ({e})") from None
    if "clip_range" in data:
        # RecurrentPPO saves PPO's keys; only its policy class, from sb3-contrib's recurrent module, differs.
        policy_class = data.get("policy_class")
        module = policy_class.get("__module__", "") if isinstance(policy_class, dict) else ""
        return "ppo_lstm" if module.startswith("sb3_contrib.common.recurrent") else "ppo"
    if "policy_delay" in data:
        return "td3"
    if "target_entropy" in data:
        return "sac"
    if "normalize_advantage" in data:
        return "a2c"
    raise ValueError(f"cannot tell which algorithm saved {path}; valid: {', '.join(ALGOS)}")


def run_folder(model_path: str | Path) -> Path:
    """The run folder of a saved model: the zip's folder, or its parent for a checkpoint in
    `<run>/checkpoints/` and for the untrained policy in `<run>/initial/`."""
    folder = Path(model_path).parent
    return folder.parent if folder.name in ("checkpoints", "initial") else folder


def played_action_type(env_kwargs: dict[str, Any], env_id: str) -> str:
    """The action type an env `env_id` built with `env_kwargs` plays: the kwargs', else the
    registration's default, else the env class's (`auction_gym.action.DEFAULT_ACTION_TYPE`)."""
    return env_kwargs.get("action_type") or gym.spec(env_id).kwargs.get("action_type") or DEFAULT_ACTION_TYPE


def saved_action_type(model_path: str | Path) -> str | None:
    """The action type a model was trained in, from `config.json` in its run folder; None when
    that file, or its env id, is missing (a model from elsewhere: nothing to check it against)."""
    path = run_folder(model_path) / "config.json"
    try:
        config = json.loads(path.read_text())
        return played_action_type(config["env_kwargs"], config["env_id"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError, gym.error.Error):
        return None


def saved_env_kwargs(model_path: str | Path) -> tuple[dict[str, Any], Path] | None:
    """The environment arguments a model was trained with, from `config.json` in its run folder,
    and that file's path; None when there is no such file."""
    path = run_folder(model_path) / "config.json"
    if not path.is_file():
        return None
    try:
        env_kwargs = json.loads(path.read_text())["env_kwargs"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a training config with env_kwargs ({e})") from None
    if not isinstance(env_kwargs, dict):
        raise ValueError(f"{path}: env_kwargs must be an object, got {env_kwargs!r}")
    return env_kwargs, path


def vecnormalize_path(model_path: str | Path) -> Path | None:
    """The VecNormalize statistics saved with a model zip, if any: `vecnormalize.pkl` beside a
    final model, `<algo>_vecnormalize_<n>_steps.pkl` beside a checkpoint `<algo>_<n>_steps.zip`."""
    model_path = Path(model_path)
    candidates = [model_path.with_name("vecnormalize.pkl")]
    if checkpoint := re.fullmatch(r"(.+)_(\d+)_steps", model_path.stem):
        prefix, steps = checkpoint.groups()
        candidates.insert(0, model_path.with_name(f"{prefix}_vecnormalize_{steps}_steps.pkl"))
    return next((p for p in candidates if p.exists()), None)


class SB3Policy:
    """A trained SB3 model as a policy on raw observations: observations are normalized with the
    VecNormalize statistics when given (never updated) and, for a model trained on stacked
    observations (`frame_stack`), stacked as VecFrameStack stacks them (`stack`), starting afresh
    when `episode_start` is true or on the first call; actions are deterministic. A recurrent model
    (`ppo_lstm`) returns its LSTM state with each action: the caller passes it back with the next
    observation, and the model starts from a zero state where `episode_start` is true (as
    `agents.evaluation` plays episodes)."""

    def __init__(self, model: BaseAlgorithm, vecnormalize: VecNormalize | None = None,
                 action_type: str | None = None) -> None:
        self.model, self.vecnormalize = model, vecnormalize
        self.action_type = action_type
        """The action type it was trained in, when known, for `evaluate` to check against the env's:
        "log" and "residual" share one box, so the box alone cannot tell them apart."""
        self.frames = model.observation_space.shape[0] // Obs.SIZE
        """Observations the model sees at once (1: no stacking)."""
        self._stack: np.ndarray | None = None

    @property
    def action_space(self) -> gym.spaces.Space:
        """The action space the model was trained in (its actions are in it), for `evaluate` to
        check against the environment's."""
        return self.model.action_space

    def predict(self, observation: np.ndarray, state: Any = None, episode_start: np.ndarray | None = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        obs = np.asarray(observation, dtype=np.float32)
        if self.vecnormalize is not None:
            obs = self.vecnormalize.normalize_obs(obs).astype(np.float32)
        if self.frames > 1:
            fresh = self._stack is None or (episode_start is not None and bool(np.any(episode_start)))
            self._stack = stack(None if fresh else self._stack, obs, self.frames)
            obs = self._stack
        return self.model.predict(obs, state, episode_start, deterministic)


def stack(previous: np.ndarray | None, obs: np.ndarray, frames: int) -> np.ndarray:
    """The last `frames` observations concatenated, oldest first, as VecFrameStack builds them for
    one env: `previous` (the last stack; None at an episode's start, which VecFrameStack fills with
    zeros) shifted by one observation, with `obs` at the end."""
    size = obs.shape[-1]
    out = np.zeros(size * frames, dtype=np.float32) if previous is None else np.roll(previous, -size)
    out[-size:] = obs
    return out


def load_policy(path: str | Path) -> Any:
    """A saved model as a policy: a zip (with its VecNormalize statistics when present) as an
    SB3Policy on CPU, a policy search's `model.npz` as its `SearchPolicy`."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"model not found: {path}")
    if path.suffix == SEARCH_MODEL_SUFFIX:
        return resolve("agents.policy_search:SearchPolicy").load(path)
    model = ALGOS[detect_algo(path)].load(path, device="cpu")
    stats = vecnormalize_path(path)
    vecnormalize = None
    if stats is not None:
        vecnormalize = VecNormalize.load(str(stats), DummyVecEnv([lambda: _dummy_env(model)]))
        vecnormalize.training, vecnormalize.norm_reward = False, False
    return SB3Policy(model, vecnormalize, saved_action_type(path))


def _dummy_env(model: BaseAlgorithm):
    """A stand-in env with the model's action space and one observation's space (the last of a
    stack), to attach loaded VecNormalize statistics to: they were taken before stacking."""
    space = model.observation_space

    class _Spaces(gym.Env):
        observation_space = gym.spaces.Box(space.low[-Obs.SIZE:], space.high[-Obs.SIZE:], dtype=space.dtype)
        action_space = model.action_space

    return _Spaces()

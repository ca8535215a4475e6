"""Train an SB3 pacing agent on RadixAuction-v0: TensorBoard logging, periodic evaluation,
checkpoints, resuming, and a checkpoint on Ctrl-C."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecNormalize

from .callbacks import EvalMetricsCallback, HParamsCallback
from .evaluation import DEFAULT_EVAL_SEED
from .sb3 import (ALGOS, algo_kwargs, check_algo, detect_algo, load_hyperparams, make_env, normalize_kwargs,
                  vecnormalize_path)


@dataclass
class TrainConfig:
    """One training run. Its outputs go to `logdir/run_name` (run_name defaults to `<algo>_s<seed>`)."""

    algo: str
    logdir: str | Path
    timesteps: int | None = None
    """Environment steps to train (over all envs); None: the YAML's n_timesteps. When resuming,
    this many more steps (the step count continues from the checkpoint's)."""
    seed: int = 0
    n_envs: int | None = None
    """Parallel envs (SubprocVecEnv when > 1); None: the YAML's n_envs, else 1."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    checkpoint_every: int | None = None
    """Save a checkpoint every this many environment steps (None: no periodic checkpoints)."""
    resume: str | Path | None = None
    """A model zip to continue training from (its VecNormalize statistics are loaded when present)."""
    hyperparams_file: str | Path | None = None
    """RL Zoo YAML file; None: hyperparams/<algo>.yml."""
    hyperparams: dict[str, Any] = field(default_factory=dict)
    """Overrides of the YAML's entries."""
    run_name: str | None = None
    eval_freq: int | None = None
    """Evaluate every this many environment steps; None: a tenth of the run."""
    eval_episodes: int = 5
    eval_seed: int = DEFAULT_EVAL_SEED
    progress: bool = True

    @property
    def run_dir(self) -> Path:
        return Path(self.logdir) / (self.run_name or f"{self.algo}_s{self.seed}")


def train(config: TrainConfig, callbacks: list[BaseCallback] | None = None) -> Path:
    """Train (or resume) and save `model.zip` (and `vecnormalize.pkl`) in the run directory;
    return the model's path. On KeyboardInterrupt, save the model as it is, flush TensorBoard and
    raise SystemExit(130)."""
    algo_cls = check_algo(config.algo)
    hp = load_hyperparams(config.algo, config.hyperparams_file, overrides=config.hyperparams)
    timesteps = int(config.timesteps if config.timesteps is not None else hp.get("n_timesteps", 100_000))
    n_envs = int(config.n_envs if config.n_envs is not None else hp.get("n_envs", 1))
    if timesteps < 1:
        raise ValueError(f"timesteps must be >= 1, got {timesteps}")
    run_dir = config.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    norm = normalize_kwargs(hp)
    env = make_env(config.env_kwargs, n_envs, config.seed, norm)
    model = _build_or_resume(config, algo_cls, hp, env, norm is not None)
    model.set_logger(configure(str(run_dir), ["tensorboard"]))
    with open(run_dir / "config.json", "w") as f:
        json.dump({**asdict(config), "logdir": str(config.logdir), "resume": str(config.resume or ""),
                   "hyperparams_file": str(config.hyperparams_file or ""), "hyperparams": hp,
                   "timesteps": timesteps, "n_envs": n_envs}, f, indent=2, default=str)
    eval_freq = config.eval_freq or max(timesteps // 10, 1)
    cbs: list[BaseCallback] = [
        HParamsCallback({"algo": config.algo, "seed": config.seed, "n_envs": n_envs, "timesteps": timesteps,
                         "env_kwargs": json.dumps(config.env_kwargs, sort_keys=True),
                         **{k: v for k, v in hp.items() if k != "n_timesteps"}}),
        EvalMetricsCallback(config.env_kwargs, eval_freq, config.eval_episodes, config.eval_seed),
    ]
    if config.checkpoint_every:
        cbs.append(CheckpointCallback(max(config.checkpoint_every // n_envs, 1), str(run_dir / "checkpoints"),
                                      name_prefix=config.algo, save_vecnormalize=True))
    model_path = run_dir / "model.zip"
    try:
        model.learn(timesteps, callback=cbs + list(callbacks or []), progress_bar=config.progress,
                    reset_num_timesteps=config.resume is None)
    except KeyboardInterrupt:
        _save(model, model_path)
        print(f"\ninterrupted at step {model.num_timesteps}; saved {model_path}")
        raise SystemExit(130) from None
    finally:
        model.logger.close()  # flushes TensorBoard
        _close(env)
    _save(model, model_path)
    return model_path


def _build_or_resume(config: TrainConfig, algo_cls: type, hp: dict[str, Any], env, normalized: bool):
    """A new model on `env`, or the one saved at `config.resume` attached to it (with its
    VecNormalize statistics copied into `env`)."""
    if config.resume is None:
        return algo_cls(hp.get("policy", "MlpPolicy"), env, seed=config.seed, device="cpu", verbose=0,
                        **algo_kwargs(hp, env.action_space.shape[0]))
    path = Path(config.resume)
    if not path.exists():
        raise ValueError(f"--resume: model not found: {path}")
    saved = detect_algo(path)
    if saved != config.algo:
        raise ValueError(f"--resume: {path} was trained with {saved}, not {config.algo}")
    stats = vecnormalize_path(path)
    if normalized and stats is not None:
        loaded = VecNormalize.load(str(stats), env.venv)
        env.obs_rms, env.ret_rms = loaded.obs_rms, loaded.ret_rms
    return ALGOS[saved].load(path, env=env, device="cpu")


def _close(env) -> None:
    """Close the envs; after Ctrl-C, SubprocVecEnv workers may already be gone."""
    try:
        env.close()
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass


def _save(model, path: Path) -> None:
    """Save the model zip and, when the env is normalized, `vecnormalize.pkl` beside it."""
    model.save(path)
    vec_norm = model.get_vec_normalize_env()
    if vec_norm is not None:
        vec_norm.save(str(path.with_name("vecnormalize.pkl")))

"""Train a pacing agent on RadixAuction-v2: TensorBoard logging, periodic evaluation,
checkpoints, resuming, and a checkpoint on Ctrl-C.

`train` dispatches a run to its learner's family (`agents.learners.LEARNERS`): an SB3 algorithm to
`train_sb3` here, a policy search to `agents.policy_search.train_search`; both take the same
`TrainConfig` and return a `TrainResult`.

Every new run gets a folder of its own (`agents.run_dir`: `<algo>_s<seed>`, then `_2`, `_3`, ...);
a resumed run continues in its model's run folder unless given another `run_name`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.vec_env import VecNormalize, unwrap_vec_normalize

from auction_gym import core
from auction_gym._checks import check_count
from auction_gym.registry import resolve

from .callbacks import EvalMetricsCallback, HParamsCallback, OnEvaluation
from .evaluation import DEFAULT_EVAL_SEED
from .learners import TRAINERS, learner, names_text
from .run_dir import new_run_dir
from .sb3 import (
    ALGOS,
    DEFAULT_VEC_ENV,
    ENV_ID,
    VEC_ENVS,
    algo_kwargs,
    check_algo,
    check_hyperparams,
    detect_algo,
    load_hyperparams,
    make_env,
    normalize_kwargs,
    run_folder,
    vecnormalize_path,
)


def _about(help: str, **reading: Any) -> dict[str, Any]:
    """A TrainConfig field's metadata: `help`, what it means (also its `radix-auction train`
    option's help), and how the command line reads it (`positive`: an int >= 1; `seed`: a random seed;
    `choices`; `metavar`)."""
    return {"help": help, **reading}


@dataclass
class TrainConfig:
    """One training run. Its outputs go to a new folder `logdir/run_name` (run_name defaults to
    `<algo>_s<seed>`; numbered `_2`, `_3`, ... when taken, see `agents.run_dir`). Each field's
    meaning is its `metadata["help"]`, from which `radix-auction train` derives its options."""

    algo: str = field(default="ppo", metadata=_about(f"the learner: one of {names_text()}"))
    logdir: str | Path = field(default="runs", metadata=_about(
        "root of the run folders: the run goes to LOGDIR/<algo>_s<seed>, numbered _2, _3, ... when that is taken"))
    timesteps: int | None = field(default=None, metadata=_about(
        "environment steps to train (over all envs; default: the YAML's n_timesteps); when resuming, this many "
        "more (the step count continues from the checkpoint's)", positive=True))
    seed: int = field(default=0, metadata=_about("seed of the model and of the training envs (env i gets SEED + i)",
                                                 seed=True))
    n_envs: int | None = field(default=None, metadata=_about(
        "envs stepped together (see vec_env; default: the YAML's n_envs, else 1); a policy search plays its episodes "
        "one after another and does not use it", positive=True))
    env_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_about("the env's arguments"))
    env_id: str = field(default=ENV_ID, metadata=_about(
        "the registered env to train on; also the key of the hyperparameter files' entries"))
    vec_env: str = field(default=DEFAULT_VEC_ENV, metadata=_about(
        "batched: the envs in this process stepped as one batch; dummy: the envs in this process one by one (the "
        "same training as batched); subproc: a process per env", choices=tuple(VEC_ENVS)))
    checkpoint_every: int | None = field(default=None, metadata=_about(
        "save a checkpoint every N environment steps to <run>/checkpoints/ (default: none)", positive=True))
    resume: str | Path | None = field(default=None, metadata=_about(
        "a model zip to continue training (its VecNormalize statistics are loaded when present; the step count "
        "continues)", metavar="PATH"))
    hyperparams_file: str | Path | None = field(default=None, metadata=_about(
        "RL Zoo YAML file (default agents/hyperparams/<algo>.yml)"))
    hyperparams: dict[str, Any] = field(default_factory=dict, metadata=_about(
        "overrides of the YAML's entries, e.g. n_steps=256 learning_rate=1e-3"))
    run_name: str | None = field(default=None, metadata=_about(
        "run folder name (default <algo>_s<seed>; when resuming, the resumed run's folder)"))
    overwrite: bool = field(default=False, metadata=_about(
        "write into LOGDIR/<run name> itself, deleting an earlier run's model, statistics, config, checkpoints and "
        "TensorBoard events there"))
    eval_freq: int | None = field(default=None, metadata=_about(
        "evaluate every N environment steps, at the next rollout boundary (EvalMetricsCallback; default: a tenth "
        "of the run, and at least one rollout)", positive=True))
    eval_episodes: int = field(default=5, metadata=_about("episodes per evaluation during training", positive=True))
    eval_seed: int = field(default=DEFAULT_EVAL_SEED, metadata=_about(
        "evaluation episode k uses seed EVAL_SEED + k", seed=True))
    progress: bool = field(default=True, metadata=_about("show a progress bar"))
    torch_threads: int | None = field(default=1, metadata=_about(
        "PyTorch CPU threads of this process (torch.set_num_threads; None: torch's default of one per core). One "
        "by default: the networks are small, and with a thread per core a run slows down several-fold whenever "
        "another process is busy (experiments.bench.threads)", positive=True))


def set_torch_threads(threads: int | None) -> None:
    """`torch.set_num_threads(threads)`, validated; None changes nothing."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"torch_threads must be an integer >= 1 or None, got {threads!r}")
    import torch

    torch.set_num_threads(threads)


@dataclass(frozen=True)
class TrainResult:
    """What a finished training run wrote and did."""

    model_path: Path
    run_dir: Path
    asked: int
    """Environment steps asked for."""
    trained: int
    """Environment steps trained in this run: more than asked when the algorithm collects whole
    rollouts (PPO and A2C: n_steps x n_envs steps at a time)."""
    eval_steps: tuple[int, ...]
    """The timesteps at which `eval/*` was logged, during and at the end of training."""
    final_evaluation: tuple[dict[str, float], ...] = ()
    """Per-episode metrics of the evaluation at the end of training (`eval_episodes` episodes,
    seeds eval_seed, eval_seed + 1, ...)."""
    initial_model_path: Path | None = None
    """The policy as it was before training (`initial/model.zip` in the run folder, with its
    normalization statistics), what a learned row's gain is measured from; None for a resumed run."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """The env arguments the model plays in: the run's, with its learner file's `action_kwargs`
    over them (`played_config`). Evaluate the model, and its start, in these."""


Trainer = Callable[..., TrainResult]


def train(config: TrainConfig, callbacks: list[BaseCallback] | None = None,
          on_evaluation: OnEvaluation | None = None) -> TrainResult:
    """Train one run of `config.algo`, whichever learner it is (see the module docstring).
    `callbacks` are SB3 callbacks (an SB3 learner only); `on_evaluation` is called after each
    evaluation during training and may stop it (`agents.callbacks.OnEvaluation`)."""
    trainer: Trainer = resolve(TRAINERS[learner(config.algo).family])
    return trainer(played_config(config), callbacks, on_evaluation)


def played_config(config: TrainConfig) -> TrainConfig:
    """`config` with its hyperparameters' `action_kwargs` (the action type the learner's policy
    plays, `agents.sb3.ACTING`) over its env kwargs: the env the run trains and evaluates in and
    saves with its model. A learner whose file gives none plays the run's own action."""
    hp = load_hyperparams(config.algo, config.hyperparams_file, env_id=config.env_id, overrides=config.hyperparams)
    acting = hp.get("action_kwargs") or {}
    return replace(config, env_kwargs={**config.env_kwargs, **acting}) if acting else config


def action_changes(run_kwargs: dict[str, Any], played_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The env arguments a run played with other values than it was given (its learner's
    `action_kwargs`, see `played_config`), for saying so."""
    return {k: v for k, v in played_kwargs.items() if run_kwargs.get(k) != v}


def run_settings(config: TrainConfig, default_timesteps: int) -> tuple[dict[str, Any], int, int]:
    """The run's hyperparameters (the file's entry for its env id, with the config's overrides),
    steps to train and envs (the config's, else the file's)."""
    hp = load_hyperparams(config.algo, config.hyperparams_file, env_id=config.env_id, overrides=config.hyperparams)
    # check_count, not int(): int() made 2.5 envs 2 and 0.5 timesteps 0 ("got 0"); 1e5 as a float is taken.
    timesteps = check_count("timesteps", config.timesteps if config.timesteps is not None
                            else hp.get("n_timesteps", default_timesteps))
    n_envs = check_count("n_envs", config.n_envs if config.n_envs is not None else hp.get("n_envs", 1))
    return hp, timesteps, n_envs


def write_config(config: TrainConfig, run_dir: Path, hp: dict[str, Any], timesteps: int, n_envs: int) -> None:
    """The run's `config.json` (what `agents.sb3.saved_env_kwargs` reads back), with the simulator's
    core it ran on (`auction_gym.core`)."""
    with open(run_dir / "config.json", "w") as f:
        json.dump({**asdict(config), "logdir": str(config.logdir), "resume": str(config.resume or ""),
                   "hyperparams_file": str(config.hyperparams_file or ""), "hyperparams": hp,
                   "timesteps": timesteps, "n_envs": n_envs, "core": core.active()}, f, indent=2, default=str)


def train_sb3(config: TrainConfig, callbacks: list[BaseCallback] | None = None,
              on_evaluation: OnEvaluation | None = None) -> TrainResult:
    """Train (or resume) an SB3 algorithm and save `model.zip` (and `vecnormalize.pkl`) in the run
    directory. On KeyboardInterrupt, save the model as it is, mark the run interrupted in
    TensorBoard's HPARAMS, flush TensorBoard and raise SystemExit(130)."""
    algo_cls = check_algo(config.algo)
    set_torch_threads(config.torch_threads)
    hp, timesteps, n_envs = run_settings(config, 100_000)
    check_hyperparams(config.algo, hp)
    norm = normalize_kwargs(hp)
    env = make_env({**config.env_kwargs, **hp.get("train_env_kwargs", {})}, n_envs, config.seed, norm,
                   int(hp.get("frame_stack", 1)), config.env_id, config.vec_env)
    try:
        model = _build_or_resume(config, algo_cls, hp, env, norm is not None)
    except BaseException:
        _close(env)
        raise
    run_dir = run_dir_of(config)
    model.set_logger(configure(str(run_dir), ["tensorboard"]))
    write_config(config, run_dir, hp, timesteps, n_envs)
    hparams, evaluation, cbs = _callbacks(config, hp, model, run_dir, timesteps, n_envs, on_evaluation)
    model_path, start = run_dir / "model.zip", model.num_timesteps
    # The untrained policy, what a learned row's gain is measured from (`compare`).
    initial = None if config.resume is not None else run_dir / "initial" / "model.zip"
    if initial is not None:
        _save(model, initial)
    status = "failed"
    try:
        model.learn(timesteps, callback=cbs + list(callbacks or []), progress_bar=config.progress,
                    reset_num_timesteps=config.resume is None)
        status = "success"
    except KeyboardInterrupt:
        status = "interrupted"
        _save(model, model_path)
        print(f"\ninterrupted at step {model.num_timesteps}; saved {model_path}")
        raise SystemExit(130) from None
    finally:
        hparams.finish(status)
        model.logger.close()  # flushes TensorBoard
        _close(env)
    _save(model, model_path)
    return TrainResult(model_path, run_dir, timesteps, model.num_timesteps - start, tuple(evaluation.steps),
                       tuple(evaluation.last_results), initial_model_path=initial, env_kwargs=config.env_kwargs)


def _callbacks(config: TrainConfig, hp: dict[str, Any], model, run_dir: Path, timesteps: int, n_envs: int,
               on_evaluation: OnEvaluation | None) -> tuple[HParamsCallback, EvalMetricsCallback, list[BaseCallback]]:
    """The run's HPARAMS and evaluation callbacks, and all its callbacks (with checkpoints)."""
    rollout = model.n_steps * n_envs if isinstance(model, OnPolicyAlgorithm) else 1
    hparams = HParamsCallback({"algo": config.algo, "seed": config.seed, "n_envs": n_envs, "timesteps": timesteps,
                               "env_kwargs": json.dumps(config.env_kwargs, sort_keys=True),
                               **{k: v for k, v in hp.items() if k != "n_timesteps"}})
    evaluation = EvalMetricsCallback(config.env_kwargs, config.eval_freq or max(timesteps // 10, rollout),
                                     config.eval_episodes, config.eval_seed, config.env_id, on_evaluation)
    cbs: list[BaseCallback] = [hparams, evaluation]
    if config.checkpoint_every:
        cbs.append(CheckpointCallback(max(config.checkpoint_every // n_envs, 1), str(run_dir / "checkpoints"),
                                      name_prefix=config.algo, save_vecnormalize=True))
    return hparams, evaluation, cbs


def run_dir_of(config: TrainConfig) -> Path:
    """The run's folder, created: a resumed run's own folder (unless given a run_name), else a new
    one (`agents.run_dir.new_run_dir`)."""
    if config.resume is not None and config.run_name is None:
        return run_folder(config.resume)
    return new_run_dir(Path(config.logdir) / (config.run_name or f"{config.algo}_s{config.seed}"), config.overwrite)


def _build_or_resume(config: TrainConfig, algo_cls: type, hp: dict[str, Any], env, normalized: bool):
    """A new model on `env`, or the one saved at `config.resume` attached to it (with its
    VecNormalize statistics copied into `env`)."""
    if config.resume is None:
        try:
            return algo_cls(hp.get("policy", "MlpPolicy"), env, seed=config.seed, device="cpu", verbose=0,
                            **algo_kwargs(hp, env.action_space.shape[0]))
        except (AssertionError, TypeError, ValueError) as e:  # SB3 checks its arguments with assert
            raise ValueError(f"{config.algo} rejected its hyperparameters: {' '.join(str(e).split())}") from None
    path = Path(config.resume)
    if not path.exists():
        raise ValueError(f"--resume: model not found: {path}")
    saved = detect_algo(path)
    if ALGOS[saved] is not algo_cls:  # learners of one class (ppo, ppo_paired) resume each other's models
        raise ValueError(f"--resume: {path} was trained with {saved}, not {config.algo}")
    stats, vec_norm = vecnormalize_path(path), unwrap_vec_normalize(env)
    if normalized and stats is not None and vec_norm is not None:
        loaded = VecNormalize.load(str(stats), vec_norm.venv)
        vec_norm.obs_rms, vec_norm.ret_rms = loaded.obs_rms, loaded.ret_rms
    return ALGOS[saved].load(path, env=env, device="cpu")


def _close(env) -> None:
    """Close the envs; after Ctrl-C, SubprocVecEnv workers may already be gone."""
    try:
        env.close()
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass


def _save(model, path: Path) -> None:
    """Save the model zip and, when the env is normalized, `vecnormalize.pkl` beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    vec_norm = model.get_vec_normalize_env()
    if vec_norm is not None:
        vec_norm.save(str(path.with_name("vecnormalize.pkl")))

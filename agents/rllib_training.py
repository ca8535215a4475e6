"""Train every bidder at once with RLlib PPO over the PettingZoo env: TensorBoard logging with
the `eval/*` tags every policy has, periodic evaluation, checkpoints, and a checkpoint on Ctrl-C.

A run's folder (`agents.run_dir.new_run_dir`: `rllib_<sharing>_s<seed>`, then `_2`, ...) holds
`checkpoint/` (RLlib's algorithm checkpoint, `agents.rllib.load_population` reads its modules),
`checkpoints/step_<n>/` when asked for, `config.json` and the TensorBoard events:

- `eval/<metric>`: bidder 0's learned policy as the focal bidder of `RadixAuction-v0` against OGD
  opponents, evaluated by `agents.evaluation.evaluate` on the seeds every policy is evaluated on,
  so its curves overlay SB3's and the built-ins' (x axis: environment steps, one per auction
  round, as in `RadixAuction-v0`);
- `population/<metric>`: the learned population, every bidder on its policy
  (`agents.population.evaluate_population`, same seeds);
- `rllib/...`: RLlib's own training results (episode returns, losses, sampling throughput);
- the HPARAMS tab with the run's status ("success", or "interrupted" after Ctrl-C).

Ray must be initialized first (`init_ray`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import ray
from ray.rllib.algorithms.algorithm import Algorithm
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from .callbacks import session_end
from .evaluation import DEFAULT_EVAL_SEED, METRICS, add_eval_scalars, evaluate, mean_metrics
from .population import MARKET_METRICS, agent_names, evaluate_population
from .ray_session import init_ray  # noqa: F401  (this module's callers start Ray through it)
from .rllib import algorithm_population, ppo_config
from .run_dir import new_run_dir

_LEARNER_STATS = ("policy_loss", "vf_loss", "entropy", "vf_explained_var")


@dataclass
class MultiTrainConfig:
    """One multi-agent training run, written to a new folder `logdir/run_name` (run_name defaults
    to `rllib_<sharing>_s<seed>`)."""

    logdir: str | Path
    timesteps: int = 20_000
    """Environment steps (auction rounds) to sample; training stops after the iteration that
    reaches them."""
    sharing: str = "shared"
    """"shared" (one policy for every bidder) or "per_bidder" (`agents.rllib.SHARING`)."""
    seed: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    num_env_runners: int = 0
    """Sampling actors; 0 samples in the driver, between learner updates."""
    num_learners: int = 0
    """Learner actors; 0 updates in the driver. Each learns from a batch of its own
    (`train_batch_size_per_learner`), so an iteration samples that many steps per learner."""
    hyperparams: dict[str, Any] = field(default_factory=dict)
    """`PPOConfig.training` arguments over `agents.rllib.sb3_ppo_settings`."""
    checkpoint_every: int | None = None
    """Also save `checkpoints/step_<n>/` every this many environment steps (None: only the last)."""
    eval_freq: int | None = None
    """Evaluate after the first iteration at or past every multiple of this many environment
    steps, and at the end; None: a tenth of the run."""
    eval_episodes: int = 5
    eval_seed: int = DEFAULT_EVAL_SEED
    run_name: str | None = None
    overwrite: bool = False


@dataclass(frozen=True)
class MultiTrainResult:
    """What a finished run wrote and did."""

    checkpoint: Path
    run_dir: Path
    asked: int
    trained: int
    """Environment steps sampled: whole iterations, so at least `asked`."""
    iterations: int
    eval_steps: tuple[int, ...]
    wall_s: float


def train_multi(config: MultiTrainConfig,
                on_iteration: Callable[[int, dict[str, Any]], None] | None = None) -> MultiTrainResult:
    """Train, evaluate and checkpoint (module docstring); `on_iteration(env_steps, result)` is
    called after every iteration. On KeyboardInterrupt, save `checkpoint/` as the policies are,
    mark the run interrupted and raise SystemExit(130)."""
    if config.timesteps < 1:
        raise ValueError(f"timesteps must be >= 1, got {config.timesteps}")
    rllib_config = ppo_config(config.env_kwargs, config.sharing, config.num_env_runners, config.seed,
                              config.hyperparams, config.num_learners)
    run_dir = new_run_dir(Path(config.logdir) / (config.run_name or f"rllib_{config.sharing}_s{config.seed}"),
                          config.overwrite)
    (run_dir / "config.json").write_text(json.dumps({**asdict(config), "logdir": str(config.logdir),
                                                     "ray_version": ray.__version__}, indent=2, default=str))
    algo = rllib_config.build_algo()
    run = _Run(config, algo, SummaryWriter(str(run_dir)), run_dir, time.perf_counter())
    status = "failed"
    try:
        run.start()
        run.loop(on_iteration)
        checkpoint = run.save(run_dir / "checkpoint")
        status = "success"
    except KeyboardInterrupt:
        status = "interrupted"
        checkpoint = run.save(run_dir / "checkpoint")
        print(f"\ninterrupted at step {run.steps}; saved {checkpoint}")
        raise SystemExit(130) from None
    finally:
        run.finish(status)
        algo.stop()
    return MultiTrainResult(checkpoint, run_dir, config.timesteps, run.steps, run.iterations, tuple(run.eval_steps),
                            time.perf_counter() - run.started)


@dataclass
class _Run:
    """The state of a run in progress."""

    config: MultiTrainConfig
    algo: Algorithm
    writer: SummaryWriter
    run_dir: Path
    started: float
    steps: int = 0
    iterations: int = 0
    eval_steps: list[int] = field(default_factory=list)

    def start(self) -> None:
        """The HPARAMS session's start (its end is written by `finish`)."""
        c = self.config
        hp = {"sharing": c.sharing, "seed": c.seed, "timesteps": c.timesteps, "num_env_runners": c.num_env_runners,
              "num_learners": c.num_learners, "env_kwargs": json.dumps(c.env_kwargs, sort_keys=True),
              **{k: str(v) for k, v in c.hyperparams.items()}}
        metrics = {f"eval/{m}": 0.0 for m in METRICS} | {f"population/{m}": 0.0 for m in MARKET_METRICS}
        # Not hparams()'s third summary, a session end marked "success": `finish` writes the real one.
        experiment, session_start, _ = hparams(hp, metrics)
        for summary in (experiment, session_start):
            self.writer.file_writer.add_summary(summary)

    def loop(self, on_iteration: Callable[[int, dict[str, Any]], None] | None) -> None:
        """Train whole iterations until `timesteps` environment steps are sampled, evaluating and
        checkpointing on the way."""
        c = self.config
        eval_freq = c.eval_freq or max(c.timesteps // 10, 1)
        next_eval, next_checkpoint = eval_freq, c.checkpoint_every
        while self.steps < c.timesteps:
            t0 = time.perf_counter()
            result = self.algo.train()
            self.iterations += 1
            sampled = int(result["num_env_steps_sampled_lifetime"]) - self.steps
            self.steps += sampled
            log_training(self.writer, result, self.steps, sampled / (time.perf_counter() - t0))
            if self.steps >= next_eval or self.steps >= c.timesteps:
                self.evaluate()
                next_eval = (self.steps // eval_freq + 1) * eval_freq
            if next_checkpoint is not None and self.steps >= next_checkpoint:
                self.save(self.run_dir / "checkpoints" / f"step_{self.steps}")
                next_checkpoint = (self.steps // c.checkpoint_every + 1) * c.checkpoint_every
            if on_iteration is not None:
                on_iteration(self.steps, result)

    def evaluate(self) -> None:
        """`eval/*` (bidder 0's policy against OGD) and `population/*` (every bidder learned) at
        the current step."""
        c = self.config
        agents = agent_names(c.env_kwargs)
        population = algorithm_population(self.algo, c.sharing, agents)
        focal = evaluate(population[agents[0]], c.env_kwargs, c.eval_episodes, c.eval_seed, progress=False)
        add_eval_scalars(self.writer, mean_metrics(focal), self.steps)
        episodes = evaluate_population(population, c.env_kwargs, c.eval_episodes, c.eval_seed, progress=False)
        for key in episodes[0]:
            self.writer.add_scalar(f"population/{key}", sum(e[key] for e in episodes) / len(episodes), self.steps)
        self.writer.flush()
        self.eval_steps.append(self.steps)

    def save(self, path: Path) -> Path:
        """An algorithm checkpoint at `path` (replacing one there)."""
        return Path(self.algo.save_to_path(str(path.resolve())))

    def finish(self, status: str) -> None:
        """The run's status as text (`run/status`) and HPARAMS session end; flushes TensorBoard."""
        self.writer.add_text("run/status", f"{status} at step {self.steps}", self.steps)
        self.writer.file_writer.add_summary(session_end(status))
        self.writer.close()


def log_training(writer: SummaryWriter, result: dict[str, Any], steps: int, steps_per_s: float) -> None:
    """RLlib's training results of one iteration under `rllib/` at `steps`: the mean episode
    return (all bidders, scaled reward) and each module's, each module's losses, entropy and value
    explained variance, and the environment steps sampled per wall second of the iteration."""
    runners, learners = result.get("env_runners", {}), result.get("learners", {})
    scalars = {"rllib/env_steps_per_s": steps_per_s}
    if "episode_return_mean" in runners:
        scalars["rllib/episode_return_mean"] = runners["episode_return_mean"]
    for module, value in runners.get("module_episode_returns_mean", {}).items():
        scalars[f"rllib/{module}/episode_return_mean"] = value
    for module, stats in learners.items():
        scalars.update({f"rllib/{module}/{k}": stats[k] for k in _LEARNER_STATS if k in stats})
    for tag, value in scalars.items():
        writer.add_scalar(tag, float(value), steps)


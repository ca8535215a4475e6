"""Hyperparameter search with Optuna, in the manner of RL Zoo's `--optimize`.

A trial samples hyperparameters from its learner's search space (`SEARCH_SPACES`, Optuna's TPE
sampler), trains one run of `timesteps` steps on the given env (`n_envs` envs in one process,
`agents.training.train`), and is scored by the focal bidder's mean utility on the tuning episodes,
seeds TUNING_SEED.. TUNING_SEED + episodes - 1, all below `DEFAULT_EVAL_SEED`: a study never plays an
evaluation episode, so what it chooses is scored afresh on those. The run is evaluated on the same
tuning episodes `evaluations` times during training; each evaluation is reported to Optuna and the
median pruner stops a trial whose curve falls below the median of the earlier trials' at the same
step (after `startup_trials` complete trials and past the first third of the run, RL Zoo's
settings; never at the end of a run, which is then complete).

Trials may run in several processes at once (`optimize`, one per process, one torch thread each)
sharing one study in a JournalStorage file. `study_rows` and `best_snippet` are what
`radix-auction tune` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml

from .baselines import TUNING_SEED
from .evaluation import DEFAULT_EVAL_SEED
from .sb3 import ENV_ID, load_hyperparams
from .training import TrainConfig, set_torch_threads, train


@dataclass(frozen=True)
class Dimension:
    """One hyperparameter's range: "choice" of `values`, "uniform" or "log" between values[0] and values[1]."""

    kind: str
    values: tuple

    def suggest(self, trial, name: str) -> Any:
        if self.kind == "choice":
            return trial.suggest_categorical(name, list(self.values))
        return trial.suggest_float(name, *self.values, log=self.kind == "log")

    def describe(self) -> str:
        if self.kind == "choice":
            return "{" + ", ".join(map(str, self.values)) + "}"
        return f"{self.kind}[{self.values[0]:g}, {self.values[1]:g}]"


def _choice(*values: Any) -> Dimension:
    return Dimension("choice", values)


NET_ARCHS = {"tiny": [32], "small": [64, 64], "medium": [256, 256]}
"""Hidden layers of the policy (and value) networks by the size names the search spaces choose."""
SEARCH_SPACES: dict[str, dict[str, Dimension]] = {
    "ppo": {
        "learning_rate": Dimension("log", (1e-5, 1e-2)),
        "n_steps": _choice(64, 128, 256, 512, 1024, 2048),
        "batch_size": _choice(32, 64, 128, 256),
        "n_epochs": _choice(1, 5, 10, 20),
        "gamma": _choice(0.9, 0.95, 0.98, 0.99, 0.995, 0.999),
        "gae_lambda": _choice(0.8, 0.9, 0.92, 0.95, 0.98, 1.0),
        "clip_range": _choice(0.1, 0.2, 0.3, 0.4),
        "ent_coef": Dimension("log", (1e-8, 0.1)),
        "log_std_init": Dimension("uniform", (-3.0, 0.0)),
        "net_arch": _choice(*NET_ARCHS),
    },
    "sac": {
        "learning_rate": Dimension("log", (1e-5, 1e-2)),
        "batch_size": _choice(64, 128, 256, 512),
        "buffer_size": _choice(10_000, 100_000, 1_000_000),
        "learning_starts": _choice(0, 1_000, 10_000),
        "train_freq": _choice(1, 4, 8, 16),
        "gamma": _choice(0.95, 0.98, 0.99, 0.995, 0.999),
        "tau": _choice(0.001, 0.005, 0.01, 0.02, 0.05),
        "log_std_init": Dimension("uniform", (-4.0, 1.0)),
        "net_arch": _choice(*NET_ARCHS),
    },
}
"""Each tunable learner's search space (RL Zoo's, with net_arch as a size name)."""


def search_space_text(algo: str) -> str:
    """The search space as one line per hyperparameter, for file headers."""
    return "\n".join(f"{name}: {dim.describe()}" for name, dim in SEARCH_SPACES[algo].items())


def hyperparams_of(algo: str, sampled: dict[str, Any], n_envs: int) -> dict[str, Any]:
    """The overrides of `algo`'s hyperparameter file that `sampled` (a trial's params) stands for, in
    the file's format: `log_std_init` and `net_arch` go into `policy_kwargs`; PPO's batch is at
    most a rollout (n_steps x n_envs) and SAC takes a gradient step per step collected (RL Zoo)."""
    hp = {k: v for k, v in sampled.items() if k not in ("log_std_init", "net_arch")}
    arch = NET_ARCHS[sampled["net_arch"]]
    net = f"dict(pi={arch}, vf={arch})" if algo == "ppo" else str(arch)
    hp["policy_kwargs"] = f"dict(log_std_init={sampled['log_std_init']!r}, net_arch={net})"
    if algo == "ppo":
        hp["batch_size"] = min(hp["batch_size"], hp["n_steps"] * n_envs)
    else:
        hp["gradient_steps"] = hp["train_freq"]
    return hp


@dataclass(frozen=True)
class Objective:
    """What a trial trains and how it is scored (see the module docstring)."""

    algo: str
    env_kwargs: dict[str, Any]
    timesteps: int
    n_envs: int
    episodes: int
    """Tuning episodes, seeds TUNING_SEED..TUNING_SEED + episodes - 1."""
    logdir: str
    """Where each trial's run folder goes (`trial_<number>`)."""
    evaluations: int = 4
    """Evaluations on the tuning episodes during a trial's run (the pruner's intermediate values)."""
    env_id: str = ENV_ID
    seed: int = 0

    def __post_init__(self) -> None:
        if self.algo not in SEARCH_SPACES:
            raise ValueError(f"no search space for algo {self.algo!r}; valid: {', '.join(SEARCH_SPACES)}")
        if TUNING_SEED + self.episodes > DEFAULT_EVAL_SEED:
            raise ValueError(f"tuning seeds {TUNING_SEED}..{TUNING_SEED + self.episodes - 1} reach the evaluation "
                             f"seeds ({DEFAULT_EVAL_SEED} on)")
        if self.evaluations < 1 or self.timesteps < 1 or self.n_envs < 1 or self.episodes < 1:
            raise ValueError("evaluations, timesteps, n_envs and episodes must each be >= 1")

    def __call__(self, trial) -> float:
        import optuna

        hp = hyperparams_of(self.algo, {n: d.suggest(trial, n) for n, d in SEARCH_SPACES[self.algo].items()},
                            self.n_envs)
        stopped = []

        def report(step: int, results: Sequence[dict[str, float]]) -> bool:
            trial.report(float(np.mean([r["utility"] for r in results])), step)
            # A run that has reached its budget is complete: its final score informs the sampler.
            if step < self.timesteps and trial.should_prune():
                stopped.append(step)
            return not stopped

        result = train(TrainConfig(
            algo=self.algo, logdir=self.logdir, timesteps=self.timesteps, seed=self.seed, n_envs=self.n_envs,
            env_kwargs=self.env_kwargs, env_id=self.env_id, hyperparams=hp, run_name=f"trial_{trial.number}",
            eval_freq=max(self.timesteps // self.evaluations, 1), eval_episodes=self.episodes, eval_seed=TUNING_SEED,
            progress=False, torch_threads=1), on_evaluation=report)
        if stopped:
            raise optuna.TrialPruned(f"pruned at step {stopped[0]}")
        return float(np.mean([r["utility"] for r in result.final_evaluation]))


def storage(path: str | Path):
    """An Optuna JournalStorage in the file `path`, which several processes may share."""
    import optuna

    journal = getattr(optuna.storages, "journal", None)
    backend_cls = getattr(journal, "JournalFileBackend", None) or optuna.storages.JournalFileStorage
    return optuna.storages.JournalStorage(backend_cls(str(path)))


def create_study(path: str | Path, name: str) -> None:
    """A new study maximizing utility in the journal file `path`, for `optimize` to run trials of."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(storage=storage(path), study_name=name, direction="maximize")


def load_study(path: str | Path, name: str, seed: int = 0, startup_trials: int = 5, warmup_steps: int = 0,
               prune: bool = True):
    """The study `name` of the journal `path` with the TPE sampler (seeded `seed`) and the median
    pruner (from `startup_trials` complete trials on, past `warmup_steps` steps; none when `prune`
    is false)."""
    import optuna

    pruner = (optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=warmup_steps)
              if prune else optuna.pruners.NopPruner())
    return optuna.load_study(study_name=name, storage=storage(path), pruner=pruner,
                             sampler=optuna.samplers.TPESampler(n_startup_trials=startup_trials, seed=seed))


def optimize(path: str | Path, name: str, trials: int, objective: Objective, seed: int = 0,
             startup_trials: int = 5, prune: bool = True) -> int:
    """Run `trials` trials of the study `name` in the journal `path`, in this process on one torch
    thread (what each of `radix-auction tune --jobs`'s processes runs, each with its own `seed`);
    the number of trials run. The pruner waits for a third of the run, as RL Zoo's does."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    set_torch_threads(1)
    study = load_study(path, name, seed, startup_trials, objective.timesteps // 3, prune)
    study.optimize(objective, n_trials=trials)
    return trials


def study_rows(study) -> list[dict[str, Any]]:
    """One row per trial: number, state, value, each param, and the steps of its last report."""
    rows = []
    for t in study.trials:
        last = max(t.intermediate_values) if t.intermediate_values else None
        rows.append({"trial": t.number, "state": t.state.name, "value": t.value, "last_step": last,
                     **{f"param_{k}": v for k, v in t.params.items()}})
    return rows


def best_snippet(study, objective: Objective, header: str) -> str:
    """The best trial's hyperparameters as a YAML entry in the hyperparameter files' RL Zoo format
    (the file's entry for the env id with the trial's overrides, `n_envs` and `n_timesteps`),
    after `header` as comment lines."""
    best = study.best_trial
    hp = {**load_hyperparams(objective.algo, env_id=objective.env_id),
          **hyperparams_of(objective.algo, best.params, objective.n_envs),
          "n_envs": objective.n_envs}
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comments + yaml.safe_dump({objective.env_id: hp}, sort_keys=False, width=1_000)

"""`radix-auction tune`: search a learner's hyperparameters with Optuna, as RL Zoo's `--optimize` does.

Each of `--trials` trials samples hyperparameters from the learner's search space
(`agents.tuning.SEARCH_SPACES`, TPE sampler), trains `--timesteps` steps on `--n-envs` envs in one
process, in the scenario (`--scenario`, `--env-kwargs` over it), and is scored by the focal bidder's
mean utility on the tuning episodes, seeds 0..`--tuning-episodes` - 1 (never an evaluation seed,
1000 on). The run is evaluated on those episodes `--evaluations` times, and the median pruner stops
a trial below the earlier trials' median (`--no-pruning` turns it off). `--jobs` processes run
trials at once, sharing the study in OUT/study.journal (an Optuna JournalStorage file); each uses
one torch thread.

Writes to OUT (replacing an earlier search's files there): `trials.csv` and `trials.md` (every
trial: state, value, params), `best.yml` (the best trial's hyperparameters as an entry of
`agents/hyperparams/<algo>.yml`, RL Zoo format, with a header saying the search space, budget,
seeds and command), `study.journal`, and each trial's run folder in OUT/trials/.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import time
from pathlib import Path
from typing import Any

from agents.sb3 import ENV_ID
from agents.tuning import (
    SEARCH_SPACES,
    Objective,
    best_snippet,
    create_study,
    optimize,
    search_space_text,
    storage,
    study_rows,
)

from ..argtypes import positive_int, random_seed
from ..cli import run_command
from ..executor import Executor
from ..options import add_scenario_arguments, scenario_kwargs
from .headroom_report import TUNING_EPISODES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--algo", default="ppo", choices=list(SEARCH_SPACES),
                        help=f"the learner whose hyperparameters to search: {', '.join(SEARCH_SPACES)} (default ppo)")
    parser.add_argument("--trials", type=positive_int, default=20, help="trials of the study (default 20)")
    parser.add_argument("--timesteps", type=positive_int, default=30_000,
                        help="training steps per trial (default 30000)")
    parser.add_argument("--n-envs", type=positive_int, default=8,
                        help="envs stepped together in a trial's process (default 8)")
    parser.add_argument("--tuning-episodes", type=positive_int, default=TUNING_EPISODES,
                        help=f"episodes a trial is scored on, seeds 0..N-1 (default {TUNING_EPISODES})")
    parser.add_argument("--evaluations", type=positive_int, default=4,
                        help="evaluations on the tuning episodes during a trial, reported to the pruner (default 4)")
    parser.add_argument("--startup-trials", type=positive_int, default=5,
                        help="trials sampled at random before TPE, and completed before pruning starts (default 5)")
    parser.add_argument("--no-pruning", dest="prune", action="store_false", help="never prune a trial")
    parser.add_argument("--seed", type=random_seed, default=0,
                        help="seed of the sampler (process i: SEED + i) and of every trial's training (default 0)")
    parser.add_argument("--jobs", type=positive_int, default=1,
                        help="processes running trials at once, sharing the study (default 1)")
    add_scenario_arguments(parser)
    parser.add_argument("--env-id", default=ENV_ID,
                        help=f"registered env, and the hyperparameter files' key (default {ENV_ID})")
    parser.add_argument("--out", default="results/tune", help="directory for the study's files (default results/tune)")


def command_line(args: argparse.Namespace) -> str:
    """The `radix-auction tune` command of `args`, every option explicit."""
    return shlex.join([
        "radix-auction", "tune", "--algo", args.algo, "--trials", str(args.trials), "--timesteps",
        str(args.timesteps), "--n-envs", str(args.n_envs), "--tuning-episodes", str(args.tuning_episodes),
        "--evaluations", str(args.evaluations), "--startup-trials", str(args.startup_trials),
        *([] if args.prune else ["--no-pruning"]), "--seed", str(args.seed), "--jobs", str(args.jobs),
        "--scenario", args.scenario, "--env-kwargs", json.dumps(args.env_kwargs), "--env-id", args.env_id,
        "--out", str(args.out)])


def shares(trials: int, jobs: int) -> list[int]:
    """Trials per process: `trials` split over at most `jobs` processes as evenly as can be."""
    return [n for n in (trials // jobs + (i < trials % jobs) for i in range(jobs)) if n]


def run(args: argparse.Namespace) -> None:
    import optuna

    env_kwargs = scenario_kwargs(args.scenario, args.env_kwargs, args.env_id)
    out = Path(args.out)
    objective = Objective(args.algo, env_kwargs, args.timesteps, args.n_envs, args.tuning_episodes,
                          str(out / "trials"), args.evaluations, args.env_id, args.seed)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / "study.journal"
    journal.unlink(missing_ok=True)
    create_study(journal, args.algo)
    tasks = [(journal, args.algo, n, objective, args.seed + i, args.startup_trials, args.prune)
             for i, n in enumerate(shares(args.trials, args.jobs))]
    executor = Executor(len(tasks))
    print(f"{args.trials} trials of {args.timesteps} steps on {executor.where()}; tuning seeds "
          f"0..{args.tuning_episodes - 1}", flush=True)
    start = time.perf_counter()
    executor.map(optimize, tasks)
    wall = time.perf_counter() - start
    study = optuna.load_study(study_name=args.algo, storage=storage(journal))
    rows = study_rows(study)
    write(out, rows, header(args, wall), study, objective)


def header(args: argparse.Namespace, wall: float) -> str:
    """What a study's files say about it: command, search space, budget and seeds."""
    return (f"`{command_line(args)}`\n\nSearch space ({args.algo}):\n{search_space_text(args.algo)}\n\n"
            f"Budget: {args.trials} trials x {args.timesteps} steps on {args.n_envs} envs, {args.evaluations} "
            f"evaluations each; TPE sampler and {'the median pruner' if args.prune else 'no pruning'}, from "
            f"{args.startup_trials} complete trials on.\nSeeds: scored on tuning episodes 0..{args.tuning_episodes - 1}; "
            f"training seed {args.seed}; no evaluation seed (1000 on) played. Wall time {wall:.0f} s.")


def write(out: Path, rows: list[dict[str, Any]], text: str, study, objective: Objective) -> None:
    """trials.csv, trials.md and best.yml (when a trial completed) in `out`."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / "trials.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(r.get(k)) for k in keys) + " |" for r in rows]
    (out / "trials.md").write_text(text + "\n\n" + "\n".join(lines) + "\n")
    completed = [r for r in rows if r["state"] == "COMPLETE"]
    print("\n".join(lines))
    if not completed:
        print(f"\nno trial completed; wrote {out}/trials.csv, trials.md")
        return
    (out / "best.yml").write_text(best_snippet(study, objective, text.replace("`", "")))
    best = study.best_trial
    print(f"\nbest: trial {best.number}, mean tuning utility {best.value:.4g}; wrote {out}/trials.csv, trials.md, best.yml")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.tune ...`: the same as `radix-auction tune ...`."""
    run_command("tune", argv)


if __name__ == "__main__":
    main()

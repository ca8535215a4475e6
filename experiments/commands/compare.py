"""`radix-auction compare`: train pacing agents (any learner of `agents.learners`) and compare them
with OGD and truthful bidding.

Each run of `compare` writes its TensorBoard folders under a new ROOT = LOGDIR/compare (then
LOGDIR/compare_2, ... when taken; `--overwrite` reuses LOGDIR/compare): for each algorithm and
training seed 0..K-1, train (ROOT/<algo>_s<seed>: SB3's curves and `eval/*` over training), then
evaluate the final model, OGD and truthful on the same episodes (episode k seeded EVAL_SEED + k;
ROOT/eval/<policy>: `eval/*` per episode). Writes to OUT (replacing an earlier compare's files):

- `compare.csv`: per policy (a learned algorithm pooled over its seeds, each seed, each built-in)
  and metric: n, mean, 95% CI half-width and bounds;
- `episodes.csv`: every evaluation episode's metrics;
- `compare.md`: the table (mean ± 95% CI), with the command, scenario and ROOT;
- `compare.png`: one panel per metric, each policy's mean with its 95% CI, on the metric's units.

`utility_vs_ogd` is the paired difference of the focal bidder's utility from OGD's on the same
episode, the sharpest test of "beats OGD" (episode-to-episode variance cancels).

Before any training it runs the headroom report (`experiments.commands.headroom`: OUT/headroom.md, .csv,
.png), whose tuned choices are the tuned baselines; a baseline the report played on the same
evaluation episodes (truthful, ogd, the tuned ones) takes the report's episodes rather than being
played again. The scenario is a name of
`auction_gym.scenarios.SCENARIOS` ("calibrated" by default, RadixAuction-v1's defaults; "bursty_v0" is
the earlier one), with `--env-kwargs` over it.
Confidence intervals treat evaluation episodes as independent samples; pooled over training seeds
they understate the spread between seeds, which the per-seed rows show.

The headroom report, the training runs and the final evaluations are tasks of `--jobs` processes,
or of Ray with `--address` (`experiments.executor`); the rows are the same wherever they ran.
`--quick` (QUICK) runs every step at small sizes, for a first look at the outputs.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from agents.baselines import TUNED
from agents.evaluation import (
    DEFAULT_EVAL_SEED,
    METRIC_UNITS,
    METRICS,
    evaluate,
    log_episodes,
    policy_from_spec,
    policy_name,
)
from agents.learners import LEARNERS, check_hyperparams, names_text
from agents.run_dir import new_run_dir
from agents.sb3 import MODEL_SUFFIXES, load_hyperparams, load_policy
from agents.stats import format_ci, mean_ci
from agents.training import TrainConfig, set_torch_threads, train
from auction_gym.pacing import BUILTIN_POLICIES, PLAIN_POLICIES, Policy

from ..argtypes import positive_int
from ..cli import run_command
from ..errors import UsageError
from ..executor import Executor, add_address_argument, executor_of
from .headroom import TUNING_EPISODES, add_scenario_arguments, headroom, scenario_kwargs
from .headroom import markdown as headroom_markdown
from .headroom import write as write_headroom
from .policy_figure import plot_policies, trace
from .train import key_values

BASELINES = (*PLAIN_POLICIES, *TUNED)
COLUMNS = (*METRICS, "utility_vs_ogd")
UNITS = {**METRIC_UNITS, "utility_vs_ogd": METRIC_UNITS["utility"]}
FIGURE_EPISODES = 3
"""Evaluation episodes whose rounds policies.png plots (the first of them over time)."""
FULL = {"timesteps": 30_000, "seeds": 5, "episodes": 20, "tuning_episodes": TUNING_EPISODES}
"""The run's sizes by default (the options of the same names)."""
QUICK = {"timesteps": 2_048, "seeds": 2, "episodes": 5, "tuning_episodes": 3}
"""`--quick`'s sizes: two PPO rollouts per seed, which learn little; for a first look at the outputs."""
QUICK_WALL_TIME = "about a minute on 2 idle cores"
"""`--quick`'s cost, quoted by --help: 60 s of wall time measured on 2 idle cores (2 jobs; 104 s of
user CPU time), 74-77 s earlier with niced background work; README, "Two commands"."""


def _sizes_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"--{key.replace('_', '-')} {value}" for key, value in sizes.items())


def with_sizes(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with each size not given set to `--quick`'s or the full run's (QUICK, FULL)."""
    defaults = QUICK if args.quick else FULL
    return argparse.Namespace(**{**vars(args), **{k: v for k, v in defaults.items() if getattr(args, k) is None}})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--algos", default="ppo", help=f"comma-separated, from {names_text()} (default ppo)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a first look, {QUICK_WALL_TIME}: {_sizes_text(QUICK)} (each one given explicitly "
                        "still wins); the scenario and every policy are the full run's")
    parser.add_argument("--timesteps", type=positive_int, default=None,
                        help=f"training steps per algorithm and seed (default {FULL['timesteps']}, quick "
                        f"{QUICK['timesteps']})")
    parser.add_argument("--seeds", type=positive_int, default=None,
                        help=f"training seeds 0..K-1 per algorithm (default {FULL['seeds']}, quick {QUICK['seeds']})")
    parser.add_argument("--episodes", type=positive_int, default=None,
                        help=f"evaluation episodes per policy (default {FULL['episodes']}, quick {QUICK['episodes']})")
    parser.add_argument("--eval-seed", type=int, default=DEFAULT_EVAL_SEED,
                        help=f"evaluation episode k uses seed EVAL_SEED + k (default {DEFAULT_EVAL_SEED})")
    parser.add_argument("--baselines", default=",".join(BASELINES),
                        help=f"comma-separated built-in policies: {', '.join(BUILTIN_POLICIES)}, and "
                        f"{' and '.join(TUNED)}, chosen on tuning seeds (agents.baselines) (default {','.join(BASELINES)})")
    parser.add_argument("--tuning-episodes", type=positive_int, default=None,
                        help=f"episodes (seeds 0, 1, ...) the headroom report and the tuned baselines are "
                        f"chosen on (default {FULL['tuning_episodes']}, quick {QUICK['tuning_episodes']})")
    parser.add_argument("--n-envs", type=positive_int, default=1, help="parallel training envs (default 1)")
    parser.add_argument("--eval-freq", type=positive_int, default=None,
                        help="evaluate during training every N steps (default: a tenth of --timesteps)")
    parser.add_argument("--hyperparams", nargs="*", metavar="KEY=VALUE", default=[],
                        help="override YAML entries for every algorithm, e.g. n_steps=256")
    parser.add_argument("--logdir", default="runs",
                        help="TensorBoard root; this run's folders go to a new LOGDIR/compare (default runs)")
    parser.add_argument("--overwrite", action="store_true",
                        help="reuse LOGDIR/compare, deleting an earlier compare's models and events there")
    parser.add_argument("--out", default="results", help="directory for compare.csv/.md/.png (default results)")
    add_scenario_arguments(parser)
    parser.add_argument("--jobs", type=positive_int, default=2,
                        help="processes for the headroom report, the training runs and the evaluations (default 2)")
    add_address_argument(parser)
    parser.add_argument("--torch-threads", type=positive_int, default=1, help="PyTorch CPU threads (default 1)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")


def checked(args: argparse.Namespace) -> tuple[list[str], list[str], dict[str, Any]]:
    """The algorithms and baselines asked for and the env kwargs (the scenario's, `--env-kwargs`
    over them), every option checked before any work starts."""
    algos = [a for a in args.algos.split(",") if a]
    if not algos or any(a not in LEARNERS for a in algos):
        raise UsageError(f"unknown --algos {args.algos!r}; valid: {names_text()}")
    baselines = [b for b in args.baselines.split(",") if b]
    for spec in baselines:
        if spec in TUNED:
            continue
        if spec.endswith(MODEL_SUFFIXES):
            raise UsageError(f"--baselines: {spec!r} is a model; valid: {', '.join((*BUILTIN_POLICIES, *TUNED))}")
        try:
            policy_from_spec(spec)
        except ValueError as e:
            raise UsageError(f"--baselines: {e}") from None
    env_kwargs = scenario_kwargs(args.scenario, args.env_kwargs)
    hyperparams = key_values(args.hyperparams)
    for algo in algos:
        try:
            check_hyperparams(algo, load_hyperparams(algo, overrides=hyperparams))
        except ValueError as e:
            raise UsageError(f"--hyperparams: {e}") from None
    return algos, baselines, env_kwargs


def run(args: argparse.Namespace) -> None:
    args = with_sizes(args)
    algos, baselines, env_kwargs = checked(args)
    torch.set_num_threads(args.torch_threads)
    executor = executor_of(args)
    start = time.perf_counter()
    root = new_run_dir(Path(args.logdir) / "compare", args.overwrite)
    print(f"TensorBoard folders of this run: {root}", flush=True)
    out = Path(args.out)
    print("headroom report (before any training)", flush=True)
    report = headroom(env_kwargs, args.tuning_episodes, args.episodes, eval_seed=args.eval_seed, executor=executor)
    table = report.table
    write_headroom(out, table, f"Headroom of `{command_line(args, algos, baselines, env_kwargs)}`\n\nScenario: "
                   f"`{json.dumps(env_kwargs)}`", f"Headroom of scenario {args.scenario!r} (paired, 95% CI)")
    print(headroom_markdown(table), flush=True)
    choices = {r["policy"]: r["choice"] for r in table}
    episodes, notes, policies = run_all(args, algos, baselines, env_kwargs, root, report.tuned, choices, executor,
                                        report.episodes)
    groups = {**{a: [r for s in range(args.seeds) for r in episodes[f"{a}_s{s}"]] for a in algos}, **episodes}
    rows = summarize(groups, episodes.get("ogd"))
    wall = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "compare.csv", rows)
    write_episodes(out / "episodes.csv", episodes, args.eval_seed)
    table = markdown(rows, [*algos, *episodes]) + "\n\nAcross training seeds (95% CI over seeds):\n\n" + \
        seed_table(episodes, algos, args.seeds)
    (out / "compare.md").write_text(
        f"`{command_line(args, algos, baselines, env_kwargs)}`\n\nScenario (env kwargs): `{json.dumps(env_kwargs)}`; "
        f"{args.seeds} training seed(s) x {args.timesteps} steps per algorithm; {args.episodes} evaluation "
        f"episodes (seeds {args.eval_seed}..{args.eval_seed + args.episodes - 1}) per policy; wall time {wall:.0f} s "
        f"({executor.where()}); "
        f"models and TensorBoard events in `{root}`." + "".join(f"\n\n{note}" for note in notes)
        + f"\n\nMean ± 95% CI half-width over evaluation episodes (learned algorithms pooled over seeds).\n\n{table}\n")
    plot(out / "compare.png", rows, [*algos, *map(policy_name, baselines)])
    shown = {name: policies[name] for name in (*(f"{a}_s0" for a in algos), "ogd", "best_fixed") if name in policies}
    plot_policies(out / "policies.png", {name: trace(policy, env_kwargs, args.eval_seed, FIGURE_EPISODES)
                                         for name, policy in shown.items()}, env_kwargs)
    print(table)
    print(f"\nwall time {wall:.0f} s; wrote {out}/compare.csv, compare.md, compare.png, policies.png, episodes.csv; "
          f"tensorboard --logdir {root}")


def run_all(args: argparse.Namespace, algos: list[str], baselines: list[str], env_kwargs: dict[str, Any], root: Path,
            tuned: dict[str, Policy], choices: dict[str, str], executor: Executor = Executor(),
            scored: dict[str, list[dict[str, float]]] | None = None,
            ) -> tuple[dict[str, list[dict[str, float]]], list[str], dict[str, Policy]]:
    """Train each algorithm and seed on the env of `env_kwargs`, then evaluate every learned run and baseline, all under
    `root`, the training runs and the evaluations as tasks of `executor`. A learned run's final
    evaluation is logged at its last training step, a baseline's as a flat line at every step
    learned runs evaluated at, so all `eval/*` curves share one x axis. Returns the evaluation
    episodes' metrics by policy name (built-ins first, then `<algo>_s<seed>`), a line per tuned
    baseline saying what was chosen, and the policies policies.png may draw, by name. `tuned` has
    the tuned baselines' policies and `choices` their candidates' names (the headroom report's
    choices). A learned run is evaluated during training on the same `--episodes` episodes as the
    final evaluation and the baselines, so its curve and their lines compare. A baseline `scored`
    has (the headroom report's episodes, by name: the same policy on the same evaluation episodes)
    is not played again."""
    configs = [TrainConfig(algo=algo, logdir=root, timesteps=args.timesteps, seed=seed, n_envs=args.n_envs,
                           env_kwargs=env_kwargs, eval_seed=args.eval_seed, eval_freq=args.eval_freq,
                           eval_episodes=args.episodes, hyperparams=key_values(args.hyperparams),
                           progress=args.progress and executor.inline, torch_threads=args.torch_threads)
               for algo in algos for seed in range(args.seeds)]
    print(f"training {len(configs)} runs of {args.timesteps} steps on {executor.where()}", flush=True)
    trained = executor.map(train, [(c,) for c in configs], cpus=args.torch_threads)
    for result in trained:
        if not Path(result.model_path).exists():
            raise UsageError(f"--logdir: {result.model_path}, written by a Ray task, is not on this machine: on a "
                             "cluster, give --logdir a folder that every node shares")
    fixed, notes = baseline_policies(args, baselines, env_kwargs.get("alpha_max", 2.0), tuned, choices)
    steps = sorted({step for r in trained for step in r.eval_steps})
    # What each policy's evaluation logs: a baseline a flat line at every step, a learned run its last step.
    evaluated = {**{name: (policy, steps) for name, policy in fixed.items()},
                 **{f"{c.algo}_s{c.seed}": (Path(r.model_path), r.eval_steps[-1:]) for c, r in zip(configs, trained)}}
    known = {name: scored[name] for name in fixed if name in (scored or {})}
    todo = [name for name in evaluated if name not in known]
    print(f"evaluating {len(todo)} policies on {executor.where()} (the headroom report's episodes of "
          f"{', '.join(known) or 'none'})", flush=True)
    played = executor.map(evaluate_policy, [(evaluated[name][0], env_kwargs, args.episodes, args.eval_seed,
                                             args.torch_threads, args.progress and executor.inline) for name in todo])
    results_of = {**known, **dict(zip(todo, played))}
    metrics = [results_of[name] for name in evaluated]
    for (name, (_, at)), results in zip(evaluated.items(), metrics):
        log_episodes(new_run_dir(root / "eval" / name, False), results,
                     {"policy": name, "episodes": args.episodes, "seed": args.eval_seed}, at)
    drawn = {f"{a}_s0": load_policy(evaluated[f"{a}_s0"][0]) for a in algos}
    return dict(zip(evaluated, metrics)), notes, {**fixed, **drawn}


def evaluate_policy(policy: Policy | Path, env_kwargs: dict, episodes: int, seed: int, torch_threads: int,
                    progress: bool = False) -> list[dict[str, float]]:
    """`agents.evaluation.evaluate` of a policy, or of a saved model at a path (loaded here, so that
    a task is sent a path rather than a model), on `torch_threads` threads: the metrics per episode."""
    set_torch_threads(torch_threads)
    if isinstance(policy, Path):
        policy = load_policy(policy)
    return evaluate(policy, env_kwargs, episodes, seed, progress=progress, desc="evaluate")


def baseline_policies(args: argparse.Namespace, baselines: list[str], alpha_max: float, tuned: dict[str, Policy],
                      choices: dict[str, str]) -> tuple[dict[str, Policy], list[str]]:
    """Each baseline's policy by name (multipliers up to `alpha_max`), those of
    `agents.baselines.TUNED` from `tuned` (chosen on the tuning episodes by the headroom report);
    and a line per tuned one saying what was chosen."""
    policies, notes = {}, []
    for spec in baselines:
        if spec in TUNED:
            notes.append(f"{spec} = {choices[spec]}, chosen by the headroom report on tuning seeds "
                         f"0..{args.tuning_episodes - 1}")
            print(notes[-1], flush=True)
            policies[spec] = tuned[spec]
        else:
            policies[policy_name(spec)] = policy_from_spec(spec, alpha_max)
    return policies, notes


def command_line(args: argparse.Namespace, algos: list[str], baselines: list[str], env_kwargs: dict[str, Any]) -> str:
    """The `radix-auction compare` command that reproduces this run, every option explicit (the
    env kwargs as merged over the scenario's)."""
    return shlex.join([
        "radix-auction", "compare", "--scenario", args.scenario, "--algos", ",".join(algos), "--timesteps", str(args.timesteps),
        "--seeds", str(args.seeds), "--episodes", str(args.episodes), "--eval-seed", str(args.eval_seed),
        "--baselines", ",".join(baselines), "--tuning-episodes", str(args.tuning_episodes), "--n-envs", str(args.n_envs), "--logdir", str(args.logdir),
        *(["--overwrite"] if args.overwrite else []),
        "--out", str(args.out), "--env-kwargs", json.dumps(env_kwargs),
        *(["--eval-freq", str(args.eval_freq)] if args.eval_freq else []),
        *(["--hyperparams", *args.hyperparams] if args.hyperparams else []),
    ])


def summarize(groups: dict[str, list[dict[str, float]]],
              ogd: list[dict[str, float]] | None) -> list[dict[str, object]]:
    """One row per (policy, metric): n, mean, ci95 (half-width), ci_low, ci_high. `utility_vs_ogd`
    pairs each episode with OGD's episode of the same seed (a pooled algorithm's episodes are its
    seeds' in order, so episode i pairs with OGD's episode i mod len(ogd))."""
    rows = []
    for policy, results in groups.items():
        values = {m: [r[m] for r in results] for m in METRICS}
        if ogd is not None:
            values["utility_vs_ogd"] = [r["utility"] - ogd[i % len(ogd)]["utility"] for i, r in enumerate(results)]
        for metric, xs in values.items():
            mean, half = mean_ci(xs)
            rows.append({"policy": policy, "metric": metric, "n": len(xs), "mean": mean, "ci95": half,
                         "ci_low": mean - half, "ci_high": mean + half})
    return rows


def seed_table(episodes: dict[str, list[dict[str, float]]], algos: list[str], seeds: int,
               references: tuple[str, ...] = ("ogd", "best_fixed")) -> str:
    """A markdown table of each algorithm's utility with 95% CIs across training seeds: the mean
    over seeds of each seed's mean utility, and of its paired difference from each reference
    baseline evaluated (the same evaluation episodes). Seeds, not episodes, are the samples here,
    so the interval includes how much training runs differ."""
    refs = [r for r in references if r in episodes]
    lines = ["| algorithm | seeds | utility | " + " | ".join(f"vs {r}" for r in refs) + " |",
             "|---|---|---|" + "---|" * len(refs)]
    for algo in algos:
        runs = [episodes[f"{algo}_s{s}"] for s in range(seeds)]
        cells = [format_ci(*mean_ci([np.mean([r["utility"] for r in run]) for run in runs]))]
        for ref in refs:
            diffs = [np.mean([r["utility"] - b["utility"] for r, b in zip(run, episodes[ref])]) for run in runs]
            cells.append(format_ci(*mean_ci(diffs)))
        lines.append(f"| {algo} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(path: Path, rows: list[dict[str, object]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_episodes(path: Path, episodes: dict[str, list[dict[str, float]]], eval_seed: int,
                   label: str = "policy", keys: Sequence[str] = METRICS) -> None:
    """Every episode's metrics `keys`, one row per `label` (a policy, a population) and episode."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([label, "episode", "seed", *keys])
        for name, results in episodes.items():
            for k, r in enumerate(results):
                writer.writerow([name, k, eval_seed + k, *(r[key] for key in keys)])


def markdown(rows: list[dict[str, object]], policies: list[str]) -> str:
    """A markdown table: one line per policy, one column per metric, `mean ± ci95`."""
    cell = {(r["policy"], r["metric"]): format_ci(r["mean"], r["ci95"]) for r in rows}
    metrics = [m for m in COLUMNS if any(r["metric"] == m for r in rows)]
    lines = ["| policy | n | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    n = {r["policy"]: r["n"] for r in rows}
    for p in policies:
        lines.append(f"| {p} | {n[p]} | " + " | ".join(cell[p, m] for m in metrics) + " |")
    return "\n".join(lines)


def plot(path: Path, rows: list[dict[str, object]], policies: list[str]) -> None:
    """One panel per metric: each policy's mean with its 95% CI as an error bar, the y axis on the
    metric's units and fitted to the intervals (not from 0, which would hide every difference)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in COLUMNS if any(r["metric"] == m for r in rows)]
    by = {(r["policy"], r["metric"]): r for r in rows}
    cols = (len(metrics) + 1) // 2
    fig, axes = plt.subplots(2, cols, figsize=(3.4 * cols, 6.4))
    for ax, m in zip(np.ravel(axes), metrics):
        for i, p in enumerate(policies):
            ax.errorbar([i], [by[p, m]["mean"]], yerr=[by[p, m]["ci95"]], fmt="o", capsize=4, color=f"C{i}")
        ax.set_xticks(range(len(policies)), policies, rotation=45, fontsize=8)
        ax.set_xlim(-0.5, len(policies) - 0.5)
        ax.set_title(m, fontsize=10)
        ax.set_ylabel(UNITS[m], fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    for ax in np.ravel(axes)[len(metrics):]:
        ax.axis("off")
    fig.suptitle("RadixAuction-v0: policies on identical evaluation episodes (mean, 95% CI)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.compare ...`: the same as `radix-auction compare ...`."""
    run_command("compare", argv)


if __name__ == "__main__":
    main()

"""`radix-auction compare`: train pacing agents (any learner of `agents.learners`) and compare them with
OGD, a PI pacer and tuned baselines.

Each run of `compare` writes its TensorBoard folders under a new ROOT = LOGDIR/compare (then
LOGDIR/compare_2, ... when taken; `--overwrite` reuses LOGDIR/compare):

- ROOT/<algo>_s<seed>: a learned run (SB3's curves; `eval/*` during training, means over the
  first `--curve-episodes` evaluation episodes; `final/*` at its last step, means over all of
  them; `start/*`, its untrained policy's over all of them);
- ROOT/baselines/<policy> and ROOT/bounds/<row>: flat lines of `eval/*` over the same first
  episodes at every step a learned run was evaluated at (bounds: `eval/utility` only), `final/*`
  over all episodes, and `episode/*` per episode, so every curve overlays;
- a custom-scalars layout (TensorBoard's CUSTOM SCALARS tab): one chart per metric overlaying them.

Writes to OUT (replacing an earlier compare's files): `compare.csv` (per policy and metric: n,
mean, 95% CI), `episodes.csv` (every evaluation episode), `compare.md` (the verdicts, the tables,
the command, scenario and machine), `compare.png` (each policy's mean and 95% CI per metric),
`policies.png` (what the policies do), and the headroom report's files.

Every comparison is paired, on the same evaluation episodes (`compare_report`): `utility_vs_<ref>`
is a policy's focal utility minus the reference's on the same episode, for OGD, the best constant,
the tuned PI pacer and the per-episode constant in hindsight. Across training seeds, each seed's
mean is one sample: its untrained start, its gain over that start (a residual policy counts by
what it gains over its base pacer), and its share of the headroom.

Before any training it runs the headroom report (`experiments.commands.headroom`), whose tuned
choices are the tuned baselines; a baseline the report played on the same evaluation episodes
takes the report's episodes rather than being played again. The scenario is a name of
`auction_gym.scenarios.SCENARIOS`, with `--env-kwargs` over it. The sizes come from `--budget`
(`BUDGETS`); a size given explicitly still wins. The headroom report, the training runs and the
final evaluations are tasks of `--jobs` processes, or of Ray with `--address`
(`experiments.executor`); the rows are the same wherever they ran.
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.baselines import TUNED
from agents.evaluation import DEFAULT_EVAL_SEED, METRICS, evaluate, policy_from_spec, policy_name
from agents.learners import LEARNERS, check_hyperparams, names_text
from agents.run_dir import new_run_dir
from agents.sb3 import MODEL_SUFFIXES, load_hyperparams, load_policy
from agents.training import TrainConfig, TrainResult, action_changes, set_torch_threads, train
from auction_gym.pacing import Policy, builtin_policy_names, plain_policy_names

from ..argtypes import names, optional_names, positive_int, random_seed
from ..cli import run_command
from ..errors import UsageError
from ..executor import Executor, add_address_argument, executor_of
from ..options import BUDGETS, add_scenario_arguments, key_values, scenario_kwargs
from ..provenance import figure_links, machine
from . import compare_report as report_of
from .headroom_report import Headroom, headroom
from .headroom_report import legend as headroom_legend
from .headroom_report import markdown as headroom_markdown
from .headroom_report import write as write_headroom
from .policy_figure import plot_policies, trace

BASELINES = (*plain_policy_names(), *TUNED)
COLUMNS = (*METRICS, *map(report_of.paired_name, report_of.REFERENCES))
"""compare.md's per-episode table: the metrics, then the paired differences."""
CURVE_POINTS = 4
"""Evaluations during a training run by default (its learning curve's points, each on the first
`--curve-episodes` evaluation episodes)."""
FIGURE_EPISODES = 3
"""Evaluation episodes whose rounds policies.png plots (the first of them over time)."""
SIZES = tuple(BUDGETS["default"])
DEFAULT_ALGOS = ("ppo", "cmaes")
"""The learners `compare` trains by default: PPO at the settings tuned on RadixAuction-v1 (v2's), and the policy search
that compares candidates on shared episodes; the other learners (`ppo_paired`, `sac`, ...) are `--algos` away."""
DEFAULT_BUDGET = "default"


def with_sizes(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with each size not given set to its `--budget`'s (`--quick` is `--budget quick`)."""
    budget = "quick" if args.quick else args.budget
    sizes = {k: v for k, v in BUDGETS[budget].items() if getattr(args, k) is None}
    if "curve_episodes" in sizes and args.episodes is not None:
        # The curves average a subset of the evaluation episodes, never more than there are.
        sizes["curve_episodes"] = min(sizes["curve_episodes"], args.episodes)
    return argparse.Namespace(**{**vars(args), "budget": budget, **sizes})


def _sizes_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"--{key.replace('_', '-')} {value}" for key, value in sizes.items())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--algos", type=names, default=",".join(DEFAULT_ALGOS),
                        help=f"comma-separated, from {names_text()} (default {','.join(DEFAULT_ALGOS)})")
    parser.add_argument("--budget", choices=list(BUDGETS), default=DEFAULT_BUDGET,
                        help="the run's sizes: " + "; ".join(f"{name}: {_sizes_text(sizes)}"
                                                             for name, sizes in BUDGETS.items())
                        + f" (default {DEFAULT_BUDGET}); each size given explicitly still wins")
    parser.add_argument("--quick", action="store_true", help="the same as --budget quick: a first look at the outputs")
    parser.add_argument("--timesteps", type=positive_int, default=None, help="training steps per algorithm and seed")
    parser.add_argument("--seeds", type=positive_int, default=None, help="training seeds 0..K-1 per algorithm")
    parser.add_argument("--episodes", type=positive_int, default=None, help="evaluation episodes per policy")
    parser.add_argument("--curve-episodes", type=positive_int, default=None,
                        help="the first evaluation episodes that the learning curves and the baselines' lines "
                        "are means over (the tables use every episode)")
    parser.add_argument("--eval-seed", type=random_seed, default=DEFAULT_EVAL_SEED,
                        help=f"evaluation episode k uses seed EVAL_SEED + k (default {DEFAULT_EVAL_SEED})")
    parser.add_argument("--baselines", type=optional_names, default=",".join(BASELINES),
                        help=f"comma-separated built-in policies: {', '.join(builtin_policy_names())}, and "
                        f"{' and '.join(TUNED)}, chosen on tuning seeds (agents.baselines) (default {','.join(BASELINES)})")
    parser.add_argument("--tuning-episodes", type=positive_int, default=None,
                        help="episodes (seeds 0, 1, ...) the headroom report and the tuned baselines are chosen on")
    parser.add_argument("--n-envs", type=positive_int, default=None,
                        help="training envs per run, in one process (default: the hyperparameter file's n_envs)")
    parser.add_argument("--eval-freq", type=positive_int, default=None,
                        help=f"evaluate during training every N steps (default: --timesteps / {CURVE_POINTS})")
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
    algos, baselines = list(args.algos), list(args.baselines)
    if unknown := [a for a in algos if a not in LEARNERS]:
        raise UsageError(f"unknown --algos {','.join(unknown)}; valid: {names_text()}")
    for spec in baselines:
        if spec in TUNED:
            continue
        if spec.endswith(MODEL_SUFFIXES):
            raise UsageError(f"--baselines: {spec!r} is a model; valid: {', '.join((*builtin_policy_names(), *TUNED))}")
        try:
            policy_from_spec(spec)
        except ValueError as e:
            raise UsageError(f"--baselines: {e}") from None
    if args.curve_episodes > args.episodes:
        raise UsageError(f"--curve-episodes ({args.curve_episodes}) must not exceed --episodes ({args.episodes})")
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
    out, command = Path(args.out), command_line(args, algos, baselines, env_kwargs)
    print("headroom report (before any training)", flush=True)
    headroom_report = headroom(env_kwargs, args.tuning_episodes, args.episodes, eval_seed=args.eval_seed,
                               executor=executor)
    write_headroom(out, headroom_report.table, f"Headroom of `{command}`\n\nScenario: `{json.dumps(env_kwargs)}`",
                   f"Headroom of scenario {args.scenario!r} (paired, 95% CI)")
    print(headroom_markdown(headroom_report.table), flush=True)
    learned, episodes, notes, policies, trained = run_all(args, algos, baselines, env_kwargs, root, headroom_report,
                                                          executor)
    wall = time.perf_counter() - start
    steps = {a: report_of.steps_text(args.timesteps, trained[a]) for a in algos}
    text = write_report(args, out, algos, baselines, headroom_report, learned, episodes, notes, steps,
                        header(args, command, env_kwargs, executor, wall, root, steps))
    report_of.write_layout(root, args.curve_episodes)
    shown = {name: policies[name] for name in (*(f"{a}_s0" for a in algos), "ogd", "pid_tuned", "best_fixed")
             if name in policies}
    plot_policies(out / "policies.png", {name: trace(policy, kwargs, args.eval_seed, FIGURE_EPISODES)
                                         for name, (policy, kwargs) in shown.items()}, env_kwargs)
    print(text)
    print(f"\nwall time {wall:.0f} s; wrote {out}/compare.csv, compare.md, compare.png, policies.png, episodes.csv; "
          f"tensorboard --logdir {root}")


def header(args: argparse.Namespace, command: str, env_kwargs: dict[str, Any], executor: Executor, wall: float,
           root: Path, steps: dict[str, str]) -> str:
    """compare.md's opening: the command, scenario, sizes (`steps`: what each algorithm trained,
    `compare_report.steps_text`), machine, date and wall time."""
    trained = "; ".join(f"{algo} {text}" for algo, text in steps.items())
    return (f"`{command}`\n\nScenario {args.scenario!r} (env kwargs): `{json.dumps(env_kwargs)}`; budget "
            f"{args.budget!r}: {args.seeds} training seed(s) per algorithm, each run trained {trained}; "
            f"{args.episodes} evaluation episodes (seeds {args.eval_seed}..{args.eval_seed + args.episodes - 1}) per "
            f"policy, learning curves over the first {args.curve_episodes}; made "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}, {torch.get_num_threads()} torch "
            f"thread(s) per process ({executor.where()}), wall time {wall:.0f} s; models and TensorBoard events "
            f"in `{root}`.")


def write_report(args: argparse.Namespace, out: Path, algos: list[str], baselines: list[str], report: Headroom,
                 learned: dict[str, tuple[list, list]], episodes: dict[str, list[dict[str, float]]],
                 notes: list[str], steps: dict[str, str], opening: str) -> str:
    """compare.csv, episodes.csv, compare.md and compare.png; returns the verdicts and tables.
    `steps` says what each algorithm trained (`compare_report.steps_text`)."""
    means = {name: float(u.mean()) for name, u in report.utility.items()}
    means.update({name: float(np.mean([r["utility"] for r in results])) for name, results in episodes.items()})
    best = report_of.best_baseline(means)
    references = {ref: report.utility[ref] for ref in report_of.REFERENCES if ref in report.utility}
    if best is not None and best not in references:
        references[best] = [r["utility"] for r in episodes[best]] if best in episodes else report.utility[best]
    pooled = {a: [r for run, _ in learned[a] for r in run] for a in algos}
    starts = {f"{a}_start": [r for _, start in learned[a] for r in start] for a in algos}
    seeds = {f"{a}_s{s}": run for a in algos for s, (run, _) in enumerate(learned[a])}
    rows = report_of.summarize({**pooled, **starts, **seeds, **episodes}, references)
    stats = {a: report_of.seed_stats([run for run, _ in learned[a]], [start for _, start in learned[a]], references)
             for a in algos}
    verdicts = report_of.verdicts(stats, best, args.seeds, steps)
    if args.budget == "quick":
        trained = "; ".join(f"{algo} {text}" for algo, text in steps.items())
        verdicts.append(f"A --quick run trains few steps per seed ({trained}), which learns little: it shows the "
                        "outputs, not what learning reaches.")
    out.mkdir(parents=True, exist_ok=True)
    report_of.write_csv(out / "compare.csv", rows)
    report_of.write_episodes(out / "episodes.csv", {**seeds, **{f"{a}_s{s}_start": start for a in algos
                                                                for s, (_, start) in enumerate(learned[a])},
                                                      **episodes}, args.eval_seed)
    names = [*algos, *starts, *seeds, *episodes]
    text = ("Verdicts:\n\n" + "\n".join(f"- {v}" for v in verdicts)
            + "\n\nAcross training seeds (95% CI over seeds; `start` is the untrained policy, `headroom_share` "
            "(learned - best_fixed) / (hindsight - best_fixed)):\n\n" + report_of.seed_table(stats, args.seeds)
            + "\n\nMean ± 95% CI half-width over evaluation episodes (learned algorithms pooled over seeds; "
            "`utility_vs_X` paired with X on the same episodes):\n\n" + report_of.markdown(rows, names, COLUMNS)
            + "\n\n" + headroom_legend(names))
    figures = figure_links([out / "compare.png", out / "policies.png", out / "headroom.png"], out / "compare.md")
    (out / "compare.md").write_text(opening + "".join(f"\n\n{note}" for note in notes) + f"\n\n{text}\n\n{figures}")
    report_of.plot(out / "compare.png", rows, [*algos, *map(policy_name, baselines)], COLUMNS,
                   f"Scenario {args.scenario!r}: policies on identical evaluation episodes (mean, 95% CI)")
    return text


def run_all(args: argparse.Namespace, algos: list[str], baselines: list[str], env_kwargs: dict[str, Any], root: Path,
            report: Headroom, executor: Executor = Executor(),
            ) -> tuple[dict[str, list[tuple[list, list]]], dict[str, list[dict[str, float]]], list[str],
                       dict[str, tuple[Policy, dict[str, Any]]], dict[str, list[int]]]:
    """Train each algorithm and seed on the env of `env_kwargs` (in its learner's action), then
    evaluate every learned run (trained and untrained, in the action it was trained in) and
    baseline on all evaluation episodes, the training runs and the evaluations as tasks of
    `executor`; log everything under `root` on one x axis (environment steps). Returns, per
    algorithm, each seed's (trained, untrained) episodes' metrics; the baselines' by name; a line
    per tuned baseline saying what was chosen and per learner playing another action; and the
    policies policies.png may draw, by name, each with the env kwargs it plays in; and per algorithm
    the steps each seed's run trained (`TrainResult.trained`: whole rollouts or generations, so
    often more than asked). A baseline the headroom `report` played on the same evaluation episodes
    is not played again."""
    configs = [TrainConfig(algo=algo, logdir=root, timesteps=args.timesteps, seed=seed, n_envs=args.n_envs,
                           env_kwargs=env_kwargs, eval_seed=args.eval_seed,
                           eval_freq=args.eval_freq or max(args.timesteps // CURVE_POINTS, 1),
                           eval_episodes=args.curve_episodes, hyperparams=key_values(args.hyperparams),
                           progress=args.progress and executor.inline, torch_threads=args.torch_threads)
               for algo in algos for seed in range(args.seeds)]
    print(f"training {len(configs)} runs of {args.timesteps:,} steps asked on {executor.where()} (each stops at the "
          "end of a rollout or generation; the report says how many it trained)", flush=True)
    trained = executor.map(train, [(c,) for c in configs], cpus=args.torch_threads)
    for result in trained:
        if not Path(result.model_path).exists():
            raise UsageError(f"--logdir: {result.model_path}, written by a Ray task, is not on this machine: on a "
                             "cluster, give --logdir a folder that every node shares")
    fixed, notes = baseline_policies(args, baselines, env_kwargs.get("alpha_max", 2.0), report)
    todo = {name: policy for name, policy in fixed.items() if name not in report.episodes}
    notes += acting_notes(algos, configs, trained, env_kwargs)
    models = [(p, r.env_kwargs) for r in trained for p in (r.model_path, r.initial_model_path)]
    print(f"evaluating {len(todo) + len(models)} policies on {executor.where()} (the headroom report's episodes of "
          f"{', '.join(n for n in fixed if n not in todo) or 'none'})", flush=True)
    played = executor.map(evaluate_policy, [(p, kwargs, args.episodes, args.eval_seed, args.torch_threads)
                                            for p, kwargs in (*((p, env_kwargs) for p in todo.values()), *models)])
    scored = {**report.episodes, **dict(zip(todo, played))}
    episodes = {name: scored[name] for name in fixed}
    finals = played[len(todo):]
    learned: dict[str, list[tuple[list, list]]] = {a: [] for a in algos}
    for k, (config, result) in enumerate(zip(configs, trained)):
        learned[config.algo].append((finals[2 * k], finals[2 * k + 1]))
        report_of.log_learned(result.run_dir, finals[2 * k], finals[2 * k + 1], result.eval_steps[-1])
    steps = sorted({step for r in trained for step in r.eval_steps})
    for name, results in episodes.items():
        report_of.log_baseline(root / "baselines" / name, results, args.curve_episodes, steps,
                               {"policy": name, "episodes": args.episodes, "seed": args.eval_seed})
    for name in report_of.BASELINE_BOUNDS:
        report_of.log_bound(root / "bounds" / name, report.utility[name], args.curve_episodes, steps)
    runs = {f"{c.algo}_s{c.seed}": r for c, r in zip(configs, trained)}
    drawn = {f"{a}_s0": (load_policy(runs[f"{a}_s0"].model_path), runs[f"{a}_s0"].env_kwargs) for a in algos}
    steps = {a: [r.trained for c, r in zip(configs, trained) if c.algo == a] for a in algos}
    return (learned, episodes, notes, {**{name: (policy, env_kwargs) for name, policy in fixed.items()}, **drawn},
            steps)


def acting_notes(algos: list[str], configs: list[TrainConfig], trained: list[TrainResult],
                 env_kwargs: dict[str, Any]) -> list[str]:
    """A line per algorithm whose policies play another action than the scenario's (its
    hyperparameter file's `action_kwargs`), saying which: its start and its gain are in that action."""
    notes = []
    for algo in algos:
        changed = next(action_changes(env_kwargs, r.env_kwargs) for c, r in zip(configs, trained) if c.algo == algo)
        if changed:
            notes.append(f"{algo} plays {json.dumps(changed)} (its hyperparameter file's action_kwargs), so its "
                         "untrained start is that action's a = 0")
            print(notes[-1], flush=True)
    return notes


def evaluate_policy(policy: Policy | Path, env_kwargs: dict, episodes: int, seed: int, torch_threads: int,
                    progress: bool = False) -> list[dict[str, float]]:
    """`agents.evaluation.evaluate` of a policy, or of a saved model at a path (loaded here, so that
    a task is sent a path rather than a model), on `torch_threads` threads: the metrics per episode."""
    set_torch_threads(torch_threads)
    if isinstance(policy, Path):
        policy = load_policy(policy)
    return evaluate(policy, env_kwargs, episodes, seed, progress=progress, desc="evaluate")


def baseline_policies(args: argparse.Namespace, baselines: list[str], alpha_max: float,
                      report: Headroom) -> tuple[dict[str, Policy], list[str]]:
    """Each baseline's policy by name (multipliers up to `alpha_max`), those of
    `agents.baselines.TUNED` as the headroom `report` chose them on the tuning episodes; and a line
    per tuned one saying what was chosen."""
    choices = {r["policy"]: r["choice"] for r in report.table}
    policies, notes = {}, []
    for spec in baselines:
        if spec in TUNED:
            notes.append(f"{spec} = {choices[spec]}, chosen by the headroom report on tuning seeds "
                         f"0..{args.tuning_episodes - 1}")
            print(notes[-1], flush=True)
            policies[spec] = report.tuned[spec]
        else:
            policies[policy_name(spec)] = policy_from_spec(spec, alpha_max)
    return policies, notes


def command_line(args: argparse.Namespace, algos: list[str], baselines: list[str], env_kwargs: dict[str, Any]) -> str:
    """The `radix-auction compare` command that reproduces this run, every option explicit (the
    env kwargs as merged over the scenario's)."""
    return shlex.join([
        "radix-auction", "compare", "--scenario", args.scenario, "--algos", ",".join(algos), "--timesteps", str(args.timesteps),
        "--seeds", str(args.seeds), "--episodes", str(args.episodes), "--eval-seed", str(args.eval_seed),
        "--curve-episodes", str(args.curve_episodes), "--baselines", ",".join(baselines),
        "--tuning-episodes", str(args.tuning_episodes), *(["--n-envs", str(args.n_envs)] if args.n_envs else []),
        "--logdir", str(args.logdir),
        *(["--overwrite"] if args.overwrite else []),
        "--out", str(args.out), "--env-kwargs", json.dumps(env_kwargs),
        *(["--eval-freq", str(args.eval_freq)] if args.eval_freq else []),
        *(["--hyperparams", *args.hyperparams] if args.hyperparams else []),
    ])


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.compare ...`: the same as `radix-auction compare ...`."""
    run_command("compare", argv)


if __name__ == "__main__":
    main()

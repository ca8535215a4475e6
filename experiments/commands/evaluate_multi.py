"""`radix-auction evaluate-multi`: learned populations against all-OGD and all-truthful markets.

Every bidder of the PettingZoo env acts through its policy: for each `--checkpoint` (an RLlib
run of `train-multi`: RUN/checkpoint or RUN/checkpoints/step_<n>), its learned policies; for each
baseline, a built-in policy for every bidder. All populations play the same episodes (episode k
seeded EVAL_SEED + k), in the scenario the first checkpoint was trained in unless `--env-kwargs`
is given. Writes to OUT:

- `population.md`: the market's welfare, revenue, total utility, latency, TTFT and cache hit rate
  per population, with `welfare_vs_<first baseline>` and `revenue_vs_...`, paired differences on
  the same episodes; then each bidder's utility, budget use and payments (mean ± 95% CI over
  episodes, `agents.stats`);
- `population.csv`: per population and metric (bidders' as `bidder_<i>/<metric>`): n, mean,
  95% CI half-width and bounds; `population_episodes.csv`: every episode's metrics;
- `population.png`: one panel per market metric and two for the bidders (utility, budget use),
  each population's mean with its 95% CI;
- in `population.md` too, for each learned population, bidder 0's policy as the focal bidder of
  `RadixAuction-v0` against OGD bidders on the same seeds, scored as `compare` scores policies
  (so the learned population's pacer can be read beside SB3's).

Learned policies need the `rllib` extra; baselines alone do not.
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

import numpy as np

from agents.evaluation import DEFAULT_EVAL_SEED, METRIC_UNITS, METRICS, evaluate, policy_from_spec, policy_name
from agents.population import (
    BIDDER_METRICS,
    MARKET_METRICS,
    agent_names,
    check_population_env_kwargs,
    evaluate_population,
    uniform_population,
)
from agents.sb3 import run_folder, saved_env_kwargs
from agents.stats import format_ci, mean_ci
from auction_gym.pacing import Policy, builtin_policy_names, plain_policy_names

from ..argtypes import json_dict, optional_names, positive_int, random_seed
from ..cli import run_command
from ..errors import UsageError
from ..options import MULTI_AGENT_SCENARIO, rllib_modules
from .compare_report import markdown as compare_markdown
from .compare_report import paired_name, write_csv, write_episodes
from .compare_report import summarize as compare_summarize

BASELINES = plain_policy_names()
UNITS = {**METRIC_UNITS, "revenue": METRIC_UNITS["payments"], "total_utility": METRIC_UNITS["utility"]}
PAIRED = ("welfare", "revenue")
"""Market metrics also reported as paired differences from the first baseline."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", nargs="*", default=[], metavar="PATH",
                        help="RLlib checkpoints of train-multi runs (RUN/checkpoint), each a learned population")
    parser.add_argument("--baselines", type=optional_names, default=",".join(BASELINES),
                        help="comma-separated built-in policies, each played by every bidder: "
                        f"{', '.join(builtin_policy_names())} (default {','.join(BASELINES)})")
    parser.add_argument("--episodes", type=positive_int, default=20, help="evaluation episodes (default 20)")
    parser.add_argument("--eval-seed", type=random_seed, default=DEFAULT_EVAL_SEED,
                        help=f"episode k uses seed EVAL_SEED + k (default {DEFAULT_EVAL_SEED})")
    parser.add_argument("--env-kwargs", type=json_dict, default=None,
                        help="PettingZoo env arguments as JSON (default: the first checkpoint's run config.json; "
                        "without a checkpoint, compare's scenario)")
    parser.add_argument("--out", default="results", help="directory for population.md/.csv/.png (default results)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")


def population_name(checkpoint: str | Path) -> str:
    """A learned population's name: its run folder's ("rllib_shared_s0"), with the checkpoint's
    own name when it is a periodic one ("rllib_shared_s0/step_10240")."""
    path = Path(checkpoint)
    run = run_folder(path).name
    return run if path.name == "checkpoint" else f"{run}/{path.name}"


def scenario(args: argparse.Namespace) -> dict:
    """The env arguments: --env-kwargs, else the first checkpoint's run's, else MULTI_AGENT_SCENARIO;
    UsageError when checkpoints of different scenarios would be compared in one."""
    if args.env_kwargs is not None:
        return args.env_kwargs
    saved = [s[0] for s in map(saved_env_kwargs, args.checkpoint) if s is not None]
    if any(s != saved[0] for s in saved):
        raise UsageError("--checkpoint: the runs were trained in different scenarios; choose one with --env-kwargs")
    return saved[0] if saved else MULTI_AGENT_SCENARIO


def populations(args: argparse.Namespace, env_kwargs: dict) -> dict[str, dict[str, Policy]]:
    """Each population by name, learned ones first; UsageError for a bad checkpoint or baseline."""
    agents = agent_names(env_kwargs)
    out: dict[str, dict[str, Policy]] = {}
    if args.checkpoint:
        rllib, _ = rllib_modules()
        for checkpoint in args.checkpoint:
            try:
                out[population_name(checkpoint)] = rllib.load_population(checkpoint, agents)
            except ValueError as e:
                raise UsageError(f"--checkpoint: {e}") from None
    for spec in args.baselines:
        try:
            out[policy_name(spec)] = uniform_population(spec, agents, env_kwargs.get("alpha_max", 2.0))
        except ValueError as e:
            raise UsageError(f"--baselines: {e}") from None
    if not out:
        raise UsageError("nothing to evaluate: give --checkpoint or --baselines")
    return out


def summarize(episodes: dict[str, list[dict[str, float]]], reference: str | None) -> list[dict[str, object]]:
    """One row per (population, metric): n, mean, ci95 (half-width), ci_low, ci_high; with
    `<m>_vs_<reference>` for the PAIRED metrics, episode by episode."""
    rows = []
    for name, results in episodes.items():
        values = {key: [r[key] for r in results] for key in results[0]}
        if reference is not None:
            for m in PAIRED:
                values[f"{m}_vs_{reference}"] = [r[m] - b[m] for r, b in zip(results, episodes[reference])]
        for metric, xs in values.items():
            mean, half = mean_ci(xs)
            rows.append({"population": name, "metric": metric, "n": len(xs), "mean": mean, "ci95": half,
                         "ci_low": mean - half, "ci_high": mean + half})
    return rows


def markdown(rows: list[dict[str, object]], agents: list[str], reference: str | None) -> str:
    """The market table (with the paired differences from `reference`), then the bidders' (one
    line per population and bidder)."""
    cell = {(r["population"], r["metric"]): format_ci(r["mean"], r["ci95"]) for r in rows}
    names = list(dict.fromkeys(r["population"] for r in rows))
    n = {r["population"]: r["n"] for r in rows}
    market = [*MARKET_METRICS, *([f"{m}_vs_{reference}" for m in PAIRED] if reference is not None else [])]
    lines = ["| population | n | " + " | ".join(market) + " |", "|---|---|" + "---|" * len(market)]
    lines += [f"| {p} | {n[p]} | " + " | ".join(cell.get((p, m), "") for m in market) + " |" for p in names]
    lines += ["", "| population | bidder | " + " | ".join(BIDDER_METRICS) + " |",
              "|---|---|" + "---|" * len(BIDDER_METRICS)]
    lines += [f"| {p} | {a} | " + " | ".join(cell[p, f"{a}/{m}"] for m in BIDDER_METRICS) + " |"
              for p in names for a in agents]
    return "\n".join(lines)


def plot(path: Path, rows: list[dict[str, object]], agents: list[str]) -> None:
    """Market panels (each population's mean and 95% CI) and two bidder panels (utility, budget
    use: per bidder, one marker per population), on the metrics' units."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(r["population"], r["metric"]): r for r in rows}
    names = list(dict.fromkeys(r["population"] for r in rows))
    fig, axes = plt.subplots(2, 4, figsize=(15, 7))
    for ax, m in zip(axes.ravel(), MARKET_METRICS):
        for i, p in enumerate(names):
            ax.errorbar([i], [by[p, m]["mean"]], yerr=[by[p, m]["ci95"]], fmt="o", capsize=4, color=f"C{i}")
        ax.set_xticks(range(len(names)), names, rotation=30, fontsize=7)
        ax.set_title(m, fontsize=10)
        ax.set_ylabel(UNITS[m], fontsize=8)
    for ax, m in zip(axes.ravel()[len(MARKET_METRICS):], ("utility", "budget_spent_frac")):
        width = 0.8 / len(names)
        for i, p in enumerate(names):
            x = np.arange(len(agents)) + (i - (len(names) - 1) / 2) * width
            cells = [by[p, f"{a}/{m}"] for a in agents]
            ax.errorbar(x, [c["mean"] for c in cells], yerr=[c["ci95"] for c in cells], fmt="o", capsize=3,
                        color=f"C{i}", label=p)
        ax.set_xticks(range(len(agents)), agents, fontsize=8)
        ax.set_title(f"each bidder's {m}", fontsize=10)
        ax.set_ylabel(UNITS[m], fontsize=8)
    for ax in axes.ravel():
        ax.grid(axis="y", alpha=0.3)
    fig.legend(*axes.ravel()[-1].get_legend_handles_labels(), loc="lower center", ncol=len(names), fontsize=8)
    fig.suptitle("PettingZoo market, every bidder on its policy: identical episodes (mean, 95% CI)")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> None:
    env_kwargs = scenario(args)
    try:
        check_population_env_kwargs(env_kwargs)
    except ValueError as e:
        raise UsageError(f"--env-kwargs: {e}") from None
    pops = populations(args, env_kwargs)
    agents = agent_names(env_kwargs)
    learned = [name for name in pops if name in set(map(population_name, args.checkpoint))]
    reference = next((name for name in pops if name not in learned), None)
    start = time.perf_counter()
    episodes = {name: evaluate_population(pop, env_kwargs, args.episodes, args.eval_seed, args.progress,
                                          desc=f"evaluate {name}") for name, pop in pops.items()}
    rows = summarize(episodes, reference)
    table = markdown(rows, agents, reference)
    if learned:
        table += "\n\n" + focal_table({name: pops[name][agents[0]] for name in learned}, env_kwargs, args)
    wall = time.perf_counter() - start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "population.csv", rows)
    write_episodes(out / "population_episodes.csv", episodes, args.eval_seed, "population",
                   list(next(iter(episodes.values()))[0]))
    (out / "population.md").write_text(
        f"`{command_line(args, env_kwargs)}`\n\n{args.episodes} episodes (seeds {args.eval_seed}.."
        f"{args.eval_seed + args.episodes - 1}) per population, every bidder on its policy; wall time {wall:.0f} s. "
        f"Mean ± 95% CI half-width over episodes.\n\n{table}\n")
    plot(out / "population.png", rows, agents)
    print(table)
    print(f"\nwall time {wall:.0f} s; wrote {out}/population.md, population.csv, population_episodes.csv and "
          "population.png")


def focal_table(learned: dict[str, Policy], env_kwargs: dict, args: argparse.Namespace) -> str:
    """Each learned population's bidder-0 policy as the focal bidder of `RadixAuction-v0` against
    OGD opponents, scored as `compare` scores a policy (the same episodes, `utility_vs_ogd`
    paired), beside OGD itself: a markdown table."""
    policies = {"ogd": policy_from_spec("ogd", env_kwargs.get("alpha_max", 2.0)), **learned}
    results = {name: evaluate(policy, env_kwargs, args.episodes, args.eval_seed, args.progress, f"evaluate {name}")
               for name, policy in policies.items()}
    return ("Bidder 0's learned policy as the focal bidder of RadixAuction-v0, the other bidders pacing by OGD:\n\n"
            + compare_markdown(compare_summarize(results, {"ogd": [r["utility"] for r in results["ogd"]]}),
                               list(results), (*METRICS, paired_name("ogd"))))


def command_line(args: argparse.Namespace, env_kwargs: dict) -> str:
    """The `radix-auction evaluate-multi` command that reproduces this evaluation."""
    return shlex.join(["radix-auction", "evaluate-multi", *(["--checkpoint", *args.checkpoint] if args.checkpoint
                       else []), "--baselines", ",".join(args.baselines), "--episodes", str(args.episodes), "--eval-seed",
                       str(args.eval_seed), "--env-kwargs", json.dumps(env_kwargs), "--out", str(args.out)])


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.evaluate_multi ...`: the same as `radix-auction evaluate-multi ...`."""
    run_command("evaluate-multi", argv)


if __name__ == "__main__":
    main()

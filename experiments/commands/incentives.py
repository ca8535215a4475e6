"""Is truthful bidding still optimal in the dynamic market? A deviation study of one bidder.

    radix-auction incentives [--episodes N] [--grid 0,0.5,1,2] [--mechanisms radix_vcg,strict_vcg] [--out results]
                             [--jobs N] [--address local|auto|HOST:PORT]

For each auction (radix_vcg, strict_vcg) and cost model (tokens, unit), bidder 0 (the focal bidder)
plays a constant bid multiplier alpha from `--grid` for a whole episode while the other three bidders
follow their policies, in two budget settings:
- budgets off (budgets of 1e18, which never bind): the others bid truthfully (alpha = 1);
- budgets on (the default scenario's budgets, rho = 0.0001 a round): the others pace by OGD
  (`auction_gym.pacing.OGDPacer`, fed the market's observations as RadixAuction-v0 feeds them), and
  the focal bidder also plays OGD once, as a reference.
The market is RadixAuction-v0's default scenario (MarketConfig's defaults: four alike bidders,
agentic traffic at 20 requests/s above the engine's ~14.5/s, 60k KV tokens), 500 rounds by default.

Every grid point replays the same episodes (episode k uses workload seed `--seed` + k), so the
arrivals, prompts and urgencies are identical and differences between grid points are paired. A
bidder's utility in an episode (value units: the workload's money) is the sum over rounds of its
realized utility, as the environment's reward counts it: V - w x latency over its requests that
finish within the horizon, minus its payments. Requests still in flight at the end count nothing, so a
bidder who is served sooner also has more of its requests counted; that is part of what a deviation
gains or loses here.

Regret of truthful bidding (budgets off): max over the grid of mean U(alpha) - mean U(1), with the 95%
CI of the paired per-episode differences U(alpha*) - U(1), alpha* the best grid point. alpha* is chosen
on the same episodes it is measured on, so the regret is biased upward (it is >= 0 by construction even
where truthful bidding is optimal): read it with the per-point differences, and call truthful bidding
beaten only where some grid point's paired CI lies entirely above 0 (the table's last column; with
ten grid points per setting, one such point in a setting can be chance).
Budgets on: the best fixed multiplier (chosen the same way) against truthful and against OGD.

Outputs under `--out`: incentives.csv (a row per mechanism, cost model, budget setting and focal
policy: n, mean utility, paired differences from truthful and, budgets on, from OGD, with 95% CI
half-widths), incentives.md (the tables, also printed) and incentives.png (difference from truthful
against alpha, one panel per mechanism x cost model, both budget settings, 95% CI bands). The default
run (50 episodes, 2 jobs) takes about 2.5 minutes on 2 idle cores (156 s measured).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import time
from pathlib import Path
from typing import Collection, Sequence

import numpy as np

from agents.stats import format_ci, mean_ci
from auction_gym.market import Market, MarketConfig
from auction_gym.market.config import AUCTIONS
from auction_gym.pacing import OGDPacer

from ..argtypes import names, output_folder, positive_int, random_seed
from ..cli import run_command
from ..errors import UsageError
from ..executor import Executor, add_address_argument, executor_of

COST_MODELS = ("tokens", "unit")
BUDGETS = ("off", "on")
DEFAULT_GRID = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0)
UNBOUNDED = 1e18
"""Budget of every bidder with budgets off: never binds (with everyone truthful a bidder spent
0.2-12 value units in the default scenario's seed-0 episode, depending on mechanism and cost model)."""
OGD = "ogd"
COLUMNS = ("mechanism", "cost_model", "budgets", "policy", "multiplier", "n", "mean_utility",
           "utility_ci95", "diff_truthful", "diff_truthful_ci95", "diff_ogd", "diff_ogd_ci95")
SYMLOG_LINEAR = 10.0
"""Value units within which incentives.png's y axis is linear."""
DEFAULT_WALL_TIME = "about 2.5 minutes on 2 idle cores"

Focal = float | str
"""The focal bidder's policy: a constant multiplier, or OGD."""


def scenario(mechanism: str, cost_model: str, budgets: str, horizon: int) -> MarketConfig:
    """RadixAuction-v0's default market under `mechanism` and `cost_model`; budgets "off" never bind."""
    return MarketConfig(mechanism=mechanism, cost_model=cost_model, horizon=horizon,
                        budget=UNBOUNDED if budgets == "off" else None)


def episode_utility(config: MarketConfig, seed: int, focal: Focal, budgets: str) -> float:
    """Bidder 0's utility over one episode (value units) when it plays `focal` and the others play
    truthfully (budgets "off") or by OGD (budgets "on")."""
    market = Market(config)
    market.reset(seed)
    pacer = OGDPacer(alpha_max=config.alpha_max)
    paced = list(range(1, config.num_bidders)) if budgets == "on" else []
    if focal == OGD:
        paced = [0, *paced]
    alphas = np.ones(config.num_bidders)
    if focal != OGD:
        alphas[0] = float(focal)
    total = 0.0
    while not market.done:
        if paced:
            # One batched call, on exactly the rows the environment would give these bidders.
            acts, _ = pacer.predict(market.observations()[paced], deterministic=True)
            alphas[paced] = np.asarray(acts, dtype=np.float64).reshape(-1)
        total += float(market.step(alphas).utility[0])
    return total


def run_task(mechanism: str, cost_model: str, budgets: str, focal: Focal, seeds: Sequence[int],
             horizon: int) -> list[float]:
    """Bidder 0's utility in each episode of `seeds` (value units)."""
    config = scenario(mechanism, cost_model, budgets, horizon)
    return [episode_utility(config, s, focal, budgets) for s in seeds]


def tasks(mechanisms: Sequence[str], cost_models: Sequence[str], grid: Sequence[float]) -> list[tuple]:
    """(mechanism, cost model, budgets, focal policy) of every measurement: the grid in both budget
    settings, and OGD with budgets on."""
    out = []
    for m in mechanisms:
        for c in cost_models:
            out += [(m, c, b, a) for b in BUDGETS for a in grid] + [(m, c, "on", OGD)]
    return out


def measure(todo: list[tuple], seeds: Sequence[int], horizon: int,
            executor: Executor = Executor()) -> dict[tuple, np.ndarray]:
    """Per-episode utilities of every task, run where `executor` says (every episode is seeded, so
    the result does not depend on where)."""
    results = executor.map(run_task, [(*t, list(seeds), horizon) for t in todo])
    return {t: np.array(u) for t, u in zip(todo, results)}


def summarize(utilities: dict[tuple, np.ndarray]) -> list[dict[str, object]]:
    """The CSV rows: each task's mean utility and its paired differences from truthful (alpha = 1)
    and, with budgets on, from OGD; every mean with its 95% CI half-width."""
    rows = []
    for (m, c, b, focal), u in utilities.items():
        truthful = utilities[m, c, b, 1.0]
        ogd = utilities.get((m, c, b, OGD))
        diff_ogd = mean_ci(u - ogd) if ogd is not None else ("", "")
        rows.append(dict(zip(COLUMNS, (
            m, c, b, OGD if focal == OGD else "fixed", "" if focal == OGD else focal, len(u),
            *mean_ci(u), *mean_ci(u - truthful), *diff_ogd))))
    return rows


def best_fixed(rows: list[dict], mechanism: str, cost_model: str, budgets: str) -> dict:
    """The grid point with the highest mean utility (ties: the one closest to truthful)."""
    return max(_fixed(rows, mechanism, cost_model, budgets),
               key=lambda r: (r["mean_utility"], -abs(r["multiplier"] - 1.0)))


def _fixed(rows: list[dict], mechanism: str, cost_model: str, budgets: str) -> list[dict]:
    """The grid's rows of one setting, by increasing multiplier."""
    return [r for r in rows if (r["mechanism"], r["cost_model"], r["budgets"], r["policy"])
            == (mechanism, cost_model, budgets, "fixed")]


def _find(rows: list[dict], mechanism: str, cost_model: str, budgets: str, focal: Focal) -> dict:
    """The row of one task; `focal` a grid multiplier or OGD."""
    key = (OGD, "") if focal == OGD else ("fixed", focal)
    return next(r for r in rows if (r["mechanism"], r["cost_model"], r["budgets"], r["policy"], r["multiplier"])
                == (mechanism, cost_model, budgets, *key))


def _pairs(rows: list[dict]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r["mechanism"], r["cost_model"]) for r in rows))


def regret_table(rows: list[dict]) -> str:
    """Budgets off: the regret of truthful bidding per mechanism and cost model."""
    lines = ["| mechanism | cost model | U(1) | best alpha* | regret U(alpha*) - U(1) | regret / U(1) "
             "| alphas beating truthful (CI > 0) |", "|---|---|---|---|---|---|---|"]
    for m, c in _pairs(rows):
        truthful, best = _find(rows, m, c, "off", 1.0), best_fixed(rows, m, c, "off")
        beating = [f"{r['multiplier']:g}" for r in _fixed(rows, m, c, "off")
                   if r["diff_truthful"] - r["diff_truthful_ci95"] > 0]
        lines.append(f"| {m} | {c} | {format_ci(truthful['mean_utility'], truthful['utility_ci95'])} "
                     f"| {best['multiplier']:g} | {format_ci(best['diff_truthful'], best['diff_truthful_ci95'])} "
                     f"| {_percent(best['diff_truthful'], truthful['mean_utility'])} "
                     f"| {', '.join(beating) or 'none'} |")
    return "\n".join(lines)


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / abs(whole):.2f}%" if whole else "n/a"


def budget_table(rows: list[dict]) -> str:
    """Budgets on: the best fixed multiplier against truthful and OGD."""
    lines = ["| mechanism | cost model | best fixed alpha* | U(alpha*) | U(alpha*) - U(1) | U(alpha*) - U(OGD) "
             "| U(OGD) - U(1) |", "|---|---|---|---|---|---|---|"]
    for m, c in _pairs(rows):
        best, ogd = best_fixed(rows, m, c, "on"), _find(rows, m, c, "on", OGD)
        lines.append(f"| {m} | {c} | {best['multiplier']:g} | {format_ci(best['mean_utility'], best['utility_ci95'])} "
                     f"| {format_ci(best['diff_truthful'], best['diff_truthful_ci95'])} "
                     f"| {format_ci(best['diff_ogd'], best['diff_ogd_ci95'])} "
                     f"| {format_ci(ogd['diff_truthful'], ogd['diff_truthful_ci95'])} |")
    return "\n".join(lines)


def grid_table(rows: list[dict], budgets: str) -> str:
    """U(alpha) - U(1) at every grid point (rows) for every mechanism x cost model (columns)."""
    pairs = _pairs(rows)
    lines = ["| alpha | " + " | ".join(f"{m} / {c}" for m, c in pairs) + " |", "|---" * (len(pairs) + 1) + "|"]
    for a in [r["multiplier"] for r in _fixed(rows, *pairs[0], budgets)]:
        cells = [_find(rows, m, c, budgets, a) for m, c in pairs]
        lines.append(f"| {a:g} | "
                     + " | ".join(format_ci(r["diff_truthful"], r["diff_truthful_ci95"]) for r in cells) + " |")
    return "\n".join(lines)


def report(rows: list[dict], episodes: int, horizon: int, seed: int) -> str:
    """incentives.md: the three tables with what they measure."""
    return "\n\n".join([
        f"# Incentives: bidder 0's utility per episode (value units), {episodes} paired episodes of "
        f"{horizon} rounds (seeds {seed}..{seed + episodes - 1}), mean ± 95% CI half-width",
        "## Budgets off: regret of truthful bidding (others truthful)\n\nalpha* is chosen on the same "
        "episodes it is measured on, so the regret is biased upward (>= 0 even where truthful is "
        "optimal); truthful bidding is beaten only where some alpha's paired CI lies above 0 (a single "
        "such alpha among the grid's can be chance).\n\n"
        + regret_table(rows),
        "## Budgets on: best fixed multiplier (others pace by OGD)\n\n" + budget_table(rows),
        "## U(alpha) - U(1) at every grid point, budgets off\n\n" + grid_table(rows, "off"),
        "## U(alpha) - U(1) at every grid point, budgets on\n\n" + grid_table(rows, "on"),
    ]) + "\n"


def plot(path: Path, rows: list[dict]) -> None:
    """U(alpha) - U(1) against alpha with 95% CI bands, one panel per mechanism x cost model, a
    curve per budget setting; with budgets on, OGD's difference as a dotted line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = _pairs(rows)
    cols = min(2, len(pairs))
    fig, axes = plt.subplots(-(-len(pairs) // cols), cols, figsize=(5.2 * cols, 3.9 * -(-len(pairs) // cols)),
                             squeeze=False)
    for ax, (m, c) in zip(axes.ravel(), pairs):
        for i, b in enumerate(BUDGETS):
            pts = _fixed(rows, m, c, b)
            x = np.array([r["multiplier"] for r in pts])
            y, h = np.array([r["diff_truthful"] for r in pts]), np.array([r["diff_truthful_ci95"] for r in pts])
            ax.plot(x, y, "o-", color=f"C{i}", label=f"budgets {b}", markersize=3)
            ax.fill_between(x, y - h, y + h, color=f"C{i}", alpha=0.2)
        ogd = _find(rows, m, c, "on", OGD)
        ax.axhline(ogd["diff_truthful"], color="C1", linestyle=":", label="OGD, budgets on")
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.axvline(1.0, color="gray", linewidth=0.6, linestyle="--")
        ax.set_title(f"{m} / {c}", fontsize=10)
        ax.set_xlabel("bidder 0's multiplier alpha")
        # Shading far below truthful (alpha near 0 starves the bidder) would flatten every other
        # difference on a linear axis; symlog keeps both readable.
        ax.set_yscale("symlog", linthresh=SYMLOG_LINEAR)
        ax.set_ylabel(f"U(alpha) - U(1) per episode\n(value units, symlog: linear within ±{SYMLOG_LINEAR:g})",
                      fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(pairs):]:
        ax.axis("off")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Deviation from truthful bidding: paired difference, mean and 95% CI", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def _names(valid: Collection[str], option: str):
    """An argparse type: a comma-separated subset of `valid`, in the order given, no repeats (`names`)."""
    def parse(text: str) -> list[str]:
        given = names(text)
        if unknown := [n for n in given if n not in valid]:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; valid: {', '.join(valid)}")
        return given
    parse.__name__ = option  # argparse names the type in its message
    return parse


def multiplier_grid(text: str) -> list[float]:
    """Comma-separated finite multipliers >= 0, distinct; 1 (truthful) is added when missing. Sorted."""
    try:
        values = [float(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f"multipliers must be finite and >= 0, got {text!r}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"repeated multipliers in {text!r}")
    return sorted(set(values) | {1.0})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=positive_int, default=50,
                        help=f"paired episodes per grid point, >= 2 (default 50: {DEFAULT_WALL_TIME})")
    parser.add_argument("--seed", type=random_seed, default=0,
                        help="workload seed of the first episode; episode k uses seed + k (default 0)")
    parser.add_argument("--grid", type=multiplier_grid, default=list(DEFAULT_GRID),
                        help="bidder 0's multipliers, comma-separated; 1 is always added "
                        f"(default {','.join(f'{a:g}' for a in DEFAULT_GRID)})")
    parser.add_argument("--horizon", type=positive_int, default=MarketConfig.horizon,
                        help=f"rounds per episode (default {MarketConfig.horizon}, RadixAuction-v0's)")
    parser.add_argument("--mechanisms", type=_names(AUCTIONS, "--mechanisms"), default=list(AUCTIONS),
                        help=f"registered auctions, comma-separated (default {','.join(AUCTIONS)})")
    parser.add_argument("--cost-models", type=_names(COST_MODELS, "--cost-models"), default=list(COST_MODELS),
                        help=f"the auctions' cost models, comma-separated (default {','.join(COST_MODELS)})")
    parser.add_argument("--out", type=output_folder, default=Path("results"),
                        help="folder for incentives.csv, incentives.md and incentives.png (default results)")
    parser.add_argument("--jobs", type=positive_int, default=min(2, len(os.sched_getaffinity(0))),
                        help="processes to run the episodes in (default 2, or 1 on a single core)")
    add_address_argument(parser)


def check(args: argparse.Namespace) -> None:
    """Reject what argparse's types cannot see, before any work."""
    if args.episodes < 2:
        raise UsageError(f"--episodes must be >= 2 for a confidence interval, got {args.episodes}")
    # MarketConfig's own checks (and its warning of a queue that outgrows a long horizon).
    warning = scenario(next(iter(AUCTIONS)), COST_MODELS[0], "on", args.horizon).queue_warning()
    if warning:
        print(f"warning: {warning}")


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    check(args)
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = range(args.seed, args.seed + args.episodes)
    executor = executor_of(args)
    utilities = measure(tasks(args.mechanisms, args.cost_models, args.grid), seeds, args.horizon, executor)
    rows = summarize(utilities)
    write_csv(rows, args.out / "incentives.csv")
    text = report(rows, args.episodes, args.horizon, args.seed)
    (args.out / "incentives.md").write_text(text)
    plot(args.out / "incentives.png", rows)
    print(text)
    print(f"incentives: {len(rows)} rows x {args.episodes} episodes in {time.perf_counter() - started:.0f} s "
          f"wall time ({executor.where()}); wrote {args.out}/incentives.csv, .md, .png")


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.incentives ARGS`: `radix-auction incentives ARGS`."""
    run_command("incentives", argv)


if __name__ == "__main__":
    main()

"""The market designs side by side, at budgets on the scale of the auction's prices.

    radix-auction markets [--quick] [--designs a,b] [--workloads a,b] [--loads 0.7,1,1.4] [--seeds K]
                          [--tuning-seeds K] [--levels unlimited,1,0.3,0.1] [--size N] [--jobs J]
                          [--out results/markets]

Each point replays a workload through a market (`auction_gym.market.Market`) of four bidders from
an empty engine until the workload runs dry. Load is the arrival intensity over one engine's
capacity (`experiments.sweeps.ReplicaScale`): agentic at load x 14.5 requests/s, shared prefix at
load x 8/s, the Mooncake slice at time scale 4 / load.

Budget levels are defined from the market, not as a constant: "unlimited" (every bidder bids its
urgency, the paper's setting) and fractions of what a truthful bidder pays under the radix auction
over an episode, measured on tuning seeds at the same workload and load (`markets_tuning.Scale`);
every design meets the same budget at a level. Paced bidders run the PI pacer from a multiplier
that spends about the budget, paced over the episode's measured length, with gains tuned per
design on tuning seeds; "radix_vcg (OGD)" is the paper's pacer as the paper runs it, for
reference. Priced designs (`tiers`, `tiers_lpm`, `congestion`) have their price searched on
tuning seeds at each workload, load and level, their best response calibrated to the workload's
engine; "the best tiers" is the tier design best on the tuning seeds. Designs that charge nothing
do not read budgets: they run once per point with truthful bidders (level "any"), and the priority
designs also with every bidder claiming the highest priority for every request ("(claimed)"), where
the escalation that free priority invites ends. At the highest load, one bidder deviating from its pacer's multiplier (x0.5,
x2) under the radix auction and the best tiers measures the pacers' incentives.

Outputs under --out: markets.csv (every evaluated episode), markets_tuning.csv (every tuning
score; none when nothing was tuned), markets_prices.csv (the congestion design's price path on the
first seed; none without it), markets.md
(the command, machine and date, the tables, the targets: `markets_report`) and its figures;
`--rewrite` writes the page and figures again from those CSVs without running anything.
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import replace
from pathlib import Path

from auction_gym.market import MECHANISMS

from ..argtypes import names, output_folder, positive_floats, positive_int
from ..executor import Executor
from ..provenance import made_by
from ..sweeps import replica_scaled
from .markets_points import Bidders, Point
from .markets_report import rewrite_page, write_outputs
from .markets_tuning import PRICE_KEYS, Episodes, calibrate, charges, tune_gains, tune_prices, tuning_seeds

LEVELS = {"unlimited": None, "1": 1.0, "0.3": 0.3, "0.1": 0.1}
"""Budget levels by label: unlimited, or the share of a truthful bidder's spend under the radix auction."""
CLAIMED = ("sglang_priority", "qos_lpm")
"""The free-priority designs also run with every bidder claiming the highest priority."""
DEVIATIONS = (0.5, 2.0)
"""Factors of one bidder's multiplier over its pacer's, at the deviation point."""
DEVIATION_LEVEL = "0.3"
FULL = {"loads": [0.7, 1.0, 1.4], "seeds": 10, "tuning_seeds": 3, "levels": list(LEVELS), "size": 1000}
"""The default grid but its workloads (`full_grid`). 1,000 requests: the Mooncake slice's length (`SAMPLE_TRACE`)."""
QUICK = {"workloads": ["agentic", "shared_prefix"], "loads": [1.4], "seeds": 2, "tuning_seeds": 2,
         "levels": ["unlimited", "0.3"], "size": 1000}


def full_grid() -> dict:
    """The default grid: `FULL` over every registered workload that scales to an engine's capacity
    (`experiments.sweeps.ReplicaScale`), as registered now."""
    return {"workloads": list(replica_scaled()), **FULL}


def sweep(grid: dict, designs: list[str], executor: Executor, log=print) -> tuple[list[dict], list[dict], list[dict]]:
    """Every point of the grid, scored on the evaluation seeds: (rows, tuning rows, price paths)."""
    points = list(itertools.product(grid["workloads"], grid["loads"]))
    tuning = tuning_seeds(grid["tuning_seeds"], grid["seeds"])
    episodes = Episodes(executor)
    scales = calibrate(points, grid["size"], tuning, episodes)
    for key, scale in scales.items():
        log(f"{key}: truthful spend {scale.spend:.4g} a bidder, {scale.rounds} rounds, "
            f"{scale.seconds_per_request * 1000:.1f} ms a request")
    bases: dict[tuple, Point] = {}
    for (w, load), level, design in itertools.product(points, grid["levels"], designs):
        if charges(design):
            scale = scales[(w, load)]
            point = Point(design, w, load, grid["size"], bidders=scale.bidders(LEVELS[level]))
            if design in PRICE_KEYS:
                point = point.with_kwargs(seconds_per_request=scale.seconds_per_request)
            bases[(w, load, level, design)] = point
    priced = {k: p for k, p in bases.items() if p.design in PRICE_KEYS}
    price_scale = {k: scales[k[:2]].price_scale(LEVELS[k[2]]) for k in priced}
    tuned, tuning_rows = tune_prices(priced, price_scale, tuning, episodes, log)
    bases.update(tuned)
    paced = {k: p for k, p in bases.items() if p.bidders.rule == "pid"}
    tuned, gain_rows = tune_gains(paced, tuning, episodes, log)
    bases.update(tuned)
    labelled = _evaluated(bases, points, designs, grid)
    labelled += _deviations(bases, grid)
    seeds = range(grid["seeds"])
    tasks = [(point, s) for _, point in labelled for s in seeds]
    results = episodes.play(tasks)
    rows, paths = [], []
    for ((label, point), seed), (row, prices) in zip(itertools.product(labelled, seeds), results):
        rows.append({**label, "seed": seed, "kwargs": repr(dict(point.kwargs)) if point.kwargs else "",
                     "bidding": _bidding(point.bidders), **row})
        if seed == 0 and prices:
            paths += [{**label, "round": i, "price": float(f"{p:.6g}")} for i, p in enumerate(prices)]
    return rows, tuning_rows + gain_rows, paths


def _evaluated(bases: dict[tuple, Point], points: list, designs: list[str], grid: dict) -> list[tuple[dict, Point]]:
    """(label, point) of every row the page shows."""
    labelled = []
    for w, load in points:
        at = {"workload": w, "load": load}
        for design in designs:
            if not charges(design):
                truthful = Point(design, w, load, grid["size"])
                labelled.append(({**at, "level": "any", "design": design}, truthful))
                if design in CLAIMED:
                    labelled.append(({**at, "level": "any", "design": f"{design} (claimed)"},
                                     replace(truthful, bidders=Bidders("claim"))))
        for level in grid["levels"]:
            for design in designs:
                if (w, load, level, design) in bases:
                    point = bases[(w, load, level, design)]
                    labelled.append(({**at, "level": level, "design": design}, point))
            radix = bases.get((w, load, level, "radix_vcg"))
            if radix is not None and radix.bidders.rule == "pid":
                ogd = replace(radix.bidders, rule="ogd", start=1.0)
                labelled.append(({**at, "level": level, "design": "radix_vcg (OGD)"}, replace(radix, bidders=ogd)))
    return labelled


def _deviations(bases: dict[tuple, Point], grid: dict) -> list[tuple[dict, Point]]:
    """Bidder 0 at DEVIATIONS x its pacer's multiplier, at the highest load and DEVIATION_LEVEL, under
    the radix auction and each tier design."""
    if DEVIATION_LEVEL not in grid["levels"]:
        return []
    load = max(grid["loads"])
    labelled = []
    for w in grid["workloads"]:
        for design in ("radix_vcg", "tiers", "tiers_lpm"):
            point = bases.get((w, load, DEVIATION_LEVEL, design))
            if point is None:
                continue
            for factor in DEVIATIONS:
                label = {"workload": w, "load": load, "level": DEVIATION_LEVEL, "design": f"{design} (bidder 0 x{factor:g})"}
                labelled.append((label, replace(point, bidders=replace(point.bidders, deviation=factor))))
    return labelled


def _bidding(bidders: Bidders) -> str:
    if bidders.rule != "pid":
        return bidders.rule
    return f"pid kp={bidders.gains[0]:g} ki={bidders.gains[1]:g} from {bidders.start:g}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="agentic and shared prefix at load 1.4, unlimited and 0.3 budgets, 2 seeds "
                             "(a few minutes on 2 cores)")
    parser.add_argument("--designs", type=names, default=None,
                        help=f"comma-separated registered mechanisms (default: all: {','.join(MECHANISMS)})")
    parser.add_argument("--workloads", type=names, default=None,
                        help=f"comma-separated, of {','.join(replica_scaled())} (default: all; quick: agentic,shared_prefix)")
    parser.add_argument("--loads", type=positive_floats, default=None,
                        help="comma-separated loads (default 0.7,1,1.4; quick 1.4)")
    parser.add_argument("--levels", type=names, default=None,
                        help=f"comma-separated budget levels, of {','.join(LEVELS)} (default: all)")
    parser.add_argument("--seeds", type=positive_int, default=None, help="evaluation seeds 0..K-1 (default 10, quick 2)")
    parser.add_argument("--tuning-seeds", type=positive_int, default=None,
                        help=f"tuning seeds (from 1000; default {FULL['tuning_seeds']}, quick {QUICK['tuning_seeds']})")
    parser.add_argument("--size", type=positive_int, default=None,
                        help="requests and rounds per point (default 1000, at most the Mooncake slice's 1000 lines)")
    parser.add_argument("--jobs", type=positive_int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out", type=output_folder, default=Path("results/markets"),
                        help="output folder (default results/markets; the documentation's tables are docs/markets)")
    parser.add_argument("--rewrite", action="store_true",
                        help="run nothing: write --out's markets.md and figures again from the CSVs a run left there")


def run(args: argparse.Namespace) -> None:
    if args.rewrite:
        for line in rewrite_page(args.out, made_by(args)):
            print(line)
        print(f"wrote {args.out}/markets.md")
        return
    grid = dict(QUICK) if args.quick else full_grid()
    for key in ("workloads", "loads", "seeds", "tuning_seeds", "levels", "size"):
        if getattr(args, key) is not None:
            grid[key] = getattr(args, key)
    designs = list(args.designs or MECHANISMS)
    for key, given, valid in (("designs", designs, MECHANISMS), ("workloads", grid["workloads"], replica_scaled()),
                              ("levels", grid["levels"], LEVELS)):
        if unknown := sorted(set(given) - set(valid)):
            raise ValueError(f"--{key}: unknown {', '.join(unknown)}; valid: {', '.join(valid)}")
    t0 = time.perf_counter()
    with Executor(args.jobs).session() as executor:  # one pool for the calibration, tunings and evaluation
        rows, tuning, paths = sweep(grid, designs, executor)
    wall = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    for line in write_outputs(rows, tuning, paths, args.out, made_by(args).rstrip() + f" Wall time {wall:.0f} s.\n"):
        print(line)
    print(f"wrote {args.out}/markets.md; wall time {wall:.0f} s")

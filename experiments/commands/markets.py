"""The market designs side by side: every registered mechanism x workload x load x seed, paced.

    radix-auction markets [--quick] [--designs a,b] [--workloads a,b] [--loads 0.7,1,1.4] [--seeds K]
                          [--size N] [--truthful] [--out docs/markets]

Each point replays a workload through a market (`auction_gym.market.Market`) whose four bidders
all pace by OGD (`auction_gym.pacing.OGDPacer`) against the default budgets (`MarketConfig`:
0.0001 a round over a horizon of `--size` rounds), from an empty engine until the workload runs
dry or the horizon ends; with `--truthful` every bidder bids its urgency (multiplier 1) with a
budget it cannot spend, the paper's setting (and `reproduce`'s). Load is the arrival intensity over one engine's capacity, as `radix-auction
cluster` sets it for one replica (`experiments.sweeps.ReplicaScale`): agentic at load x 14.5 requests/s,
shared prefix at load x 8/s, the Mooncake slice at time scale 4 / load. Designs: every registered
mechanism (`auction_gym.registry`), so a new one joins by registration alone, plus two tuned tier
designs (`tiers (welfare)`, `tiers (revenue)`): the base price and ratios of TIER_GRID that give the
most welfare, and separately the most revenue, on tuning seeds (1000 + k) of the same workload and
load, scored on the evaluation seeds (0 .. K-1) as every other row.

Per point: welfare (sum of V - w x latency over finished requests), revenue, the share of the
budgets spent, cache hit rate, TTFT and latency (mean, p50, p99) per urgency class, the share of
urgent requests finished within SLO_SECONDS, and for the congestion design its price path on the
first evaluation seed (the price of every round, from `RoundReport.decision.prices`). Outputs under --out: markets.csv,
markets_prices.csv, markets.md (the command, machine and date that made it, the tables, the
targets read off them: `markets_report.targets`) and figures markets_welfare.png,
markets_latency.png, markets_prices.png.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import numpy as np

from auction_gym.market import MECHANISMS, Market, MarketConfig
from auction_gym.pacing import OGDPacer
from auction_gym.workload import SAMPLE_TRACE, get_workload

from ..argtypes import positive_int
from ..provenance import made_by
from ..sweeps import replica_scale
from .markets_report import CLASSES, write_outputs

SLO_SECONDS = 3.0
"""An urgent request's latency objective: its class's median break-even latency (V / w, s)."""
TIER_GRID = [{"base_price": p, "ratios": r} for p in (3e-8, 1e-7, 3e-7, 1e-6)
             for r in ((0.5, 1.0, 1.8), (0.25, 1.0, 4.0))]
"""The tier designs tuned over: base prices per prompt token x ratio sets (Google's, and a wider one)."""
TUNED = {"welfare": "tiers (welfare)", "revenue": "tiers (revenue)"}
UNLIMITED = 1e12
"""The budget of `--truthful`'s bidders: far beyond what any design charges in an episode."""
WORKLOADS = ("agentic", "shared_prefix", "mooncake")
FULL = {"workloads": list(WORKLOADS), "loads": [0.7, 1.0, 1.4], "seeds": 5, "size": 1000}
"""The default grid. 1,000 requests: the Mooncake slice's length (`SAMPLE_TRACE`)."""
QUICK = {"workloads": ["agentic", "shared_prefix"], "loads": [0.7, 1.0, 1.4], "seeds": 2, "size": 1000}


def scenario(design: str, workload: str, load: float, size: int, kwargs: dict | None = None,
             truthful: bool = False) -> MarketConfig:
    """The market of one point: `size` requests (and rounds), offered at `load`; with `truthful`,
    budgets no bidder can spend (UNLIMITED)."""
    entry = get_workload(workload)
    scale = replica_scale(workload)
    trace = SAMPLE_TRACE if entry.trace_argument is not None else None
    return MarketConfig(mechanism=design, mechanism_kwargs=dict(kwargs or {}), workload=workload, trace_path=trace,
                        workload_kwargs=scale.workload_kwargs(entry.intensity, load, size, 1),
                        engine_kwargs=dict(scale.engine_kwargs), horizon=size, warmup=0.0,
                        budget=UNLIMITED if truthful else None)


def run_point(config: MarketConfig, seed: int, truthful: bool = False) -> tuple[dict, list[float]]:
    """One episode, paced by OGD (or with every multiplier 1, `truthful`): its row of measures, and
    the posted price of each round (empty for a design that posts none)."""
    t0 = time.perf_counter()
    market = Market(config)
    market.reset(seed)
    kinds = {r.id: r.kind for r in config.make_workload(seed, market.draws)}
    pacer, ones = OGDPacer(), [1.0] * config.num_bidders
    welfare = revenue = 0.0
    finished: list[int] = []
    prices: list[float] = []
    while not market.done:
        report = market.step(ones if truthful else pacer.multipliers(market.observations().tolist()))
        welfare += report.welfare
        revenue += report.revenue
        finished += report.finished
        posted = getattr(report.decision, "prices", ())
        if len(posted) == 1:
            prices.append(posted[0])
    records = market.engine.records
    row = {"welfare": welfare, "revenue": revenue, "requests": len(finished),
           "spent_share": float(np.mean(market.spent / market.budget)),
           "hit_rate": market.engine.metrics().hit_rate}
    for cls in CLASSES:
        recs = [records[i] for i in finished if kinds[i] == cls]
        for what in ("ttft", "latency"):
            values = np.array([getattr(r, what) for r in recs]) if recs else np.array([np.nan])
            row[f"{cls}_{what}_mean"] = float(np.mean(values))
            row[f"{cls}_{what}_p50"] = float(np.percentile(values, 50))
            row[f"{cls}_{what}_p99"] = float(np.percentile(values, 99))
    urgent = [records[i].latency for i in finished if kinds[i] == "urgent"]
    row["urgent_slo_share"] = float(np.mean([x <= SLO_SECONDS for x in urgent])) if urgent else float("nan")
    row["wall_s"] = time.perf_counter() - t0
    return row, prices


def tune_tiers(workload: str, load: float, size: int, seeds: int, truthful: bool, log=print) -> dict[str, dict]:
    """The TIER_GRID entry of most mean welfare and of most mean revenue on the tuning seeds."""
    scores = []
    for kwargs in TIER_GRID:
        rows = [run_point(scenario("tiers", workload, load, size, kwargs, truthful), 1000 + k, truthful)[0]
                for k in range(seeds)]
        scores.append((np.mean([r["welfare"] for r in rows]), np.mean([r["revenue"] for r in rows]), kwargs))
    best = {"welfare": max(scores, key=lambda s: s[0])[2], "revenue": max(scores, key=lambda s: s[1])[2]}
    log(f"{workload} load {load}: tiers tuned for welfare {best['welfare']}, for revenue {best['revenue']}")
    return best


def sweep(grid: dict, designs: list[str], truthful: bool = False, log=print) -> tuple[list[dict], list[dict]]:
    """Every point of the grid: the rows, and the congestion design's price paths."""
    rows, paths, size = [], [], grid["size"]
    for workload, load in itertools.product(grid["workloads"], grid["loads"]):
        tuned = tune_tiers(workload, load, size, grid["seeds"], truthful, log) if "tiers" in designs else {}
        variants = [(d, d, {}) for d in designs] + [(TUNED[k], "tiers", kw) for k, kw in tuned.items()]
        for (label, design, kwargs), seed in itertools.product(variants, range(grid["seeds"])):
            row, prices = run_point(scenario(design, workload, load, size, kwargs, truthful), seed, truthful)
            rows.append({"workload": workload, "load": load, "seed": seed, "design": label,
                         "tier_kwargs": repr(kwargs) if kwargs else "", **row})
            if seed == 0:  # one path per point: the one the figure draws (every seed's would be megabytes)
                paths += [{"workload": workload, "load": load, "seed": seed, "design": label, "round": i,
                           "price": float(f"{p:.6g}")} for i, p in enumerate(prices)]
            log(f"{workload} load {load} seed {seed} {label}: welfare {row['welfare']:.1f} revenue "
                f"{row['revenue']:.3g} hit {row['hit_rate']:.3f} ({row['wall_s']:.1f} s)")
    return rows, paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="agentic and shared prefix at loads 0.7, 1, 1.4, 2 seeds (under 3 minutes on 2 cores)")
    parser.add_argument("--designs", type=lambda s: s.split(","), default=None,
                        help=f"comma-separated registered mechanisms (default: all: {','.join(MECHANISMS)})")
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=None,
                        help=f"comma-separated, of {','.join(WORKLOADS)} (default: all; quick: agentic,shared_prefix)")
    parser.add_argument("--loads", type=lambda s: [float(v) for v in s.split(",")], default=None,
                        help="comma-separated loads (default 0.7,1,1.4)")
    parser.add_argument("--seeds", type=positive_int, default=None, help="evaluation seeds (default 5, quick 2)")
    parser.add_argument("--size", type=positive_int, default=None,
                        help="requests and rounds per point (default 1000, at most the Mooncake slice's 1000 lines)")
    parser.add_argument("--truthful", action="store_true",
                        help="every bidder bids its urgency (multiplier 1) with an unlimited budget, as reproduce "
                             "does, instead of pacing by OGD against the default budgets")
    parser.add_argument("--out", type=Path, default=Path("docs/markets"), help="output folder (default docs/markets)")


def run(args: argparse.Namespace) -> None:
    grid = dict(QUICK if args.quick else FULL)
    for key in ("workloads", "loads", "seeds", "size"):
        if getattr(args, key) is not None:
            grid[key] = getattr(args, key)
    designs = list(args.designs or MECHANISMS)
    for key, given, valid in (("designs", designs, MECHANISMS), ("workloads", grid["workloads"], WORKLOADS)):
        if unknown := sorted(set(given) - set(valid)):
            raise ValueError(f"--{key}: unknown {', '.join(unknown)}; valid: {', '.join(valid)}")
    t0 = time.perf_counter()
    rows, paths = sweep(grid, designs, args.truthful)
    args.out.mkdir(parents=True, exist_ok=True)
    for line in write_outputs(rows, paths, args.out, made_by(args), args.truthful):
        print(line)
    print(f"wall time {time.perf_counter() - t0:.0f} s")

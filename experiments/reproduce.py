"""Reproduce the paper's findings: latency blow-up and hit-rate collapse of strict priority, and the
share of its welfare gain that the radix-tree auction keeps.

    radix-auction reproduce [--quick] [--trace PATH] [--seeds K] [--out results/]

Every policy (fcfs, lpm, dfs_weight, strict_vcg, radix_vcg) replays the same workloads (same seeds,
so the same arrivals, prompts and bids) through the simulated engine, over a sweep of load and KV
capacity, with truthful bids and unlimited budgets (the auctions' payments are charged as the
market charges them, DESIGN.md section 3).

Definitions (per workload, KV capacity and seed):
- load: arrival rate / capacity, where capacity is the throughput (requests/s) LPM sustains on the
  same workload when saturated (agentic arrivals at 80/s; the trace at 4x its own rate).
- throughput: finished requests / (last finish - first arrival); sustainable_throughput: a
  policy's throughput at the highest load of the sweep, where every policy is saturated, i.e. the
  rate at which it serves when its queue never empties.
- model_welfare: DESIGN.md's W = -sum_r w_r x C_r with true urgencies and C_k = k ("unit"), of the
  policy's order of each queue snapshot, summed over the snapshots and divided by their number.
  The snapshots are identical for every policy: the waiting queues (and what of each request was
  cached) at each round of the FCFS run.
- welfare_capture (radix_vcg rows): (W_radix - W_fcfs) / (W_strict - W_fcfs) of model welfare,
  NaN where W_strict - W_fcfs is under 5% of |W_fcfs|.
- realized_welfare: sum over finished requests of V - w x latency; revenue: payments charged.
"""

from __future__ import annotations

import argparse
import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from auction_gym import RadixCache, make_scheduler
from auction_gym.market import Market, MarketConfig
from auction_gym.workload import AgenticConfig

POLICIES = ("fcfs", "lpm", "dfs_weight", "strict_vcg", "radix_vcg")
DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/data/mooncake/conversation_trace.jsonl"
COLUMNS = (
    "workload", "policy", "load", "kv_capacity", "seed", "mean_latency", "p99_latency", "mean_ttft",
    "hit_rate", "throughput", "sustainable_throughput", "model_welfare", "realized_welfare",
    "revenue", "welfare_capture",
)


@dataclass(frozen=True)
class Sweep:
    """The grid of one run of `reproduce`."""

    loads: tuple[float, ...]
    agentic_kv: tuple[int, ...]
    agentic_duration: float
    """Seconds of agentic arrivals per run."""
    mooncake_kv: tuple[int, ...]
    mooncake_lines: int
    """Requests of the trace replayed per run (from its start)."""
    max_snapshots: int = 200


QUICK = Sweep(loads=(0.5, 1.0, 1.5, 2.5), agentic_kv=(20_000, 60_000), agentic_duration=20.0,
              mooncake_kv=(200_000,), mooncake_lines=300)
FULL = Sweep(loads=(0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0), agentic_kv=(15_000, 30_000, 60_000),
             agentic_duration=60.0, mooncake_kv=(100_000, 400_000), mooncake_lines=1000)
# Agentic traffic with the workload's full mix (sessions, fan-out, rollouts, urgent calls) and
# tenants that differ, unlike the env's default scenario.
AGENTIC = {"bidder_heterogeneity": AgenticConfig.bidder_heterogeneity, "shape_mix": AgenticConfig().shape_mix}
NUM_BIDDERS = 8
CAPTURE_MIN_GAIN = 0.05
"""Welfare capture is left out (NaN) where strict priority gains less than this share of FCFS's
model welfare: near zero load the ratio of two tiny differences says nothing."""
SATURATING = {"agentic": 80.0, "mooncake": 0.25}
"""Arrival settings that saturate the engine: agentic requests/s, Mooncake time scale (4x its rate)."""


def replay_config(workload: str, kv: int, rate_or_scale: float, sweep: Sweep, policy: str,
                  trace: Path | None, cost_model: str = "unit") -> MarketConfig:
    """A market that replays one workload to its end under `policy`, truthful and unbudgeted."""
    if workload == "agentic":
        wk = {**AGENTIC, "rate": rate_or_scale, "duration": sweep.agentic_duration}
    else:
        wk = {"time_scale": rate_or_scale, "limit": sweep.mooncake_lines}
    return MarketConfig(
        num_bidders=NUM_BIDDERS, mechanism=policy, cost_model=cost_model, workload=workload, trace_path=trace,
        workload_kwargs=wk, engine_kwargs={"kv_capacity_tokens": kv, "max_running_requests": 256},
        horizon=10**9, budget=1e18, warmup=0.0,
    )


def replay(config: MarketConfig, seed: int, snapshots: list | None = None) -> dict[str, float]:
    """Run a market to the end with every multiplier 1; metrics of the run. With `snapshots`, also
    record each round's waiting queue with the cached length of every waiting request."""
    market = Market(config)
    market.reset(seed)
    ones = np.ones(config.num_bidders)
    revenue = welfare = 0.0
    while not market.done:
        report = market.step(ones)
        revenue += report.revenue
        welfare += report.welfare
        if snapshots is not None and market.engine.waiting:
            cache = market.engine.cache
            snapshots.append([(r, cache.prefix_len(r.tokens[:-1])) for r in market.engine.waiting])
    m = market.engine.metrics()
    return {"mean_latency": m.mean_latency, "p99_latency": m.p99_latency, "mean_ttft": m.mean_ttft,
            "hit_rate": m.hit_rate, "throughput": m.throughput_rps, "realized_welfare": welfare,
            "revenue": revenue, "finished": m.finished}


def snapshot_welfare(snapshots: list, policy: str, limit: int, cost_model: str = "unit") -> float:
    """Mean over queue snapshots of W = -sum_r w_r x position_r under `policy`'s order.

    Each snapshot is rebuilt as a cache holding exactly each request's cached prefix, which gives
    every request the match it had (cache-aware policies order by those), without touching the run.
    """
    if not snapshots:
        return math.nan
    picks = np.linspace(0, len(snapshots) - 1, min(limit, len(snapshots))).round().astype(int)
    total = 0.0
    for k in picks:
        queue = [r for r, _ in snapshots[k]]
        cache = RadixCache()
        for r, cached in snapshots[k]:
            if cached:
                cache.insert(r.tokens[:cached])
        kwargs = {"cost_model": cost_model} if policy.endswith("_vcg") else {}
        order = make_scheduler(policy, **kwargs).order(queue, cache)
        total -= sum(r.urgency * pos for pos, r in enumerate(order, start=1))
    return total / len(picks)


def capacity(workload: str, kv: int, sweep: Sweep, trace: Path | None, seed: int) -> float:
    """Requests/s that LPM serves on this workload when saturated (arrivals at SATURATING)."""
    cfg = replay_config(workload, kv, SATURATING[workload], sweep, "lpm", trace)
    return replay(cfg, seed)["throughput"]


def mooncake_rate(trace: Path, lines: int) -> float:
    """Arrivals per second of the trace's first `lines` requests at time_scale 1."""
    from auction_gym.workload import iter_mooncake

    times = [r.arrival for r in iter_mooncake(trace, limit=lines)]
    return (len(times) - 1) / (times[-1] - times[0])


def run_sweep(sweep: Sweep, seeds: int, trace: Path | None, cost_model: str = "unit",
              progress: bool = True) -> list[dict]:
    """Every (workload, KV capacity, load, seed, policy) row; see the module docstring."""
    from tqdm import tqdm

    plans = [("agentic", kv) for kv in sweep.agentic_kv]
    if trace is not None:
        plans += [("mooncake", kv) for kv in sweep.mooncake_kv]
    total = len(plans) * seeds * (len(sweep.loads) * len(POLICIES) + 1)
    rows: list[dict] = []
    with tqdm(total=total, desc="reproduce", disable=not progress) as bar:
        for workload, kv in plans:
            for seed in range(seeds):
                cap = capacity(workload, kv, sweep, trace, seed)
                bar.update()
                natural = mooncake_rate(trace, sweep.mooncake_lines) if workload == "mooncake" else None
                point_rows = []
                for load in sweep.loads:
                    rate = load * cap
                    setting = rate if workload == "agentic" else natural / rate
                    snapshots: list = []
                    for policy in POLICIES:
                        cfg = replay_config(workload, kv, setting, sweep, policy, trace, cost_model)
                        row = replay(cfg, seed, snapshots if policy == "fcfs" else None)
                        row.update(workload=workload, policy=policy, load=load, kv_capacity=kv, seed=seed)
                        point_rows.append(row)
                        bar.update()
                    welfare = {p: snapshot_welfare(snapshots, p, sweep.max_snapshots, cost_model) for p in POLICIES}
                    gain = welfare["strict_vcg"] - welfare["fcfs"]
                    material = gain > CAPTURE_MIN_GAIN * abs(welfare["fcfs"])
                    for row in point_rows[-len(POLICIES):]:
                        row["model_welfare"] = welfare[row["policy"]]
                        row["welfare_capture"] = (
                            (welfare["radix_vcg"] - welfare["fcfs"]) / gain
                            if row["policy"] == "radix_vcg" and material else math.nan
                        )
                top = max(sweep.loads)
                saturated = {r["policy"]: r["throughput"] for r in point_rows if r["load"] == top}
                for row in point_rows:
                    row["sustainable_throughput"] = saturated[row["policy"]]
                rows += point_rows
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="small sweep, under 3 minutes on 2 cores")
    parser.add_argument("--trace", type=Path, default=None,
                        help=f"Mooncake conversation trace (default: {DEFAULT_TRACE} if present)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per point (default 1 quick, 3 full)")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--cost-model", choices=("unit", "tokens"), default="unit",
                        help="the auctions' completion model (default unit, the paper's); model welfare "
                        "is always measured with C_k = k")


def run(args: argparse.Namespace) -> None:
    from .reproduce_report import write_report

    trace = args.trace if args.trace is not None else (DEFAULT_TRACE if DEFAULT_TRACE.exists() else None)
    if trace is not None and not trace.exists():
        raise SystemExit(f"trace not found: {trace}")
    sweep = QUICK if args.quick else FULL
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    if seeds < 1:
        raise SystemExit("--seeds must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = run_sweep(sweep, seeds, trace, args.cost_model)
    write_csv(rows, args.out / "reproduce.csv")
    print(write_report(rows, args.out))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="radix-auction reproduce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()

"""Reproduce the paper's findings: latency blow-up and hit-rate collapse of strict priority, and the
share of its welfare gain that the radix-tree auction keeps.

    radix-auction reproduce [--quick] [--trace PATH] [--seeds K] [--cost-model tokens|unit] [--out results/]

Every policy (fcfs, lpm, klpm, dfs_weight, strict_vcg, radix_vcg, and the radix auction under the
other cost model, `radix_vcg/unit` by default) replays the same workloads (same seeds, so the same
arrivals, prompts and bids) through the simulated engine, over a sweep of load and KV capacity,
with truthful bids and unlimited budgets (the auctions' payments are charged as the market charges
them, DESIGN.md section 3). Workloads: agentic traffic, SGLang's generated-shared-prefix benchmark
(`auction_gym.workload.shared_prefix`), and the Mooncake conversation trace when it is found.

Definitions (per workload, KV capacity and seed):
- load: arrival rate / capacity, where capacity is the throughput (requests/s) LPM sustains on the
  same workload when saturated (arrivals at SATURATING).
- throughput: finished requests / (last finish - first arrival); sustainable_throughput: a
  policy's throughput at the highest load of the sweep, where every policy is saturated, i.e. the
  rate at which it serves when its queue never empties.
- model_welfare: DESIGN.md's W = -sum_r w_r x C_r with true urgencies and C under the auctions'
  cost model (`--cost-model`; "unit": C_k = k), of the policy's order of each queue snapshot,
  averaged over the snapshots. The snapshots are identical for every policy: the waiting queues
  (and what of each request was cached) at each round of the FCFS run.
- welfare_capture (radix rows): (W_radix - W_fcfs) / (W_strict - W_fcfs) of model welfare, NaN
  where W_strict - W_fcfs is under 5% of |W_fcfs|.
- realized_welfare: sum over finished requests of V - w x latency; realized_capture (radix rows):
  the same ratio of realized welfare, NaN where strict priority does not realize 5% of |RW_fcfs|
  more than FCFS (at high load it realizes less: its queue, not its order, decides).
- revenue: payments charged.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from auction_gym import RadixCache, make_scheduler
from auction_gym.market import MECHANISMS, Market, MarketConfig
from auction_gym.mechanism.queue_tree import build_queue_tree, completion_times
from auction_gym.workload import AgenticConfig

AUCTION = "radix_vcg"
COST_MODELS = ("tokens", "unit")
DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/data/mooncake/conversation_trace.jsonl"
COLUMNS = (
    "workload", "policy", "load", "kv_capacity", "seed", "mean_latency", "p99_latency", "mean_ttft",
    "hit_rate", "throughput", "sustainable_throughput", "model_welfare", "realized_welfare",
    "revenue", "welfare_capture", "realized_capture",
)


def policies(cost_model: str) -> tuple[str, ...]:
    """The sweep's policies: every mechanism, then the radix auction under the other cost model,
    named "radix_vcg/<model>"."""
    other = next(m for m in COST_MODELS if m != cost_model)
    return MECHANISMS + (f"{AUCTION}/{other}",)


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
    shared_kv: tuple[int, ...] = ()
    shared_groups: tuple[int, int] = (64, 16)
    """Shared-prefix workload size: (num_groups, prompts_per_group)."""
    shared_loads: tuple[float, ...] = ()
    """Loads of the shared-prefix workload, placed around the policies' sustainable throughputs
    (strict priority's is about 0.7 of LPM's there)."""
    max_snapshots: int = 200

    def loads_of(self, workload: str) -> tuple[float, ...]:
        return self.shared_loads if workload == "shared_prefix" else self.loads


QUICK = Sweep(loads=(0.5, 1.0, 1.5, 2.5), agentic_kv=(20_000, 60_000), agentic_duration=20.0,
              mooncake_kv=(200_000,), mooncake_lines=300, shared_kv=(40_000,), shared_groups=(64, 16),
              shared_loads=(0.6, 0.9, 2.5))
FULL = Sweep(loads=(0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0), agentic_kv=(15_000, 30_000, 60_000),
             agentic_duration=60.0, mooncake_kv=(100_000, 400_000), mooncake_lines=1000,
             shared_kv=(40_000, 100_000), shared_groups=(64, 64),
             shared_loads=(0.5, 0.7, 0.8, 0.9, 1.0, 1.2, 2.0))
# Agentic traffic with the workload's full mix (sessions, fan-out, rollouts, urgent calls) and
# tenants that differ, unlike the env's default scenario.
AGENTIC = {"bidder_heterogeneity": AgenticConfig.bidder_heterogeneity, "shape_mix": AgenticConfig().shape_mix}
NUM_BIDDERS = 8
CAPTURE_MIN_GAIN = 0.05
"""Welfare capture is left out (NaN) where strict priority gains less than this share of FCFS's
welfare: near zero load the ratio of two tiny differences says nothing."""
SATURATING = {"agentic": 80.0, "shared_prefix": 200.0, "mooncake": 0.25}
"""Arrival settings that saturate the engine: agentic and shared-prefix requests/s, Mooncake time
scale (4x its rate)."""


def split_policy(policy: str, cost_model: str) -> tuple[str, str]:
    """(mechanism, its auction cost model) of a sweep policy name such as "radix_vcg/unit"."""
    mechanism, _, model = policy.partition("/")
    return mechanism, model or cost_model


def replay_config(workload: str, kv: int, rate_or_scale: float, sweep: Sweep, policy: str,
                  trace: Path | None, cost_model: str = "tokens") -> MarketConfig:
    """A market that replays one workload to its end under `policy`, truthful and unbudgeted."""
    if workload == "agentic":
        wk = {**AGENTIC, "rate": rate_or_scale, "duration": sweep.agentic_duration}
    elif workload == "shared_prefix":
        groups, per_group = sweep.shared_groups
        wk = {"rate": rate_or_scale, "num_groups": groups, "prompts_per_group": per_group}
    else:
        wk = {"time_scale": rate_or_scale, "limit": sweep.mooncake_lines}
    mechanism, model = split_policy(policy, cost_model)
    return MarketConfig(
        num_bidders=NUM_BIDDERS, mechanism=mechanism, cost_model=model, workload=workload, trace_path=trace,
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


def snapshot_welfare(snapshots: list, policy: str, limit: int, cost_model: str = "tokens") -> float:
    """Mean over queue snapshots of W = -sum_r w_r x C_r under `policy`'s order, with C from the
    auctions' `cost_model` ("unit": C_k = k; "tokens": uncached prefix tokens of the first k
    requests + k, DESIGN.md section 3).

    Each snapshot is rebuilt as a cache holding exactly each request's cached prefix, which gives
    every request the match it had (cache-aware policies order by those), without touching the run.
    """
    if not snapshots:
        return math.nan
    mechanism, model = split_policy(policy, cost_model)
    picks = np.linspace(0, len(snapshots) - 1, min(limit, len(snapshots))).round().astype(int)
    total = 0.0
    for k in picks:
        queue = [r for r, _ in snapshots[k]]
        cache = RadixCache()
        for r, cached in snapshots[k]:
            if cached:
                cache.insert(r.tokens[:cached])
        kwargs = {"cost_model": model} if mechanism.endswith("_vcg") else {}
        order = make_scheduler(mechanism, **kwargs).order(queue, cache)
        position = {id(r): i for i, r in enumerate(queue)}
        prefix_lens = None if cost_model == "unit" else [cached for _, cached in snapshots[k]]
        tree = build_queue_tree([r.tokens for r in queue], prefix_lens)
        done = completion_times(tree, [position[id(r)] for r in order], 1.0)
        total -= sum(r.urgency * c for r, c in zip(queue, done))
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


def capture(values: dict[str, float]) -> float:
    """(radix - fcfs) / (strict - fcfs) of a welfare measure; NaN where strict gains too little."""
    gain = values["strict_vcg"] - values["fcfs"]
    if not gain > CAPTURE_MIN_GAIN * abs(values["fcfs"]):
        return math.nan
    return (values[AUCTION] - values["fcfs"]) / gain


def _nothing() -> None:
    pass


def run_point(workload: str, kv: int, load: float, setting: float, seed: int, sweep: Sweep,
              trace: Path | None, cost_model: str, tick: Callable[[], object] = _nothing) -> list[dict]:
    """Every policy's row at one (workload, KV capacity, load, seed)."""
    names = policies(cost_model)
    snapshots: list = []
    rows = []
    for policy in names:
        cfg = replay_config(workload, kv, setting, sweep, policy, trace, cost_model)
        row = replay(cfg, seed, snapshots if policy == "fcfs" else None)
        row.update(workload=workload, policy=policy, load=load, kv_capacity=kv, seed=seed)
        rows.append(row)
        tick()
    welfare = {p: snapshot_welfare(snapshots, p, sweep.max_snapshots, cost_model) for p in names}
    realized = {r["policy"]: r["realized_welfare"] for r in rows}
    for row in rows:
        row["model_welfare"] = welfare[row["policy"]]
        is_radix = row["policy"] == AUCTION
        row["welfare_capture"] = capture(welfare) if is_radix else math.nan
        row["realized_capture"] = capture(realized) if is_radix else math.nan
    return rows


def run_task(workload: str, kv: int, seed: int, sweep: Sweep, trace: Path | None, cost_model: str,
             tick: Callable[[], object] = _nothing) -> list[dict]:
    """Every row of one (workload, KV capacity, seed): its capacity run, then every load and policy;
    `tick()` after each run."""
    loads = sweep.loads_of(workload)
    cap = capacity(workload, kv, sweep, trace, seed)
    tick()
    natural = mooncake_rate(trace, sweep.mooncake_lines) if workload == "mooncake" else None
    rows = []
    for load in loads:
        rate = load * cap
        setting = natural / rate if workload == "mooncake" else rate
        rows += run_point(workload, kv, load, setting, seed, sweep, trace, cost_model, tick)
    saturated = {r["policy"]: r["throughput"] for r in rows if r["load"] == max(loads)}
    for row in rows:
        row["sustainable_throughput"] = saturated[row["policy"]]
    return rows


def run_sweep(sweep: Sweep, seeds: int, trace: Path | None, cost_model: str = "tokens",
              progress: bool = True, jobs: int = 1) -> list[dict]:
    """Every (workload, KV capacity, load, seed, policy) row; see the module docstring.

    With jobs > 1 the (workload, KV capacity, seed) tasks run in that many processes; every task is
    deterministic, so the rows are the same as with one.
    """
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    plans = [("agentic", kv) for kv in sweep.agentic_kv] + [("shared_prefix", kv) for kv in sweep.shared_kv]
    if trace is not None:
        plans += [("mooncake", kv) for kv in sweep.mooncake_kv]
    tasks = [(workload, kv, seed) for workload, kv in plans for seed in range(seeds)]
    size = {w: len(sweep.loads_of(w)) * len(policies(cost_model)) + 1 for w, _ in plans}
    with tqdm(total=sum(size[w] for w, _, _ in tasks), desc="reproduce", disable=not progress) as bar:
        if jobs <= 1:
            return [row for task in tasks for row in run_task(*task, sweep, trace, cost_model, bar.update)]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(run_task, *task, sweep, trace, cost_model): task for task in tasks}
            for future in as_completed(futures):
                bar.update(size[futures[future][0]])
            return [row for future in futures for row in future.result()]


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="small sweep, about 20 s on 2 cores")
    parser.add_argument("--trace", type=Path, default=None,
                        help=f"Mooncake conversation trace (default: {DEFAULT_TRACE} if present)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per point (default 1 quick, 3 full)")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                        help="processes to run (workload, KV size, seed) tasks in (default: every core)")
    parser.add_argument("--cost-model", choices=COST_MODELS, default="tokens",
                        help="the auctions' completion model and the one model welfare is measured in "
                        "(default tokens, cache-aware); the radix auction under the other one is reported "
                        "beside it")


def run(args: argparse.Namespace) -> None:
    from .reproduce_report import write_report

    trace = args.trace if args.trace is not None else (DEFAULT_TRACE if DEFAULT_TRACE.exists() else None)
    if trace is not None and not trace.exists():
        raise SystemExit(f"trace not found: {trace}")
    sweep = QUICK if args.quick else FULL
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    if seeds < 1:
        raise SystemExit("--seeds must be >= 1")
    if args.jobs < 1:
        raise SystemExit("--jobs must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = run_sweep(sweep, seeds, trace, args.cost_model, jobs=args.jobs)
    write_csv(rows, args.out / "reproduce.csv")
    print(write_report(rows, args.out, args.cost_model))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="radix-auction reproduce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()

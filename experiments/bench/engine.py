"""Benchmark: replay the Mooncake conversation trace through the simulated engine, per scheduler.

    python -m experiments.bench.engine [--trace PATH] [--time-scale X] [--limit N]

Prints, per scheduler: wall time, simulated requests per wall second, token hit rate, mean latency
and TTFT, and the longest waiting queue; then RadixCache match + insert throughput in tokens/s.
The trace's arrivals are multiplied by `--time-scale`: the trace came from a cluster, and at 1.0 one
simulated H100 is overloaded about 4x, so the queue (and every policy's latency) grows without bound.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from auction_gym import EngineConfig, RadixCache, SimEngine
from auction_gym.workload import iter_mooncake

from ..commands.reproduce_trace import FULL_TRACE_ENV, SLICE, full_trace
from . import Table

DEFAULT_TRACE = full_trace() or SLICE
"""The full trace when FULL_TRACE_ENV names it (the figures on the documentation's benchmarks page are on it), else the
shipped 1,000-line slice."""


def replay(trace: Path, scheduler: str, time_scale: float, limit: int | None) -> dict[str, float]:
    engine = SimEngine(scheduler, EngineConfig())
    engine.submit(iter_mooncake(trace, time_scale=time_scale, limit=limit))
    max_queue = 0
    t0 = time.perf_counter()
    while (it := engine.step()) is not None:
        max_queue = max(max_queue, it.queue_len)
    wall = time.perf_counter() - t0
    m = engine.metrics()
    return {
        "wall_s": wall, "req_per_wall_s": (m.finished + m.rejected) / wall, "hit_rate": m.hit_rate,
        "mean_latency": m.mean_latency, "mean_ttft": m.mean_ttft, "max_queue": max_queue,
        "finished": m.finished, "rejected": m.rejected,
    }


def cache_throughput(trace: Path, limit: int | None, capacity: int = 2_000_000) -> float:
    """Tokens per second through match_prefix + insert, evicting to stay within `capacity`."""
    prompts = [r.tokens for r in iter_mooncake(trace, limit=limit or 3000)]
    cache = RadixCache()
    t0 = time.perf_counter()
    for tokens in prompts:
        cache.match_prefix(tokens)
        cache.insert(tokens)
        if cache.total_size > capacity:
            cache.evict(cache.total_size - capacity)
    wall = time.perf_counter() - t0
    return 2 * sum(len(t) for t in prompts) / wall


def table(quick: bool) -> Table:
    """The page's table: DEFAULT_TRACE at time scale 4 (one engine about saturated) per scheduler,
    with each one's wall time over FCFS's from the same run (quick: its first 200 requests)."""
    limit, schedulers = (200 if quick else None), ("fcfs", "lpm", "radix_vcg", "strict_vcg")
    replay(DEFAULT_TRACE, "fcfs", 4.0, 100 if quick else 500)  # warm-up (first-touch allocation)
    runs = {name: replay(DEFAULT_TRACE, name, 4.0, limit) for name in schedulers}
    rows = [(name, f"{r['wall_s']:.2f}", f"{r['wall_s'] / runs['fcfs']['wall_s']:.2f}x", f"{r['req_per_wall_s']:,.0f}",
             f"{r['hit_rate']:.3f}", f"{r['mean_latency']:.2f}", f"{r['max_queue']:,}", f"{r['finished']:,}")
            for name, r in runs.items()]
    tokens = cache_throughput(DEFAULT_TRACE, limit)
    return Table(("scheduler", "wall s", "x FCFS", "requests per wall s", "hit rate", "mean latency s",
                  "longest queue", "finished"), rows,
                 [f"Trace {DEFAULT_TRACE.name} ({f'its first {limit} requests' if limit else 'every request'}), time scale 4.",
                  f"RadixCache match + insert: {tokens / 1e6:,.1f} M tokens/s."])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                    help=f"Mooncake JSONL trace (default: ${FULL_TRACE_ENV}, else the shipped slice)")
    ap.add_argument("--time-scale", type=float, default=4.0)
    ap.add_argument("--limit", type=int, default=None, help="replay only the first N requests")
    ap.add_argument("--schedulers", default="fcfs,lpm,dfs_weight")
    args = ap.parse_args()
    if not args.trace.exists():
        raise SystemExit(f"trace not found: {args.trace} (pass --trace PATH)")
    print(f"trace {args.trace} time_scale {args.time_scale} limit {args.limit}")
    replay(args.trace, "fcfs", args.time_scale, 500)  # warm-up: first-touch allocation costs ~2 s
    print(f"{'scheduler':<11} {'wall s':>7} {'req/wall s':>10} {'hit rate':>8} {'latency s':>9} "
          f"{'TTFT s':>8} {'max queue':>9} {'finished':>8}")
    for name in args.schedulers.split(","):
        r = replay(args.trace, name, args.time_scale, args.limit)
        print(f"{name:<11} {r['wall_s']:7.1f} {r['req_per_wall_s']:10.0f} {r['hit_rate']:8.3f} "
              f"{r['mean_latency']:9.2f} {r['mean_ttft']:8.2f} {r['max_queue']:9d} {r['finished']:8d}")
    tps = cache_throughput(args.trace, args.limit)
    print(f"RadixCache match+insert: {tps / 1e6:.1f} M tokens/s")


if __name__ == "__main__":
    main()

"""Simulation speed of a cluster: the whole Mooncake trace through 1 engine and through N replicas
behind a router (the same requests), per admission policy: wall and CPU seconds, requests per wall
second, and N replicas' time over one's.

    python -m experiments.bench.cluster [--trace PATH] [--replicas 16] [--router cache_aware]
        [--schedulers lpm,radix_vcg] [--time-scale 1] [--repeats 1] [--limit N]

One replica is the bare engine. Runs alternate (1, N, 1, N, ...) so that a shared machine's load
falls on both alike; CPU seconds (this process's) are less sensitive to that load than wall ones.
At time scale 1 one replica is overloaded about 4x and its queue grows to thousands, which the
radix auction, pricing the whole queue every round, pays for in every round; N replicas split it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from auction_gym import EngineConfig, SimEngine
from auction_gym.cluster import ClusterEngine, make_router
from auction_gym.workload import iter_mooncake

from ..commands.cluster import TRACE
from . import Table


def replay(trace: Path, replicas: int, router: str, scheduler: str, time_scale: float,
           limit: int | None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and finished requests of one replay (replicas=1: the bare engine)."""
    engines = [SimEngine(scheduler, EngineConfig()) for _ in range(replicas)]
    engine = engines[0] if replicas == 1 else ClusterEngine(engines, make_router(router))
    wall, cpu = time.perf_counter(), time.process_time()
    m = engine.run(iter_mooncake(trace, num_bidders=8, seed=0, time_scale=time_scale, limit=limit))
    return time.perf_counter() - wall, time.process_time() - cpu, m.finished


def table(quick: bool) -> Table:
    """The page's table: TRACE at time scale 1, one engine against 16 replicas behind
    `cache_aware`, LPM and the radix auction (quick: 4 replicas, LPM, the first 100 lines)."""
    replicas, schedulers, limit = (4, ("lpm",), 100) if quick else (16, ("lpm", "radix_vcg"), None)
    rows = []
    for scheduler in schedulers:
        runs = {n: replay(TRACE, n, "cache_aware", scheduler, 1.0, limit) for n in (1, replicas)}
        w1, c1, _ = runs[1]
        for n, (wall, cpu, done) in runs.items():
            rows.append((scheduler, str(n), f"{wall:.2f}", f"{cpu:.2f}", f"{done:,}", f"{done / wall:,.0f}",
                         f"{wall / w1:.2f}x", f"{cpu / c1:.2f}x"))
    return Table(("policy", "replicas", "wall s", "CPU s", "finished", "requests per wall s", "wall x one",
                  "CPU x one"), rows,
                 [f"Trace {TRACE.name} ({'first ' + str(limit) + ' lines' if limit else 'every line'}), time scale 1, "
                  "router cache_aware; one engine then the replicas, per policy."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--router", default="cache_aware")
    parser.add_argument("--schedulers", default="lpm,radix_vcg")
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N lines")
    args = parser.parse_args()
    print(f"trace {args.trace} time scale {args.time_scale:g} limit {args.limit} router {args.router}")
    for scheduler in args.schedulers.split(","):
        for _ in range(args.repeats):
            runs = {n: replay(args.trace, n, args.router, scheduler, args.time_scale, args.limit)
                    for n in (1, args.replicas)}
            for n, (wall, cpu, done) in runs.items():
                print(f"{scheduler:<10} replicas {n:>2}: {wall:7.1f} s wall, {cpu:7.1f} s CPU, {done} finished, "
                      f"{done / wall:7.0f} requests per wall s")
            (w1, c1, _), (wn, cn, _) = runs[1], runs[args.replicas]
            print(f"{scheduler:<10} {args.replicas} replicas / 1: wall {wn / w1:.2f}x, CPU {cn / c1:.2f}x", flush=True)


if __name__ == "__main__":
    main()

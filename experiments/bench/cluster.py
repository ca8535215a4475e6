"""Simulation speed of a cluster: the whole Mooncake trace through 1 engine and through N replicas
behind a router (the same requests), wall seconds and requests per wall second.

    python -m experiments.bench.cluster [--trace PATH] [--replicas 16] [--router cache_aware]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from auction_gym import EngineConfig, SimEngine
from auction_gym.cluster import ClusterEngine, make_router
from auction_gym.workload import iter_mooncake

TRACE = Path(__file__).resolve().parents[3] / "shared/data/mooncake/conversation_trace.jsonl"


def replay(trace: Path, replicas: int, router: str, scheduler: str, time_scale: float) -> tuple[float, int]:
    """Wall seconds and finished requests of one replay (replicas=1: the bare engine)."""
    config = EngineConfig()
    engines = [SimEngine(scheduler, config) for _ in range(replicas)]
    engine = engines[0] if replicas == 1 else ClusterEngine(engines, make_router(router))
    t0 = time.perf_counter()
    m = engine.run(iter_mooncake(trace, num_bidders=8, seed=0, time_scale=time_scale))
    return time.perf_counter() - t0, m.finished


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--router", default="cache_aware")
    parser.add_argument("--scheduler", default="lpm")
    parser.add_argument("--time-scale", type=float, default=1.0)
    args = parser.parse_args()
    for n in (1, args.replicas):
        wall, done = replay(args.trace, n, args.router, args.scheduler, args.time_scale)
        print(f"replicas {n:>2}: {wall:6.1f} s wall, {done} finished, {done / wall:7.0f} requests per wall s")


if __name__ == "__main__":
    main()

"""Benchmark: `WaitingPrefixes.refresh` per admission round, on a long queue of Mooncake requests.

    python -m experiments.bench.waiting [--trace PATH] [--queues 1000 2000 5000] [--rounds N]

Each round mimics a saturated engine's: `--churn` requests leave the queue (admitted) and as many
arrive, the admitted ones' prompts are inserted into the cache, which evicts to stay within its
capacity (so matches change), then the queue is refreshed. Prints microseconds per round, and per
round with nothing changed (the queue and the cache as they were), each two ways: the refresh
compares the queue with the last one ("compared"), or is told what joined and left, as the engine
tells it (`WaitingQueue.take_changes`; "told").
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from auction_gym import RadixCache
from auction_gym.waiting_prefixes import WaitingPrefixes
from auction_gym.workload import iter_mooncake

from ..commands.reproduce_trace import FULL_TRACE_ENV, SLICE, full_trace
from . import Table

DEFAULT_TRACE = full_trace() or SLICE
"""The full trace when FULL_TRACE_ENV names it (the figures on the documentation's benchmarks page are on it), else the
shipped 1,000-line slice."""


def bench(trace: Path, queue_len: int, rounds: int, churn: int, capacity: int, told: bool,
          history: int = 2000) -> tuple[float, float]:
    """(microseconds per churning round, per unchanged round); `told`: the refresh is handed
    what joined and left the queue; `history`: requests served into the cache before the queue
    built up."""
    needed = queue_len + rounds * churn + history
    reqs = list(iter_mooncake(trace, limit=needed))
    if len(reqs) < needed:
        raise ValueError(f"trace {trace} holds {len(reqs)} requests; a queue of {queue_len} over {rounds} rounds "
                         f"after a history of {history} needs {needed} (${FULL_TRACE_ENV} names the full trace)")
    cache = RadixCache()
    for r in reqs[:history]:
        cache.insert(r.tokens)
    cache.evict(max(0, cache.total_size - capacity))
    queue, arrivals = reqs[history : history + queue_len], iter(reqs[history + queue_len :])
    refresh = WaitingPrefixes()
    refresh.refresh(queue, cache)
    spent = 0.0
    for _ in range(rounds):
        arrived = [next(arrivals) for _ in range(churn)]
        admitted, queue = queue[:churn], queue[churn:] + arrived
        for r in admitted:
            cache.insert(r.tokens)
        cache.evict(max(0, cache.total_size - capacity))
        changes = (arrived, set(admitted)) if told else None
        t0 = time.perf_counter()
        refresh.refresh(queue, cache, changes)
        spent += time.perf_counter() - t0
    unchanged = ([], set()) if told else None
    t0 = time.perf_counter()
    for _ in range(rounds):
        refresh.refresh(queue, cache, unchanged)
    idle = time.perf_counter() - t0
    return spent / rounds * 1e6, idle / rounds * 1e6


def table(quick: bool) -> Table:
    """The page's table: queues of 1,000, 2,000 and 5,000 over 500 rounds after a history of 2,000
    requests on the full trace; on the shipped slice of 1,000 lines, which holds no such queue,
    200 and 500 over 100 rounds after 300 (quick: 200 over 50 rounds after 300)."""
    on_slice = DEFAULT_TRACE == SLICE
    queues, rounds, history = (((200,), 50, 300) if quick else ((200, 500), 100, 300) if on_slice
                               else ((1000, 2000, 5000), 500, 2000))
    rows = []
    for n in queues:
        busy, idle = bench(DEFAULT_TRACE, n, rounds, 2, 2_000_000, told=False, history=history)
        busy_told, idle_told = bench(DEFAULT_TRACE, n, rounds, 2, 2_000_000, told=True, history=history)
        rows.append((f"{n:,}", f"{busy:.1f}", f"{busy_told:.1f}", f"{idle:.1f}", f"{idle_told:.1f}"))
    return Table(("waiting", "µs a round, compared", "µs a round, told", "µs an unchanged round, compared",
                  "µs an unchanged round, told"), rows,
                 [f"Trace {DEFAULT_TRACE.name}, {rounds} rounds, 2 requests admitted and 2 arriving a round."])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                    help=f"Mooncake JSONL trace (default: ${FULL_TRACE_ENV}, else the shipped slice)")
    ap.add_argument("--queues", type=int, nargs="+", default=[1000, 2000, 5000])
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--churn", type=int, default=2, help="requests admitted (and arriving) per round")
    ap.add_argument("--capacity", type=int, default=2_000_000, help="cache tokens kept")
    args = ap.parse_args()
    print(f"{'':8} {'us/round':>19} {'us/unchanged round':>19}")
    print(f"{'waiting':>8} {'compared':>9} {'told':>9} {'compared':>9} {'told':>9}")
    for n in args.queues:
        busy, idle = bench(args.trace, n, args.rounds, args.churn, args.capacity, told=False)
        busy_told, idle_told = bench(args.trace, n, args.rounds, args.churn, args.capacity, told=True)
        print(f"{n:8d} {busy:9.1f} {busy_told:9.1f} {idle:9.1f} {idle_told:9.1f}")


if __name__ == "__main__":
    main()

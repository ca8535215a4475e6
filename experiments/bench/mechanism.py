"""Benchmark: cost of VCG payments relative to the allocation alone (radix-tree auction).

For agentic-workload queues (16 bidders; 1,000 and 10,000 requests by default) it prints, per cost
model, the time of the allocation alone, of allocation plus all payments (`run`), their ratio, the
payments alone on a finished allocation (`pay_s`), and the naive alternative that re-runs the
allocation once per bidder without that bidder's requests, with its ratio to the allocation. The
strict priority auction's `run` is shown for scale. "tokens+cache" prices against a warm cache
holding the prompts of the first 20% of the queue. Times are the best of `--repeats` runs (seconds,
wall clock). Target: run/allocation <= 3 at 1,000 requests and 16 bidders (the naive ratio is about
1 + number of bidders).

`--small 2 4 8 ...` times `run` instead on the first q requests of a 4-bidder agentic queue, the
environment's round sizes (microseconds per call, best of `--repeats` batches): "warm" repeats the
queue on one auction (its memo of sort keys, ranks and common prefixes hits), "cold" uses a fresh
auction per call (nothing remembered).

    .venv/bin/python -m experiments.bench.mechanism [--requests 1000 10000] [--bidders 16]
    .venv/bin/python -m experiments.bench.mechanism --small 2 4 8 16 32 64
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Sequence

from auction_gym import RadixCache, Request
from auction_gym.mechanism import RadixTreeAuction, StrictPriorityAuction
from auction_gym.workload import AgenticConfig, agentic_workload

from . import Table


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Minimum wall time of `repeats` calls (s): the least noisy estimate of the cost."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def naive_run(
    auction: RadixTreeAuction, queue: Sequence[Request], cached: RadixCache | None
) -> None:
    """Allocation plus one re-allocation per bidder: what the incremental payments replace."""
    auction.allocate(queue, cached)
    for bidder in {r.bidder for r in queue}:
        auction.allocate([r for r in queue if r.bidder != bidder], cached)


def small_queues(sizes: Sequence[int], repeats: int, seed: int, calls: int = 500) -> None:
    """Per-call time of `run` on small queues, warm and cold (see the module docstring)."""
    queue = agentic_workload(AgenticConfig(num_bidders=4, num_requests=max(sizes)), seed=seed)
    print(f"radix-tree auction run, first q of a 4-bidder agentic queue, best of {repeats}")
    print(f"{'q':>4} {'cost_model':>10} {'warm_us':>8} {'cold_us':>8}  (per call)")
    for q in sizes:
        for model in ("unit", "tokens"):
            auction = RadixTreeAuction(cost_model=model)
            warm = best_time(lambda: [auction.run(queue[:q]) for _ in range(calls)], repeats)
            cold = best_time(
                lambda: [RadixTreeAuction(cost_model=model).run(queue[:q]) for _ in range(calls)],
                repeats,
            )
            print(f"{q:>4} {model:>10} {warm / calls * 1e6:>8.1f} {cold / calls * 1e6:>8.1f}")


def measure(requests: int, bidders: int, repeats: int, seed: int) -> list[dict[str, float | str]]:
    """Per cost model on one agentic queue of `requests`: the best times (s) of the allocation, of
    `run` (allocation plus payments), of the payments alone, of the naive payments and of the
    strict priority auction's `run`."""
    queue = agentic_workload(AgenticConfig(num_bidders=bidders, num_requests=requests), seed=seed)
    warm = RadixCache()
    for r in queue[: len(queue) // 5]:
        warm.insert(r.tokens)
    out = []
    for label, cost_model, cached in [("unit", "unit", None), ("tokens", "tokens", None),
                                      ("tokens+cache", "tokens", warm)]:
        auction = RadixTreeAuction(cost_model=cost_model)
        strict = StrictPriorityAuction(cost_model=cost_model)
        done = auction.allocate(queue, cached)
        out.append({
            "cost_model": label,
            "alloc": best_time(lambda: auction.allocate(queue, cached), repeats),
            "run": best_time(lambda: auction.run(queue, cached), repeats),
            "pay": best_time(lambda: auction.payments(done), repeats),
            "naive": best_time(lambda: naive_run(auction, queue, cached), max(1, repeats // 2)),
            "strict": best_time(lambda: strict.run(queue, cached), repeats),
        })
    return out


def table(quick: bool) -> Table:
    """The page's table: 16 bidders, 1,000 and 10,000 requests, best of 5 (quick: 300, best of 2)."""
    sizes, repeats = ((300,), 2) if quick else ((1000, 10000), 5)
    rows = []
    for n in sizes:
        for m in measure(n, 16, repeats, seed=0):
            rows.append((f"{n:,}", m["cost_model"], f"{m['alloc'] * 1e3:.2f}", f"{m['run'] * 1e3:.2f}",
                         f"{m['run'] / m['alloc']:.2f}x", f"{m['naive'] / m['alloc']:.1f}x", f"{m['strict'] * 1e3:.2f}"))
    return Table(("requests", "cost model", "allocation ms", "allocation + payments ms", "payments' ratio",
                  "naive ratio", "strict priority ms"), rows,
                 [f"Best of {repeats} runs each; the ratios are to the allocation alone, measured in the same run."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--bidders", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", type=int, nargs="+", help="queue sizes: time small queues")
    args = parser.parse_args()
    if args.small:
        small_queues(args.small, args.repeats, args.seed)
        return

    print(f"radix-tree auction, agentic workload, {args.bidders} bidders, best of {args.repeats}")
    print(
        f"{'requests':>8} {'cost_model':>12} {'alloc_s':>9} {'alloc+pay_s':>11} "
        f"{'ratio':>6} {'pay_s':>8} {'naive_s':>9} {'naive_ratio':>11} {'strict_s':>9}"
    )
    for n in args.requests:
        for m in measure(n, args.bidders, args.repeats, args.seed):
            alloc, full = m["alloc"], m["run"]
            print(
                f"{n:>8} {m['cost_model']:>12} {alloc:>9.4f} {full:>11.4f} {full / alloc:>6.2f} {m['pay']:>8.5f} "
                f"{m['naive']:>9.4f} {m['naive'] / alloc:>11.2f} {m['strict']:>9.4f}"
            )


if __name__ == "__main__":
    main()

"""The `radix-auction` command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from auction_gym import scheduler_names


def _demo(args: argparse.Namespace) -> None:
    from .demo import run_demo

    unknown = set(args.schedulers) - set(scheduler_names())
    if unknown:
        raise SystemExit(f"unknown scheduler(s) {sorted(unknown)}; valid: {', '.join(scheduler_names())}")
    if args.trace is not None and not args.trace.exists():
        raise SystemExit(f"trace not found: {args.trace}")
    print(run_demo(
        seed=args.seed, rate=args.rate, duration=args.duration, bidders=args.bidders,
        kv_capacity=args.kv_capacity, schedulers=args.schedulers, trace=args.trace,
        time_scale=args.time_scale, limit=args.limit,
    ))


def build_parser() -> argparse.ArgumentParser:
    from .demo import POLICIES

    parser = argparse.ArgumentParser(prog="radix-auction", description="Radix Auction Gym experiments.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="replay a workload under every scheduler and print a table",
                          description="Replay one workload through the simulated engine under each "
                          "scheduler; print hit rate, TTFT, latency and throughput.")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--rate", type=float, default=35.0, help="agentic arrivals per second (default 35)")
    demo.add_argument("--duration", type=float, default=60.0, help="agentic workload length in s (default 60)")
    demo.add_argument("--bidders", type=int, default=8)
    demo.add_argument("--kv-capacity", type=int, default=60_000, help="KV cache size in tokens (default 60000)")
    demo.add_argument("--schedulers", type=lambda s: s.split(","), default=list(POLICIES),
                      help=f"comma-separated (default {','.join(POLICIES)})")
    demo.add_argument("--trace", type=Path, default=None,
                      help="replay a Mooncake trace (JSONL) instead of the agentic workload")
    demo.add_argument("--time-scale", type=float, default=4.0, help="trace arrival-time multiplier (default 4)")
    demo.add_argument("--limit", type=int, default=None, help="replay only the first N trace requests")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()

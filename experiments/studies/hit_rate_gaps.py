"""Two hit-rate gaps explained (the documentation's "SGLang fidelity" page, "Two results explained").

    python -m experiments.studies.hit_rate_gaps sessions [--rate R] [--duration S] [--kv-capacity N] [--full-mix]
    python -m experiments.studies.hit_rate_gaps auction [--kv-capacity N] [--seeds K] [--loads 1.2,2,3]

`sessions`: why LPM caches fewer prompt tokens than FCFS on agentic traffic. A follow-up session turn
quotes the previous turn's reply, which the cache holds only once that turn finishes; the workload is
open-loop, so a turn can be admitted before its predecessor finished. Per policy: how many follow-up
turns were admitted before their predecessor finished, the predecessor tokens they then missed, and
how much of the FCFS - policy gap in cached tokens those turns carry.

`auction`: the radix auction's hit rate relative to LPM's on the Mooncake slice, with the trace's
urgency classes, with one class (all "interactive"), and with every bid equal, at loads relative to
LPM's saturated throughput (as `reproduce` sets them).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Sequence

from auction_gym import EngineConfig, Request, SimEngine
from auction_gym.scheduler import make_scheduler
from auction_gym.workload import AgenticConfig, agentic_workload, iter_mooncake

from ..commands.reproduce_trace import SLICE, arrival_rate
from ..sweeps import load_sweep

AGENTIC = {k: v for k, v in load_sweep("agentic").full.kwargs.items() if k != "duration"}
"""Reproduce's agentic mix (heterogeneous tenants, every shape), from its load sweep (`experiments.sweeps`)."""


def mooncake_rate(trace: Path, lines: int) -> float:
    """Arrivals per second of the trace's first `lines` requests at time_scale 1."""
    return arrival_rate(iter_mooncake(trace, limit=lines))


def predecessors(requests: Sequence[Request]) -> dict[int, tuple[int, int]]:
    """Request id -> (id, tokens) of the request whose prompt + reply is the longest proper prefix
    of its prompt (a session's previous turn), for the requests that have one."""
    out: dict[int, tuple[int, int]] = {}
    quoted = [q for q in requests if q.output_tokens is not None]
    for r in requests:
        for q in quoted:
            n = q.prompt_len + q.output_len
            if q.bidder != r.bidder or n >= r.prompt_len or (r.id in out and n <= out[r.id][1]):
                continue
            if (r.tokens[: q.prompt_len] == q.tokens).all() and (r.tokens[q.prompt_len : n] == q.output_tokens).all():
                out[r.id] = (q.id, n)
    return out


def session_gaps(requests: Sequence[Request], kv_capacity: int, policies: Sequence[str] = ("fcfs", "lpm")) -> dict:
    """Per policy: hit rate, cached tokens, follow-up turns admitted before their predecessor
    finished, the predecessor tokens those missed, and (against the first policy) the gap in
    cached tokens, split into follow-up turns and the rest."""
    pred = predecessors(requests)
    rows, records = {}, {}
    for name in policies:
        engine = SimEngine(name, EngineConfig(kv_capacity_tokens=kv_capacity))
        engine.submit(list(requests))
        metrics = engine.run()
        rec = records[name] = engine.records
        early = [rid for rid, (q, _) in pred.items() if rec[rid].admit < rec[q].finish]
        rows[name] = {
            "hit_rate": metrics.hit_rate, "cached": sum(r.cached_tokens for r in rec.values() if r.finished),
            "turns": len(pred), "early_turns": len(early),
            "missed": sum(pred[rid][1] - 1 - rec[rid].cached_tokens for rid in early),
        }
    first = policies[0]
    for name in policies[1:]:
        gap = {rid: records[first][rid].cached_tokens - records[name][rid].cached_tokens
               for rid, r in records[first].items() if r.finished and records[name][rid].finished}
        rows[name]["gap"] = sum(gap.values())
        rows[name]["gap_on_turns"] = sum(v for rid, v in gap.items() if rid in pred)
    return rows


def auction_ratios(trace: Path, kv_capacity: int, seeds: int, loads: Sequence[float], lines: int = 1000) -> list[dict]:
    """Rows (seed, load, variant, LPM's and the radix auction's hit rates) on the trace's first `lines`."""
    config = EngineConfig(kv_capacity_tokens=kv_capacity, max_running_requests=256)
    natural = mooncake_rate(trace, lines)

    def workload(seed: int, scale: float, variant: str) -> list[Request]:
        mix = {"class_mix": {"interactive": 1.0}} if variant == "one_class" else {}
        reqs = list(iter_mooncake(trace, num_bidders=8, seed=seed, time_scale=scale, limit=lines, **mix))
        if variant == "equal_bids":
            reqs = [dataclasses.replace(r, bid=1.0, urgency=1.0) for r in reqs]
        return reqs

    def hit_rate(policy: str, reqs: list[Request]) -> float:
        engine = SimEngine(make_scheduler(policy), config)
        engine.submit(reqs)
        return engine.run().hit_rate

    rows = []
    for seed in range(seeds):
        engine = SimEngine("lpm", config)
        engine.submit(workload(seed, load_sweep("mooncake").saturating, "classes"))
        capacity = engine.run().throughput_rps
        for load in loads:
            for variant in ("classes", "one_class", "equal_bids"):
                reqs = workload(seed, natural / (load * capacity), variant)
                rows.append({"seed": seed, "load": load, "variant": variant,
                             "lpm": hit_rate("lpm", reqs), "radix_vcg": hit_rate("radix_vcg", reqs)})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sessions")
    s.add_argument("--rate", type=float, default=35.0)
    s.add_argument("--duration", type=float, default=60.0)
    s.add_argument("--kv-capacity", type=int, default=60_000)
    s.add_argument("--full-mix", action="store_true", help="reproduce's agentic mix (AGENTIC) instead of the demo's")
    a = sub.add_parser("auction")
    a.add_argument("--trace", type=Path, default=SLICE)
    a.add_argument("--kv-capacity", type=int, default=100_000)
    a.add_argument("--seeds", type=int, default=3)
    a.add_argument("--loads", type=lambda v: [float(x) for x in v.split(",")], default=[1.2, 1.5, 2.0, 3.0])
    args = ap.parse_args(argv)
    if args.what == "sessions":
        cfg = AgenticConfig(num_bidders=8, rate=args.rate, duration=args.duration, **(AGENTIC if args.full_mix else {}))
        for name, row in session_gaps(agentic_workload(cfg, seed=0), args.kv_capacity, ("fcfs", "lpm", "radix_vcg")).items():
            print(name, " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    else:
        for row in auction_ratios(args.trace, args.kv_capacity, args.seeds, args.loads):
            print(f"seed {row['seed']} load {row['load']:g} {row['variant']:<10} lpm {row['lpm']:.3f} "
                  f"radix {row['radix_vcg']:.3f} ratio {row['radix_vcg'] / row['lpm']:.3f}")


if __name__ == "__main__":
    main()

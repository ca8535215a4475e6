"""Urgent requests' latency under SGLang's priority scheduling, with and without its preemption.

    python -m experiments.studies.preemption [--seeds 3] [--load 1.0] [--size 1000]

`radix-auction markets`' shared-prefix point (SGLang's shared-prefix benchmark at load x 8
requests/s on the market's engine: 60,000 KV tokens, 32 running slots), every bidder bidding its
urgency with a budget it cannot spend (the "unlimited" level), run under `sglang_priority` three ways: the
engine's priority rules off (SGLang with `--disable-priority-preemption` and LRU eviction), priority
preemption on (threshold 10, SGLang's default: an urgent request, priority about 10, outranks
by more than that a background one, about -17, nearly always, and an interactive one, about 0,
about half the time), and preemption with `priority` radix eviction. Prints, per seed and rule set, the mean TTFT and latency of urgent requests, the mean
latency of the others, the preemptions, the tokens computed (prefill, recomputation after a
preemption or retraction included) and the cache hit rate, then the means over seeds.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from auction_gym.market import Market

from ..commands.markets_points import Point

WORKLOAD, DESIGN = "shared_prefix", "sglang_priority"
RULES = {
    "off": {},
    "preemption": {"priority_preemption": True},
    "preemption+priority eviction": {"priority_preemption": True, "radix_eviction_policy": "priority"},
}
"""The engine's rule sets compared (`EngineConfig` fields over the market's engine)."""


def point(rules: dict, seed: int, load: float, size: int) -> dict[str, float]:
    """One truthful episode under `rules`: mean TTFT and latency of urgent requests and mean
    latency of the others (s), the preemptions, the tokens computed and the hit rate."""
    config = Point(DESIGN, WORKLOAD, load, size).config()  # truthful bidders, unlimited budgets
    config = replace(config, engine_kwargs={**config.engine_kwargs, **rules})
    market = Market(config)
    market.reset(seed)
    kinds = {r.id: r.kind for r in config.make_workload(seed, market.draws)}
    finished: list[int] = []
    while not market.done:
        finished += market.step([1.0] * config.num_bidders).finished
    engine = market.engine
    urgent = [engine.records[i] for i in finished if kinds[i] == "urgent"]
    other = [engine.records[i] for i in finished if kinds[i] != "urgent"]
    return {"urgent_ttft": float(np.mean([r.ttft for r in urgent])),
            "urgent": float(np.mean([r.latency for r in urgent])),
            "other": float(np.mean([r.latency for r in other])),
            "preemptions": float(sum(rec.preemptions for rec in engine.records.values())),
            "computed": float(sum(rec.computed_tokens for rec in engine.records.values())),
            "hit_rate": engine.metrics().hit_rate}


def summary(row: dict[str, float]) -> str:
    return (f"urgent TTFT {row['urgent_ttft']:.2f} s, latency {row['urgent']:.2f} s; other latency "
            f"{row['other']:.2f} s; {row['preemptions']:.0f} preemptions, {row['computed'] / 1e6:.2f}M tokens "
            f"computed, hit rate {row['hit_rate']:.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--size", type=int, default=1000)
    args = parser.parse_args(argv)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in RULES}
    for seed in range(args.seeds):
        for name, rules in RULES.items():
            row = point(rules, seed, args.load, args.size)
            rows[name].append(row)
            print(f"seed {seed} {name}: {summary(row)}")
    for name, runs in rows.items():
        mean = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
        print(f"{name}, mean of {len(runs)} seeds: {summary(mean)}")


if __name__ == "__main__":
    main()

"""The priority designs' latency over the radix auction's, at `reproduce`'s point of the largest blow-up.

    python -m experiments.studies.priority_blowup [--seeds 3]

SGLang's shared-prefix benchmark at 40,000 KV tokens and load 0.5 of what LPM serves saturated,
`reproduce`'s full-sweep settings (truthful bids, unlimited budgets), where strict priority's mean
latency is 10.9x the radix auction's on the reproduce page. Each priority design (strict priority,
SGLang's priority, `qos_lpm`, the tiers) replays the same workloads; the study prints each one's
mean latency and hit rate per seed, then its mean latency over the radix auction's (about 2 minutes
for 3 seeds on one core).
"""

from __future__ import annotations

import argparse

import numpy as np

from ..commands.reproduce import capacity, replay, replay_config
from ..commands.reproduce_sweep import sweep_of

WORKLOAD, KV, LOAD = "shared_prefix", 40_000, 0.5
POLICIES = ("radix_vcg", "lpm", "strict_vcg", "sglang_priority", "qos_lpm", "tiers", "tiers_lpm")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    sweep = sweep_of("full")
    latency: dict[str, list[float]] = {}
    for seed in range(args.seeds):
        rate = LOAD * capacity(WORKLOAD, KV, sweep, None, seed)
        for policy in POLICIES:
            row = replay(replay_config(WORKLOAD, KV, rate, sweep, policy, None), seed)
            latency.setdefault(policy, []).append(row["mean_latency"])
            print(f"seed {seed} {policy}: mean latency {row['mean_latency']:.2f} s, hit rate {row['hit_rate']:.3f}")
    radix = float(np.mean(latency["radix_vcg"]))
    for policy, values in latency.items():
        print(f"{policy}: mean latency {np.mean(values):.2f} s, {np.mean(values) / radix:.2f}x the radix auction's")


if __name__ == "__main__":
    main()

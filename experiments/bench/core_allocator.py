"""Benchmark: the radix auction's allocator on the Python and the compiled core, side by side.

    python -m experiments.bench.core_allocator [--steps 3000] [--warmup 300] [--repeats 3]

In one process, the configurations alternated:

- the environment: wall time of `RadixAuction-v2` with seeded random actions, `--steps` steps after
  `--warmup` (resets included; `core_speed.steps_per_second`), median of `--repeats`, on the Python
  core, on the compiled core with the allocator's Python tree (the compiled radix cache alone),
  and on the compiled core;
- the allocator alone: the rounds the allocator decided in such a run, and in the Mooncake sample
  trace replayed through the radix auction's engine (long queues, rounds without multipliers),
  recorded once and replayed on a fresh `TreeAllocator` of each core (microseconds per round,
  median of `--repeats`), with the part spent in the tree's `update` and in reading the round out
  (`order` or `factored`; mean of a second, instrumented pass).

The two cores decide the same rounds bit for bit (tests/test_core_allocator.py), so the replays
do the same work.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterator

import gymnasium as gym
import numpy as np

import auction_gym  # noqa: F401  (registers the environments)
from auction_gym import EngineConfig, SimEngine, core
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.mechanism import allocator as allocator_module
from auction_gym.mechanism.allocator import TreeAllocator
from auction_gym.mechanism.factored import FactoredAllocation
from auction_gym.mechanism.incremental_tree import IncrementalQueueTree
from auction_gym.workload import iter_mooncake
from auction_gym.workload.mooncake import SAMPLE_TRACE

from . import Table
from .core_speed import steps_per_second

Call = tuple[int, str, tuple]
"""A recorded call of a `TreeAllocator`: which allocator (numbered as first seen), its method
("allocate" or "skip") and arguments."""
Recorded = tuple[list[tuple[float, bool, bool]], list[Call]]
"""Each allocator's (request_work, costed, cache_ties), and the calls."""


@contextmanager
def python_allocator() -> Iterator[None]:
    """Allocators made inside use the Python tree whatever the core (the rest, the radix cache, follows
    the core): what the compiled allocator adds to the compiled cache."""
    kept = allocator_module.queue_tree
    allocator_module.queue_tree = IncrementalQueueTree
    try:
        yield
    finally:
        allocator_module.queue_tree = kept


def _play(env: gym.Env, steps: int) -> None:
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()


def record(run: Callable[[], None]) -> Recorded:
    """The calls the allocators made while `run` ran (on the Python core), inputs copied."""
    params: list[tuple[float, bool, bool]] = []
    calls: list[Call] = []
    number: dict[int, int] = {}
    allocate, skip = TreeAllocator.allocate, TreeAllocator.skip

    def which(allocator: TreeAllocator) -> int:
        if id(allocator) not in number:
            number[id(allocator)] = len(params)
            tree = allocator._tree
            params.append((tree.request_work, tree.costed, tree.cache_ties))
        return number[id(allocator)]

    def allocate_recorded(self, requests, bids, prefix_lens, multipliers, changes):
        kept = None if changes is None else replace(changes, length_of=dict(changes.length_of))
        calls.append((which(self), "allocate", (list(requests), list(bids),
                                                None if prefix_lens is None else list(prefix_lens),
                                                None if multipliers is None else list(multipliers), kept)))
        return allocate(self, requests, bids, prefix_lens, multipliers, changes)

    def skip_recorded(self, changes):
        calls.append((which(self), "skip", (changes,)))
        return skip(self, changes)

    TreeAllocator.allocate, TreeAllocator.skip = allocate_recorded, skip_recorded
    try:
        with core.use("python"):
            run()
    finally:
        TreeAllocator.allocate, TreeAllocator.skip = allocate, skip
    return params, calls


def env_rounds(steps: int, seed: int = 0) -> Recorded:
    def run() -> None:
        env = gym.make("RadixAuction-v2")
        env.reset(seed=seed)
        env.action_space.seed(seed)
        _play(env, steps)
    return record(run)


def trace_rounds(limit: int = 1000) -> Recorded:
    def run() -> None:
        engine = SimEngine("radix_vcg", EngineConfig())
        engine.submit(iter_mooncake(SAMPLE_TRACE, time_scale=1.0, limit=limit))
        while engine.step() is not None:
            pass
    return record(run)


def replay(on: str, recorded: Recorded, spent: dict[str, float] | None = None) -> float:
    """Seconds of the recorded calls replayed on fresh allocators of core `on`. With `spent`, the
    seconds in the trees' `update`, in their read-out (`order`, `factored`) and in every bidder's
    VCG payments of each round decided over the skeleton ("pay") are added to it instead."""
    params, calls = recorded
    with core.use(on):
        allocators = [TreeAllocator(*p) for p in params]
    if spent is None:
        start = time.perf_counter()
        for k, name, args in calls:
            getattr(allocators[k], name)(*args)
        return time.perf_counter() - start
    for a in allocators:
        _time_tree(a._tree, spent)
    pricing = RadixTreeAuction()  # a round over the skeleton holds what its payments read
    for k, name, args in calls:
        decided = getattr(allocators[k], name)(*args)
        if isinstance(decided, FactoredAllocation):
            start = time.perf_counter()
            pricing.payments(decided)
            spent["pay"] += time.perf_counter() - start
    return 0.0


def _time_tree(tree: object, spent: dict[str, float]) -> None:
    for method, part in (("update", "update"), ("order", "read"), ("factored", "read")):
        def timed(*args, _call=getattr(tree, method), _part=part):
            start = time.perf_counter()
            out = _call(*args)
            spent[_part] += time.perf_counter() - start
            return out
        setattr(tree, method, timed)


def measure(steps: int, warmup: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per core: the env's seconds, and per workload the allocator's microseconds per round (whole,
    update, read-out), medians of `repeats`; and each workload's rounds and mean queue length."""
    cores = ("python", "compiled")
    env: dict[str, list[float]] = {"python": [], "cache": [], "compiled": []}
    for _ in range(repeats):
        env["python"].append(steps / steps_per_second("python", warmup, steps))
        with python_allocator():
            env["cache"].append(steps / steps_per_second("compiled", warmup, steps))
        env["compiled"].append(steps / steps_per_second("compiled", warmup, steps))
    out: dict[str, dict[str, float]] = {on: {"env_s": statistics.median(env[on])} for on in cores}
    out["cache"] = {"env_s": statistics.median(env["cache"])}
    for workload, recorded in (("env", env_rounds(warmup + steps)), ("trace", trace_rounds())):
        rounds = [args for _, name, args in recorded[1] if name == "allocate"]
        out[workload] = {"rounds": len(rounds), "queue": float(np.mean([len(a[0]) for a in rounds])),
                         "priced": sum(a[3] is not None for a in rounds)}
        runs: dict[str, list[float]] = {on: [] for on in cores}
        parts = {on: {"update": 0.0, "read": 0.0, "pay": 0.0} for on in cores}
        for _ in range(repeats):
            for on in cores:
                runs[on].append(replay(on, recorded))
                replay(on, recorded, parts[on])  # a second pass, timed by part
        for on in cores:
            out[on][f"{workload}_round_us"] = statistics.median(runs[on]) / len(rounds) * 1e6
            for part, seconds in parts[on].items():
                per = out[workload]["priced"] if part == "pay" else len(rounds)
                out[on][f"{workload}_{part}_us"] = seconds / repeats / max(per, 1) * 1e6
    return out


def table(quick: bool) -> Table:
    """The page's table: 3,000 steps after 300, median of 3 (quick: 300 after 30, one run)."""
    steps, warmup, repeats = (300, 30, 1) if quick else (3000, 300, 3)
    m = measure(steps, warmup, repeats)
    py, cc, cache = m["python"], m["compiled"], m["cache"]["env_s"]
    rows = [("RadixAuction-v2, s per run", f"{py['env_s']:.3f}", f"{cc['env_s']:.3f}", f"{py['env_s'] / cc['env_s']:.2f}x"),
            ("RadixAuction-v2 on the compiled radix cache, s per run (allocator: python, compiled)", f"{cache:.3f}", f"{cc['env_s']:.3f}",
             f"{cache / cc['env_s']:.2f}x")]
    for workload, label in (("env", "its allocator"), ("trace", "Mooncake replay's allocator")):
        for part, what in (("round", "us per round"), ("update", "update us"), ("read", "read-out us"),
                           ("pay", "every bidder's payments, us per priced round")):
            key = f"{workload}_{part}_us"
            if part == "pay" and not m[workload]["priced"]:
                continue
            rows.append((f"{label}, {what}", f"{py[key]:.1f}", f"{cc[key]:.1f}", f"{py[key] / cc[key]:.2f}x"))
    notes = [f"{steps:,} steps after {warmup} warm-up, median of {repeats}; the cores alternated in one process.",
             f"Rounds replayed: {m['env']['rounds']:,} from the env (mean queue {m['env']['queue']:.1f}), "
             f"{m['trace']['rounds']:,} from the trace (mean queue {m['trace']['queue']:.1f})."]
    return Table(("figure", "python", "compiled", "python / compiled"), rows, notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    m = measure(args.steps, args.warmup, args.repeats)
    for key in m["python"]:
        if not m["compiled"][key]:
            continue
        print(f"{key:>18}  python {m['python'][key]:10.4f}  compiled {m['compiled'][key]:10.4f}  "
              f"ratio {m['python'][key] / m['compiled'][key]:.3f}")
    cache = m["cache"]["env_s"]
    print(f"{'env_s':>18}  compiled cache, Python allocator {cache:.4f}  ratio to compiled {cache / m['compiled']['env_s']:.3f}")
    for workload in ("env", "trace"):
        print(f"{workload}: {m[workload]['rounds']} rounds, mean queue {m[workload]['queue']:.1f}")


if __name__ == "__main__":
    main()

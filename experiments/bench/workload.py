"""Benchmark: generating the workloads, alone and inside the environment.

    python -m experiments.bench.workload [--seeds 8] [--steps 5000] [--warm 500] [--repeats 3]

On the core that is active (`auction_gym.core`), medians of `--repeats` runs, timed in this
process's CPU seconds (a shared machine's load moves them less than wall seconds):

- requests generated per second: the whole stream of RadixAuction-v1's episodes (its market's
  `make_workload` for `--seeds` seeds, with each seed's episode draws), of the agentic workload's
  own defaults over 60 s, and of the shared-prefix workload's 1,024 requests, each read to its end;
- the start of a RadixAuction-v1 episode's agentic stream (each env reset makes one): the
  generator's construction and its first chunk, microseconds to the first request;
- RadixAuction-v1 with zero actions: steps per second over `--steps` steps after `--warm`,
  resets included where an episode ends, and the mean reset's milliseconds (its warm-up, which
  draws traffic, included).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Iterable

import gymnasium as gym
import numpy as np

import auction_gym  # noqa: F401  (registers the environments)
from auction_gym import core
from auction_gym.market.config import MarketConfig
from auction_gym.workload import AgenticConfig, SharedPrefixConfig, iter_agentic, iter_shared_prefix
from auction_gym.workload.registry import get_workload

from . import Table


def requests_per_second(streams: Callable[[], Iterable[Iterable]]) -> float:
    """Requests per CPU second of reading every stream `streams()` gives to its end."""
    count, start = 0, time.process_time()
    for stream in streams():
        for _ in stream:
            count += 1
    return count / (time.process_time() - start)


def v1_market() -> MarketConfig:
    return gym.make("RadixAuction-v1").unwrapped.market.config


def v1_streams(seeds: int) -> Callable[[], Iterable[Iterable]]:
    """RadixAuction-v1's episode streams of seeds 0..`seeds`-1 (each made when reached)."""
    config = v1_market()

    def streams():
        return (config.make_workload(seed, config.draw_episode(seed)) for seed in range(seeds))
    return streams


def v1_agentic() -> AgenticConfig:
    """The agentic configuration of RadixAuction-v1's episode of seed 0 (its drawn rate)."""
    config = v1_market()
    kwargs = {**get_workload(config.workload).defaults, **config.workload_kwargs}
    return AgenticConfig(num_bidders=config.num_bidders, **{**kwargs, "rate": config.draw_episode(0)["rate"]})


def start_microseconds(config: AgenticConfig, n: int = 500) -> float:
    """Microseconds to the first request of the agentic stream of `config` (seeds 0..n-1): the
    generator's construction and its first chunk."""
    start = time.process_time()
    for seed in range(n):
        next(iter_agentic(config, seed))
    return (time.process_time() - start) / n * 1e6


def env_speed(steps: int, warm: int) -> tuple[float, float]:
    """RadixAuction-v1's zero-action steps per second (resets included) and mean reset ms."""
    env = gym.make("RadixAuction-v1")
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
    resets, reset_time, start = 0, 0.0, 0.0
    for i in range(warm + steps):
        if i == warm:
            start, resets, reset_time = time.process_time(), 0, 0.0
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            t = time.process_time()
            env.reset()
            reset_time, resets = reset_time + time.process_time() - t, resets + 1
    elapsed = time.process_time() - start
    env.close()
    return steps / elapsed, reset_time / max(resets, 1) * 1e3


def figures(seeds: int, steps: int, warm: int, repeats: int) -> dict[str, float]:
    """Each figure's median over `repeats` runs."""
    measures = {
        "v1 requests/s": lambda: requests_per_second(v1_streams(seeds)),
        "agentic requests/s": lambda: requests_per_second(
            lambda: (iter_agentic(AgenticConfig(duration=60.0), s) for s in range(seeds))),
        "shared-prefix requests/s": lambda: requests_per_second(
            lambda: (iter_shared_prefix(SharedPrefixConfig(), s) for s in range(max(1, seeds // 4)))),
        "v1 stream start us": lambda: start_microseconds(v1_agentic()),
    }
    runs: dict[str, list[float]] = {name: [] for name in [*measures, "v1 steps/s", "v1 reset ms"]}
    for _ in range(repeats):
        for name, measure in measures.items():
            runs[name].append(measure())
        sps, reset_ms = env_speed(steps, warm)
        runs["v1 steps/s"].append(sps)
        runs["v1 reset ms"].append(reset_ms)
    return {name: statistics.median(values) for name, values in runs.items()}


def table(quick: bool) -> Table:
    seeds, steps, warm, repeats = (2, 500, 100, 1) if quick else (8, 5000, 500, 3)
    found = figures(seeds, steps, warm, repeats)
    rows = [(name, f"{value:,.1f}") for name, value in found.items()]
    return Table(("figure", "value"), rows, [f"core: {core.active()}; medians of {repeats} run(s)"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--warm", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name, value in figures(args.seeds, args.steps, args.warm, args.repeats).items():
        print(f"{name:26s} {value:12,.1f}")
    print(f"core: {core.active()}")


if __name__ == "__main__":
    main()

"""Benchmark: the simulator on each core, Python and compiled (auction_gym.core), side by side.

    python -m experiments.bench.core_speed [--steps N] [--warm W] [--repeats R]

RadixAuction-v2's steps per wall second with seeded random actions (resets included where an
episode ends), W warm-up steps then N timed, R runs per core played in turn (python, compiled,
python, ...), the median of each core's runs; and RadixCache match + insert throughput on the
Mooncake prompts (`bench.engine.cache_throughput`), per core. Both cores play the same trajectory
(the golden tests hold them to it), so the ratio is the speed-up alone. Without the compiled core
it measures the Python one and says so.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Callable, Sequence

from auction_gym import core

from . import Table
from .engine import DEFAULT_TRACE, cache_throughput


def steps_per_second(which: str, warm: int, steps: int, env_id: str = "RadixAuction-v2", **env_kwargs) -> float:
    """`env_id`'s (made with `env_kwargs`) random-action steps per wall second on core `which`, after
    `warm` steps."""
    import gymnasium as gym

    import auction_gym  # noqa: F401  (registers the envs)

    with core.use(which):
        env = gym.make(env_id, **env_kwargs)
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(warm + steps)]
        start = 0.0
        for i, action in enumerate(actions):
            if i == warm:
                start = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        elapsed = time.perf_counter() - start
        env.close()
    return steps / elapsed


def reset_seconds(which: str, resets: int, env_id: str = "RadixAuction-v2") -> float:
    """The CPU seconds of one of `env_id`'s resets on core `which` (seeds 1..`resets`, after one
    untimed reset): the engine's warm-up and the workload's draw, which every episode pays once.

    CPU time, after a full garbage collection: a reset lasts milliseconds, so a window of wall time
    moves several-fold with what else the machine runs, and a collection of the garbage an earlier
    measurement left (envs whose objects refer to each other) would be charged to the resets."""
    import gymnasium as gym

    import auction_gym  # noqa: F401  (registers the envs)

    with core.use(which):
        env = gym.make(env_id)
        env.reset(seed=0)
        gc.collect()
        start = time.process_time()
        for seed in range(1, resets + 1):
            env.reset(seed=seed)
        elapsed = time.process_time() - start
        env.close()
    return elapsed / resets


def available() -> tuple[str, ...]:
    """The cores that can run here: both, or the Python one when the extension is not built."""
    return core.CORES if core.compiled_module() is not None else ("python",)


def in_turn(measure_on: Callable[[str], float], repeats: int, cores: Sequence[str]) -> dict[str, list[float]]:
    """Per core of `cores`, `repeats` figures `measure_on(core)`, the cores measured in turn, so a
    shared machine's drift falls on each alike."""
    runs: dict[str, list[float]] = {c: [] for c in cores}
    for _ in range(repeats):
        for which in cores:
            runs[which].append(measure_on(which))
    return runs


def measure(warm: int, steps: int, repeats: int, cache_limit: int | None) -> dict[str, dict[str, float]]:
    """Per core: the median steps per second of `repeats` runs played in turn, and the cache's
    match + insert tokens per second on the first `cache_limit` Mooncake requests."""
    runs = in_turn(lambda which: steps_per_second(which, warm, steps), repeats, available())
    out = {}
    for which, rates in runs.items():
        with core.use(which):
            tokens = cache_throughput(DEFAULT_TRACE, cache_limit)
        out[which] = {"steps_per_s": statistics.median(rates), "runs": rates, "cache_tokens_per_s": tokens}
    return out


def table(quick: bool) -> Table:
    """Both cores' figures (`quick`: 300 steps after 30, one run each; else 3,000 after 300, three)."""
    warm, steps, repeats = (30, 300, 1) if quick else (300, 3000, 3)
    figures = measure(warm, steps, repeats, 200 if quick else None)
    base = figures["python"]
    rows = [(which, f"{f['steps_per_s']:,.0f}", f"{f['steps_per_s'] / base['steps_per_s']:.2f}x",
             f"{f['cache_tokens_per_s'] / 1e6:,.1f}", f"{f['cache_tokens_per_s'] / base['cache_tokens_per_s']:.2f}x")
            for which, f in figures.items()]
    notes = [f"RadixAuction-v2, random actions: {steps} steps after {warm}, median of {repeats} run(s) per core, "
             "the cores in turn; the cache: match + insert of the Mooncake prompts."]
    if "compiled" not in figures:
        notes.append("The compiled core is not built here: the Python core alone.")
    return Table(("core", "v2 steps/s", "x python", "cache M tokens/s", "x python"), rows, notes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    figures = measure(args.warm, args.steps, args.repeats, None)
    for which, f in figures.items():
        runs = ", ".join(f"{r:,.0f}" for r in f["runs"])
        print(f"{which:>9}: {f['steps_per_s']:,.0f} steps/s (runs {runs}); "
              f"cache {f['cache_tokens_per_s'] / 1e6:,.1f} M tokens/s")
    if "compiled" in figures:
        print(f"compiled / python: {figures['compiled']['steps_per_s'] / figures['python']['steps_per_s']:.3f} "
              f"(steps), {figures['compiled']['cache_tokens_per_s'] / figures['python']['cache_tokens_per_s']:.3f} "
              "(cache)")


if __name__ == "__main__":
    main()

"""Benchmark: a batch of markets spread over processes, against one batch in one process.

    python -m experiments.bench.shards [--envs N] [--processes W] [--rounds R] [--repeats K]

The same N episodes of RadixAuction-v1 (seeds 0..N-1, seeded random actions, `rounds` rounds each,
resets included) played as the cores benchmark's batch row plays them, as one `MarketBatch` of N
envs in this process (Gymnasium's face, SAME_STEP resets), and as W processes, each one such batch
of N/W of the envs (the episodes of seeds lo..lo+N/W-1, with their actions), built first and then
started together. Env steps per second in wall time, each way against the Python core's one env
after another (the denominator of the batch target; `experiments/bench/cores.py`). The episodes
are checked to be the same both ways: every observation of each slice of envs hashed alike.

A batch is bound by memory, not instructions (the misses bench): spread over processes, each holds
fewer markets, so a step may find more of its market's state warm as well as run beside the other.
What this shows is the most a machine's cores add to one batch, not what the core does per step.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import queue
import statistics
import threading
import time
from functools import partial
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from auction_gym import core
from auction_gym.envs.vector import RadixAuctionVectorEnv

from . import Table
from .core_speed import available
from .cores import TARGET_ENV
from .env import BATCH_WAYS, batched, uniform_plays

if TYPE_CHECKING:
    from multiprocessing.synchronize import Barrier

COLUMNS = ("way", "env steps/s", "x the Python core's one env")
WAIT = 600
"""Seconds the parent waits for the processes to build their batches, and then to play them."""


def play_batch(lo: int, n: int, plays: np.ndarray, slices: list[tuple[int, int]],
               start: Barrier | None = None) -> tuple[float, list[str]]:
    """Wall seconds of one `MarketBatch` of the `n` episodes from seed `lo` playing `plays[:, lo:lo + n]`,
    built before the clock starts (and, given `start`, before every process passes it), and the
    sha256 of each slice's observations (`slices`: (first, stop) envs of this batch)."""
    vector = RadixAuctionVectorEnv([partial(gym.make, TARGET_ENV)] * n, AutoresetMode.SAME_STEP)
    hashes = [hashlib.sha256() for _ in slices]
    if start is not None:
        start.wait()
    began = time.perf_counter()
    obs, _ = vector.reset(seed=lo)
    for t in range(plays.shape[0] + 1):
        for h, (a, b) in zip(hashes, slices):
            h.update(obs[a:b].tobytes())
        if t < plays.shape[0]:
            obs = vector.step(plays[t, lo:lo + n])[0]
    seconds = time.perf_counter() - began
    vector.close()
    return seconds, [h.hexdigest() for h in hashes]


def _shard(lo: int, n: int, plays: np.ndarray, start: Barrier,
           out: multiprocessing.Queue) -> None:
    """A process's batch (`play_batch`), its slice's hash sent back with its first env's seed; where
    it fails, the barrier broken and None sent, so that no process waits for it (its error printed)."""
    try:
        out.put((lo, play_batch(lo, n, plays, [(0, n)], start)[1][0]))
    except BaseException:
        start.abort()
        out.put((lo, None))
        raise


def sharded(n: int, processes: int, plays: np.ndarray) -> tuple[float, list[str]]:
    """Wall seconds of `processes` processes, each a batch of `n / processes` of the episodes, from
    when every one has built its batch to when the last has played, and their slices' hashes in
    seed order. The processes are forked where the platform can (they inherit the active core)."""
    per = n // processes
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    start, out = context.Barrier(processes + 1), context.Queue()
    workers = [context.Process(target=_shard, args=(k * per, per, plays, start, out)) for k in range(processes)]
    for w in workers:
        w.start()
    got: dict[int, str | None] = {}
    try:  # a process that fails before the barrier or its reply would leave this waiting for ever
        start.wait(timeout=WAIT)
        began = time.perf_counter()
        got = dict(out.get(timeout=WAIT) for _ in workers)
        seconds = time.perf_counter() - began
    except (threading.BrokenBarrierError, queue.Empty):
        pass  # `got` lacks a process's reply
    if len(got) < processes or None in got.values():
        for w in workers:
            w.terminate()
        raise RuntimeError(f"a process of the sharded batch failed or took over {WAIT} s (exit statuses "
                           f"{[w.exitcode for w in workers]}; its error, if any, above)") from None
    for w in workers:
        w.join()
    return seconds, [got[lo] for lo in sorted(got)]


def measure(n: int, processes: int, rounds: int, repeats: int, seed: int = 0) -> dict[str, float]:
    """Env steps per second, the median of `repeats` runs of the two ways in turn on the compiled
    core, and of the Python core's one env after another (once: the denominator). ValueError where a
    slice's episodes differ between the ways."""
    if n % processes:
        raise ValueError(f"{n} envs do not split evenly over {processes} processes")
    plays = uniform_plays(gym.make(TARGET_ENV).action_space, rounds, n, seed)
    per = n // processes
    slices = [(k * per, (k + 1) * per) for k in range(processes)]
    one, spread = [], []
    with core.use("compiled"):
        for _ in range(repeats):
            seconds, hashes = play_batch(0, n, plays, slices)
            one.append(n * rounds / seconds)
            seconds, shard_hashes = sharded(n, processes, plays)
            spread.append(n * rounds / seconds)
            if shard_hashes != hashes:
                raise ValueError("the processes played other episodes than the one batch")
    with core.use("python"):
        python = 1 / batched(n, rounds, seed, env_id=TARGET_ENV, ways=(BATCH_WAYS[0],))[BATCH_WAYS[0]].wall
    return {"python": python, "one": statistics.median(one), "spread": statistics.median(spread)}


def table(quick: bool) -> Table:
    """64 envs over 2 processes, 200 rounds, the median of 3 (`quick`: 8 envs, 20 rounds, one run)."""
    n, processes, rounds, repeats = (8, 2, 20, 1) if quick else (64, 2, 200, 3)
    if "compiled" not in available():
        return Table(COLUMNS, [], ["Skipped: the compiled core is not built here."])
    got = measure(n, processes, rounds, repeats)
    rows = [("Python core, one env after another", f"{got['python']:,.0f}", "1.00x"),
            (f"compiled core, one MarketBatch of {n}", f"{got['one']:,.0f}", f"{got['one'] / got['python']:.2f}x"),
            (f"compiled core, {processes} processes, a MarketBatch of {n // processes} each",
             f"{got['spread']:,.0f}", f"{got['spread'] / got['python']:.2f}x")]
    notes = [f"{TARGET_ENV}, episodes of seeds 0-{n - 1}, seeded random actions, {rounds} rounds each, resets included; "
             f"wall time, the median of {repeats} run(s) of the two batch ways in turn (the same episodes, checked: "
             "every observation of each process's slice hashed alike both ways).",
             f"Spread over {processes} processes the batch steps {got['spread'] / got['one']:.2f}x as fast as in one.",
             "The batch target is 20x the Python core's one env."]
    return Table(COLUMNS, rows, notes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3, help="runs of the two batch ways, in turn (default 3)")
    args = parser.parse_args(argv)
    if args.envs < 1 or args.processes < 1 or args.envs % args.processes:
        parser.error("--envs must split evenly over --processes, both >= 1")
    got = measure(args.envs, args.processes, args.rounds, args.repeats)
    print(f"env steps/s: Python core one env after another {got['python']:,.0f}; compiled one MarketBatch of "
          f"{args.envs} {got['one']:,.0f} ({got['one'] / got['python']:.2f}x); {args.processes} processes "
          f"{got['spread']:,.0f} ({got['spread'] / got['python']:.2f}x)")


if __name__ == "__main__":
    main()

"""Benchmark: cache misses per env step of a batch against one env, simulated by callgrind.

    python -m experiments.bench.misses [--envs N] [--warm W] [--rounds R] [--rate 40] [--cores compiled]

The same N episodes of RadixAuction-v1 (seeds 0..N-1, seeded random actions, a fixed arrival
rate) played two ways with all N envs alive: one env after another (each plays its R rounds before
the next), and as one `MarketBatch` of N (`auction_gym.envs.batch`), which steps its markets in
turn, one round each. Each way runs once under `valgrind --tool=callgrind --cache-sim=yes` in a
child process (PYTHONHASHSEED=0): the envs' setup and W warm rounds each, then the R timed rounds
between two calls of `os.getppid`, before each of which callgrind dumps its counts (as the
instructions bench does). Per env step: instructions, first-level data misses, and last-level data
misses of a simulated hierarchy fixed here (CACHES), not the host's, so the counts are the same on
any machine and a busy one does not move them.

Why: a batch of 64 costs about twice one env's CPU time per step (the queue bench), though both do
the same work, and the instruction counts barely differ. What differs is that one market keeps what
a step reads in the CPU's caches from step to step, and 64 markets stepped in turn do not. The
last-level misses per env step, batch minus one env, measure that part of the batch's cost without
a clock: the figure a core that keeps each market's state compact has to bring down.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import partial

from auction_gym.core import ENV_VAR, check_core

from . import Table
from .instructions import cores
from .queue import HORIZON, make_env, random_plays

WAYS = ("one", "batch")
"""One env after another, and one MarketBatch."""
CACHES = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,16,64")
"""The simulated hierarchy: 32 KiB first-level caches and a 1 MiB last level (the size of a
server core's own L2, beyond which a miss goes to a cache shared by all cores, or memory)."""
RATE = 40.0
"""RadixAuction-v1's middle draw of the arrival rate, requests/s: its queue grows through an episode."""


@dataclass(frozen=True)
class Counts:
    """Per env step of one way: instructions, first-level and last-level data misses."""

    instructions: float
    d1_misses: float
    ll_misses: float


def _play(way: str, n: int, warm: int, rounds: int, rate: float) -> list[tuple[int, float, int]]:
    """`n` envs' setup and `warm` rounds each, then `rounds` more between two marks (`os.getppid`):
    what a child process runs under valgrind. Each market's round, clock and queue at the end, the
    same both ways (the same episodes)."""
    plays = random_plays(n, warm + rounds, rate)
    if way == "batch":
        from auction_gym.envs.batch import MarketBatch

        batch = MarketBatch([partial(make_env, rate)] * n)
        batch.reset(list(range(n)))
        envs = batch.envs
        for t in range(warm):
            batch.step(plays[t])
        os.getppid()
        for t in range(warm, warm + rounds):
            batch.step(plays[t])
        os.getppid()
    else:
        envs = [make_env(rate) for _ in range(n)]
        for i, env in enumerate(envs):
            env.reset(seed=i)
            for t in range(warm):
                env.step(plays[t, i])
        os.getppid()
        for i, env in enumerate(envs):
            for t in range(warm, warm + rounds):
                env.step(plays[t, i])
        os.getppid()
    markets = [env.unwrapped.market for env in envs]
    return [(m.round, m.engine.now, len(m.engine.waiting)) for m in markets]


def counts(way: str, n: int, warm: int, rounds: int, rate: float = RATE, core: str = "compiled") -> Counts:
    """`way`'s counts per env step on `core`, from callgrind's counts between the marks (`_play`)."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", "--cache-sim=yes", *CACHES, f"--callgrind-out-file={out}",
                   "--dump-before=os_getppid", sys.executable, "-m", "experiments.bench.misses", "--child", way,
                   "--envs", str(n), "--warm", str(warm), "--rounds", str(rounds), "--rate", str(rate)]
        env = {**os.environ, "PYTHONHASHSEED": "0", ENV_VAR: core}
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(f"{out}.2") as f:  # part 1: up to the first mark; part 2: between the marks
            return per_env_step(f.read(), n * rounds)


def per_env_step(callgrind_output: str, steps: int) -> Counts:
    """The counts of a callgrind output (its "events:" line and totals) over `steps`."""
    events = re.search(r"^events: (.+)$", callgrind_output, re.MULTILINE)
    totals = re.search(r"^(?:summary|totals): (.+)$", callgrind_output, re.MULTILINE)
    if events is None or totals is None:
        raise RuntimeError("no event totals in callgrind's output")
    total = dict(zip(events.group(1).split(), (int(x) for x in totals.group(1).split())))
    if not {"Ir", "D1mr", "D1mw", "DLmr", "DLmw"} <= total.keys():
        raise RuntimeError(f"callgrind counted {sorted(total)}, not the cache simulation's misses")
    return Counts(total["Ir"] / steps, (total["D1mr"] + total["D1mw"]) / steps,
                  (total["DLmr"] + total["DLmw"]) / steps)


def table(quick: bool) -> Table:
    """`counts_table` on the compiled core where it is built, else the Python one (`quick`: 4 envs,
    2 warm rounds and 4 counted; else 64 envs, 10 and 40): under valgrind the Python core's batch
    of 64 takes several minutes more, and the batch's target is the compiled core's."""
    return counts_table(*((4, 2, 4) if quick else (64, 10, 40)), RATE, cores()[-1:])


def counts_table(n: int, warm: int, rounds: int, rate: float, on: tuple[str, ...]) -> Table:
    """Both ways' counts per env step on each core of `on`, and the batch's over one env's."""
    rows = []
    for core in on:
        one, batch = (counts(way, n, warm, rounds, rate, core) for way in WAYS)
        for label, a, b in (("instructions", one.instructions, batch.instructions),
                            ("first-level data misses", one.d1_misses, batch.d1_misses),
                            ("last-level data misses", one.ll_misses, batch.ll_misses)):
            rows.append((core, label, f"{a:,.0f}", f"{b:,.0f}", f"{b - a:+,.0f}", f"{b / a:.2f}x"))
    notes = [f"RadixAuction-v1, episodes of seeds 0-{n - 1} at {rate:g} requests/s, seeded random actions: rounds "
             f"{warm}-{warm + rounds - 1} of each, counted by callgrind (PYTHONHASHSEED=0) with its simulated "
             f"caches {' '.join(CACHES)} (size, ways, line bytes)."]
    return Table(("core", "per env step", "one env after another", f"one MarketBatch of {n}", "batch - one env",
                  "batch / one env"), rows, notes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--warm", type=int, default=10, help="untimed rounds each env plays first (default 10)")
    parser.add_argument("--rounds", type=int, default=40, help="counted rounds per env (default 40)")
    parser.add_argument("--rate", type=float, default=RATE, help="arrival rate, requests/s (default %(default)s)")
    parser.add_argument("--cores", default=",".join(cores()), help="comma-separated, of python,compiled")
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.envs < 1 or args.warm < 0 or args.rounds < 1:
        parser.error("--envs and --rounds must be >= 1, --warm >= 0")
    if args.warm + args.rounds > HORIZON:
        parser.error(f"--warm + --rounds must be at most {HORIZON}, an episode's rounds (no reset inside the count)")
    if args.child is not None:
        _play(args.child, args.envs, args.warm, args.rounds, args.rate)
        return
    on = tuple(check_core(core) for core in args.cores.split(","))
    print(counts_table(args.envs, args.warm, args.rounds, args.rate, on).markdown())


if __name__ == "__main__":
    main()

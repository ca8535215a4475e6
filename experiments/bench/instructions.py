"""Benchmark: instructions per step under callgrind, a count that a busy machine does not move.

    python -m experiments.bench.instructions [--steps N] [--warm W] [--cases v0,v2,mooncake]
        [--cores python,compiled]

Each case runs once under `valgrind --tool=callgrind` (in a child process, PYTHONHASHSEED=0): W
warm-up steps, then N steps between two calls of `os.getppid`, which nothing else here calls, and
before each of which callgrind dumps its counts (`--dump-before`). The second part's total over N
is the cost of a step alone, without the interpreter's start, the imports, the setup or the exit.
Cases: RadixAuction-v0 and RadixAuction-v2 (seeded random actions, resets included where an
episode ends), and the Mooncake sample trace replayed through `SimEngine("radix_vcg")` at
time_scale 2.0 (one engine iteration a step). Valgrind runs about 50x slower than the plain
interpreter, so keep N to a few hundred. Each case runs on each core of the simulator
(`auction_gym.core`, AUCTION_GYM_CORE in the child's environment) that can run here.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from typing import Callable

from auction_gym.core import CORES, ENV_VAR, check_core, compiled_module

from . import Table

CASES = ("v0", "v2", "mooncake")


def _run_case(case: str, warm: int, steps: int) -> None:
    """`case`'s setup and `warm` steps, then its `steps` steps between two marks (`os.getppid`):
    what a child process runs under valgrind."""
    step = _stepper(case)
    for _ in range(warm):
        step()
    os.getppid()
    for _ in range(steps):
        step()
    os.getppid()


def _stepper(case: str) -> Callable[[], None]:
    """A function that plays one step of `case`, its setup done."""
    if case == "mooncake":
        from auction_gym import EngineConfig, SimEngine
        from auction_gym.workload import SAMPLE_TRACE, iter_mooncake

        engine = SimEngine("radix_vcg", EngineConfig())
        engine.submit(iter_mooncake(SAMPLE_TRACE, time_scale=2.0))

        def replay_step() -> None:
            if engine.step() is None:
                raise RuntimeError("the trace ran out: use fewer steps")

        return replay_step
    import gymnasium as gym

    import auction_gym  # noqa: F401  (registers the envs)

    env = gym.make(f"RadixAuction-{case}")
    env.reset(seed=0)
    env.action_space.seed(0)

    def env_step() -> None:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()

    return env_step


def per_step(case: str, warm: int, steps: int, core: str = "python") -> float:
    """Instructions per step of `case` on `core` over `steps` steps after `warm`, counted by
    callgrind in a child process (`_run_case`)."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out")
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-before=os_getppid",
            sys.executable, "-m",
            "experiments.bench.instructions", "--child", case, "--warm", str(warm), "--steps", str(steps),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0", ENV_VAR: core}
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(f"{out}.2") as f:  # part 1: up to the first mark; part 2: between the marks
            totals = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.MULTILINE)
    if totals is None:
        raise RuntimeError(f"no instruction total in callgrind's output for {case}")
    return int(totals.group(1)) / steps


def cores() -> tuple[str, ...]:
    """The cores that can run here: both, or the Python one when the extension is not built."""
    return CORES if compiled_module() is not None else ("python",)


def table(quick: bool) -> Table:
    """Instructions per step of every case on every core that runs here (`quick`: 30 steps after
    10; else 300 after 50), and the compiled core's count over the Python one's."""
    warm, steps = (10, 30) if quick else (50, 300)
    on = cores()
    rows = []
    for case in CASES:
        counts = [per_step(case, warm, steps, core) for core in on]
        rows.append((case, *(f"{c:,.0f}" for c in counts), *([f"{counts[1] / counts[0]:.3f}"] if len(on) > 1 else [])))
    columns = ("case", *(f"{core} core" for core in on), *(["compiled / python"] if len(on) > 1 else []))
    return Table(columns, rows, [f"Instructions per step: {steps} steps after {warm}, PYTHONHASHSEED=0"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warm", type=int, default=50)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--cores", default=",".join(cores()), help="comma-separated, of python,compiled")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        _run_case(args.child, args.warm, args.steps)
        return
    for case in args.cases.split(","):
        if case not in CASES:
            parser.error(f"unknown case {case!r}; valid: {', '.join(CASES)}")
        for core in args.cores.split(","):
            print(f"{case:>9} on the {check_core(core)} core: {per_step(case, args.warm, args.steps, core):,.0f} "
                  f"instructions per step ({args.steps} steps after {args.warm})", flush=True)


if __name__ == "__main__":
    main()

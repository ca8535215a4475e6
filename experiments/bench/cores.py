"""Benchmark: the two cores of the simulator (`auction_gym.core`, Python and compiled) side by side.

    python -m experiments.bench.cores [--quick] [--steps N] [--repeats R] [--commands reproduce,markets,compare,tests]
                                      [--full]

From one run, each figure on both cores, the cores played in turn (python, compiled, python, ...)
and the median of each core's runs taken, so that a slow stretch of a shared machine slows both:

- one env's steps per second with random actions, resets included (`core_speed.steps_per_second`),
  on RadixAuction-v0, v1 and v2, and on v0's market serving the shared-prefix workload and
  replaying the Mooncake slice the package ships (`SAMPLE_TRACE`);
- RadixAuction-v1 in batches of N (`env.batched`): the same N episodes played by one env after
  another and as one `MarketBatch`, per env step; and the env's reset, which every episode pays
  once, with what it leaves of an env step at the batch target's throughput;
- the env's share of SB3 PPO's step on RadixAuction-v1 (`env.measure`);
- with `--commands`, whole commands, each in a child process with AUCTION_GYM_CORE set and its
  outputs in a folder of its own: wall time (`reproduce` and `markets`, seconds long, the median of
  the runs in turn), and whether the two cores wrote the same CSV files
  (every cell but the timing columns, `TIMED_COLUMNS`): the end-to-end check that the cores agree.
  `compare` runs at `--quick` (about 1.5 minutes per core) unless `--full` (its defaults, about
  15 minutes per core); `tests` is the default test run (minutes per core), only when named.

Targets (notes under the table, met or not from the figures measured): one v1 env at least 5x the
Python core's steps per second; a MarketBatch of 64 v1 envs at least 20x the per-env throughput of
the Python core's one env (the same episodes, one after another); the env at most 15% of PPO's step;
`compare` at most half the Python core's wall time; `reproduce --quick` and `markets --quick` at
least 4x.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from auction_gym import core
from auction_gym.workload import SAMPLE_TRACE

from . import COMMANDS, Table
from .core_speed import in_turn, reset_seconds, steps_per_second
from .env import BATCH_SIZES, BATCH_WAYS, batched, measure

ROOT = Path(__file__).resolve().parents[2]
ENVS: tuple[tuple[str, str, dict], ...] = (
    ("RadixAuction-v0", "RadixAuction-v0", {}),
    ("RadixAuction-v1", "RadixAuction-v1", {}),
    ("RadixAuction-v2", "RadixAuction-v2", {}),
    ("shared prefix (v0's market)", "RadixAuction-v0", {"workload": "shared_prefix"}),
    ("Mooncake slice (v0's market)", "RadixAuction-v0", {"workload": "mooncake", "trace_path": str(SAMPLE_TRACE)}),
)
"""The single envs timed: (label, id, arguments). v1's and v2's draws of the arrival rate need the
open-ended agentic workload, so the other workloads run on v0's market."""
TARGET_ENV = "RadixAuction-v1"
"""The env of the targets: one env's, the batches' and PPO's."""
RESETS = 40
"""Resets per timed run of the reset row (seeds 1..RESETS), each run a window of CPU time."""
TIMED_COLUMNS = frozenset({"wall_s"})
"""CSV columns that hold a run's own time, which no two runs share: left out of the outputs' check."""


@dataclass(frozen=True)
class Sizes:
    """How much each part runs: env steps after `warm`, `repeats` runs per core (of the batches, the
    reset and the commands), rounds per env in a batch (`batch_sizes` of them), PPO's steps (0: no
    PPO rows) and the env's steps beside them, and `env_repeats` runs per core of one env's steps:
    seconds each, so more of them cost little, and their median is what a slow stretch of a shared
    machine would otherwise move most."""

    steps: int
    warm: int
    repeats: int
    batch_rounds: int
    ppo_steps: int
    ppo_env_steps: int
    env_repeats: int = 7
    batch_sizes: tuple[int, ...] = BATCH_SIZES


QUICK = Sizes(steps=1000, warm=100, repeats=3, batch_rounds=50, ppo_steps=0, ppo_env_steps=0, env_repeats=3)
PAGE = Sizes(steps=3000, warm=300, repeats=3, batch_rounds=200, ppo_steps=10240, ppo_env_steps=10000)


def in_turn_medians(measure_on: Callable[[str], float], repeats: int) -> dict[str, float]:
    """Per core, the median of `repeats` figures `measure_on(core)`, the cores measured in turn."""
    return {which: statistics.median(figures) for which, figures in in_turn(measure_on, repeats, core.CORES).items()}


def _speed_row(label: str, figures: dict[str, float], fmt: str = "{:,.0f}") -> tuple[str, ...]:
    py, cc = figures["python"], figures["compiled"]
    return (label, fmt.format(py), fmt.format(cc), f"{cc / py:.2f}x")


def _target(what: str, measured: float, met: bool, target: str) -> str:
    return f"Target: {what} {target}: {measured:.2f}x, {'met' if met else 'not met'}."


def env_rows(sizes: Sizes) -> tuple[list[tuple[str, ...]], list[str]]:
    """One env's steps per second on each core, for every env of ENVS."""
    rows, notes = [], []
    for label, env_id, kwargs in ENVS:
        figures = in_turn_medians(lambda which: steps_per_second(which, sizes.warm, sizes.steps, env_id, **kwargs),
                                  sizes.env_repeats)
        rows.append(_speed_row(f"{label}, steps/s", figures))
        if env_id == TARGET_ENV and not kwargs:
            ratio = figures["compiled"] / figures["python"]
            notes.append(_target(f"one {TARGET_ENV} env's steps/s", ratio, ratio >= 5, "at least 5x the Python core's"))
    notes.insert(0, f"One env: random actions, resets included, {sizes.steps:,} steps after {sizes.warm}, median of "
                    f"{sizes.env_repeats} run(s) per core, the cores in turn.")
    return rows, notes


def batch_rows(sizes: Sizes) -> tuple[list[tuple[str, ...]], list[str]]:
    """Per env steps per second of N envs played one after another and as one MarketBatch, per core."""
    ways = (BATCH_WAYS[0], BATCH_WAYS[2])
    rows, notes = [], []
    for n in sizes.batch_sizes:
        per_way: dict[str, dict[str, list[float]]] = {w: {c: [] for c in core.CORES} for w in ways}
        for _ in range(sizes.repeats):
            for which in core.CORES:
                with core.use(which):
                    times = batched(n, sizes.batch_rounds, env_id=TARGET_ENV, ways=ways)
                for way in ways:
                    per_way[way][which].append(1 / times[way].wall)
        medians = {w: {c: statistics.median(v) for c, v in per_core.items()} for w, per_core in per_way.items()}
        rows += [_speed_row(f"{n} x {TARGET_ENV}, {way}, steps/s per env", medians[way]) for way in ways]
        if n == 64:
            ratio = medians[BATCH_WAYS[2]]["compiled"] / medians[BATCH_WAYS[0]]["python"]
            notes.append(_target(f"{n} envs as one MarketBatch on the compiled core, throughput per env", ratio,
                                 ratio >= 20, "at least 20x the Python core's one env (the same episodes)"))
            reset_row, reset_note = _reset_floor(sizes, 20 * medians[BATCH_WAYS[0]]["python"])
            rows.append(reset_row)
            notes.append(reset_note)
    notes.insert(0, f"Batches: {sizes.batch_rounds} rounds per env from seeds 0..N-1, the same episodes both ways, "
                    f"median of {sizes.repeats} run(s) per core.")
    return rows, notes


def _reset_floor(sizes: Sizes, target_rate: float) -> tuple[tuple[str, ...], str]:
    """The target env's reset time per core, and what the compiled one leaves of an env step at
    `target_rate` steps per second per env: every episode resets once, so its share of a step is
    the reset over the episode's rounds, whatever steps the episodes."""
    import gymnasium as gym

    figures = in_turn_medians(lambda which: reset_seconds(which, RESETS, TARGET_ENV), sizes.repeats)
    rounds = gym.make(TARGET_ENV).unwrapped.config.horizon
    per_step, budget = figures["compiled"] / rounds, 1 / target_rate
    py, cc = figures["python"], figures["compiled"]
    row = (f"{TARGET_ENV} reset (engine warm-up, workload draw), CPU ms", f"{py * 1e3:.2f}", f"{cc * 1e3:.2f}",
           f"{py / cc:.2f}x")
    note = (f"Reset: CPU time per reset after a garbage collection, median of {sizes.repeats} run(s) of {RESETS} "
            f"resets per core, the cores in turn. An episode of {TARGET_ENV} is {rounds} rounds and resets once, so "
            f"on the compiled core its reset alone costs {per_step * 1e6:.1f} µs per env step; 20x the Python core's "
            f"one env is {target_rate:,.0f} steps/s per env, {budget * 1e6:.1f} µs per env step all told, which leaves "
            f"{(budget - per_step) * 1e6:.1f} µs for the step itself.")
    return row, note


def ppo_rows(sizes: Sizes) -> tuple[list[tuple[str, ...]], list[str]]:
    """The env alone, PPO's step (env included) and the env's shares of it, per core (one run each)."""
    figures = {}
    for which in core.CORES:
        with core.use(which):
            figures[which] = measure(argparse.Namespace(
                steps=sizes.ppo_env_steps, ppo_steps=sizes.ppo_steps, blocks=1, mechanism="radix_vcg",
                torch_threads=1, env=TARGET_ENV))
    py, cc = figures["python"], figures["compiled"]
    rows = [(f"{TARGET_ENV} alone, ms per step", f"{py.env.wall * 1e3:.3f}", f"{cc.env.wall * 1e3:.3f}",
             f"{py.env.wall / cc.env.wall:.2f}x"),
            ("PPO's step, env included, ms", f"{py.ppo.wall * 1e3:.3f}", f"{cc.ppo.wall * 1e3:.3f}",
             f"{py.ppo.wall / cc.ppo.wall:.2f}x"),
            ("the env alone, share of PPO's step", f"{py.env.wall / py.ppo.wall:.1%}",
             f"{cc.env.wall / cc.ppo.wall:.1%}", ""),
            ("the env inside PPO's run, share of its step", f"{py.inside.wall / py.ppo.wall:.1%}",
             f"{cc.inside.wall / cc.ppo.wall:.1%}", "")]
    share = cc.env.wall / cc.ppo.wall
    notes = [f"PPO (MlpPolicy, CPU, one torch thread) learning {sizes.ppo_steps:,} steps on {TARGET_ENV}, the env "
             f"alone {sizes.ppo_env_steps:,} steps, python core then compiled.",
             f"Target: the env at most 15% of PPO's step (compiled core): {share:.1%}, "
             f"{'met' if share <= 0.15 else 'not met'}."]
    return rows, notes


def shown(name: str, full: bool) -> str:
    """COMMANDS entry `name` as a reader would type it (`full`: compare at its defaults)."""
    if name == "tests":
        return "python -m pytest -q"
    if name not in COMMANDS:
        raise ValueError(f"unknown command {name!r}; valid: {', '.join(COMMANDS)}")
    return f"radix-auction {name}" + ("" if name == "compare" and full else " --quick")


def command_line(name: str, out: Path, full: bool) -> list[str]:
    """The child process's command for COMMANDS entry `name` (`shown`), its outputs under `out`."""
    words = shown(name, full).split()
    if name == "tests":
        return [sys.executable, *words[1:], "-p", "no:cacheprovider"]
    outputs = ["--out", str(out)]
    if name == "compare":
        outputs += ["--no-progress", "--logdir", str(out.with_name(f"{out.name}-runs"))]
    return [sys.executable, "-m", "experiments.cli", *words[1:], *outputs]


def run_command(name: str, which: str, out: Path, full: bool) -> tuple[float, str]:
    """Run command `name` on core `which` (AUCTION_GYM_CORE), outputs under `out`: (wall seconds, the
    last line it printed). RuntimeError, with its output's end, if it fails (the tests excepted: their
    last line says what failed)."""
    out.mkdir(parents=True)
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, core.ENV_VAR: which, "PYTHONPATH": os.pathsep.join(paths)}
    start = time.perf_counter()
    done = subprocess.run(command_line(name, out, full), cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    printed = (done.stdout + done.stderr).strip().splitlines() or [""]
    if done.returncode and name != "tests":
        raise RuntimeError(f"{name} on the {which} core exited {done.returncode}:\n" + "\n".join(printed[-20:]))
    return wall, done.stdout.strip().splitlines()[-1] if done.stdout.strip() else printed[-1]


def _csv_rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return rows
    kept = [i for i, column in enumerate(rows[0]) if column not in TIMED_COLUMNS]
    return [[row[i] for i in kept if i < len(row)] for row in rows]


def same_outputs(a: Path, b: Path) -> tuple[bool, str]:
    """Whether folders `a` and `b` hold the same CSV files (by path under them) with the same cells,
    TIMED_COLUMNS aside; and a line saying so, or naming the first difference."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*.csv"))
    files_b = sorted(p.relative_to(b) for p in b.rglob("*.csv"))
    if files_a != files_b:
        return False, f"different CSV files: {', '.join(map(str, sorted(set(files_a) ^ set(files_b))))}"
    if not files_a:
        return False, "no CSV files to compare"
    for path in files_a:
        rows_a, rows_b = _csv_rows(a / path), _csv_rows(b / path)
        for k, (row_a, row_b) in enumerate(zip(rows_a, rows_b)):
            if row_a != row_b:
                return False, f"{path} differs at line {k + 1}"
        if len(rows_a) != len(rows_b):
            return False, f"{path}: {len(rows_a)} against {len(rows_b)} lines"
    lines = sum(len(_csv_rows(a / p)) for p in files_a)
    return True, f"identical: {len(files_a)} CSV file{'s' if len(files_a) > 1 else ''}, {lines:,} lines"


REPEATED_COMMANDS = frozenset({"reproduce", "markets"})
"""Commands of seconds at `--quick`, run `repeats` times per core in turn and their median wall time
taken, as the env rows are: one run of a few seconds is at the mercy of a shared machine's moment.
The others run once per core (minutes each)."""
COMMAND_TARGETS = {"compare": 2.0, "reproduce": 4.0, "markets": 4.0}
"""The speed-up of a command's wall time each target asks of the compiled core."""


def command_rows(names: tuple[str, ...], full: bool, repeats: int = 1) -> tuple[list[tuple[str, ...]], list[str]]:
    """Each command's wall time on each core (the median of `repeats` runs in turn for
    REPEATED_COMMANDS) and whether their first runs' outputs agree (tests: their summaries)."""
    rows, notes = [], []
    for name in names:
        command = shown(name, full)
        runs = repeats if name in REPEATED_COMMANDS else 1
        with tempfile.TemporaryDirectory(prefix=f"cores-{name}-") as folder:
            ran = in_turn(lambda which: run_command(name, which, _run_folder(Path(folder), which), full), runs,
                          core.CORES)
            if name == "tests":
                checked, agree = "each core's summary", "; ".join(f"{which}: {got[0][1]}" for which, got in ran.items())
            else:
                checked, agree = "the two cores' outputs", same_outputs(Path(folder) / "python", Path(folder) / "compiled")[1]
        walls = {which: statistics.median(wall for wall, _ in got) for which, got in ran.items()}
        speedup = walls["python"] / walls["compiled"]
        timed = f"`{command}`, wall s" + (f", median of {runs}" if runs > 1 else "")
        rows += [(timed, f"{walls['python']:.1f}", f"{walls['compiled']:.1f}", f"{speedup:.2f}x"),
                 (f"`{command}`, {checked}", agree, "", "")]
        if name in COMMAND_TARGETS:
            at = " (the target is at its defaults: `--full`)" if name == "compare" and not full else ""
            wanted = COMMAND_TARGETS[name]
            notes.append(_target(f"`{command}` wall time{at}", speedup, speedup >= wanted,
                                 f"at least {wanted:g}x faster than on the Python core"))
    if names:
        timed = ", ".join(sorted(TIMED_COLUMNS))
        notes.insert(0, "Commands: one child process per core (AUCTION_GYM_CORE), python first, outputs in a folder "
                        f"of each; the outputs compared are the first runs' CSV files, {timed} aside (the tests: each "
                        f"run's summary); {' and '.join(sorted(REPEATED_COMMANDS))} run {repeats} time(s) per core in "
                        "turn, their median wall time shown.")
    return rows, notes


def _run_folder(folder: Path, which: str) -> Path:
    """Where core `which`'s next run of a command writes: `folder/which` first, then `which-2`, ..."""
    name, k = which, 1
    while (folder / name).exists():
        k += 1
        name = f"{which}-{k}"
    return folder / name


def cores_table(sizes: Sizes, commands: tuple[str, ...] = (), full: bool = False) -> Table:
    """The figures of `sizes` on both cores, and those of `commands` (of COMMANDS)."""
    rows, notes = [], []
    parts = [env_rows, batch_rows, *([ppo_rows] if sizes.ppo_steps else [])]
    for part in parts:
        more_rows, more_notes = part(sizes)
        rows, notes = rows + more_rows, notes + more_notes
    more_rows, more_notes = command_rows(commands, full, sizes.repeats)
    return Table(("figure", "python core", "compiled core", "compiled's speed-up"), rows + more_rows,
                 notes + more_notes)


def table(quick: bool, commands: tuple[str, ...] = (), full: bool = False) -> Table:
    """The page's table (`quick`: the env rows at small sizes, about a minute), with `commands` run
    (`full`: compare at its defaults)."""
    return cores_table(QUICK if quick else PAGE, commands, full)


def commands_of(text: str) -> tuple[str, ...]:
    """Comma-separated names of COMMANDS, checked (argparse type)."""
    names = tuple(n for n in text.split(",") if n)
    if unknown := [n for n in names if n not in COMMANDS]:
        raise argparse.ArgumentTypeError(f"unknown command(s) {', '.join(unknown)}; valid: {', '.join(COMMANDS)}")
    return names


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the env rows at small sizes (about a minute)")
    parser.add_argument("--steps", type=int, default=None, help=f"one env's steps (default {PAGE.steps}, quick "
                        f"{QUICK.steps})")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"runs per core of every part (default {PAGE.repeats}, one env's {PAGE.env_repeats}; "
                        f"quick {QUICK.repeats})")
    parser.add_argument("--commands", type=commands_of, default=(),
                        help=f"comma-separated, of {','.join(COMMANDS)}: whole commands to time on each core "
                        "(minutes each; default none)")
    parser.add_argument("--full", action="store_true", help="compare at its defaults (about 15 minutes per core)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else PAGE
    given = {"steps": args.steps, "repeats": args.repeats, "env_repeats": args.repeats}
    sizes = Sizes(**{**vars(sizes), **{k: v for k, v in given.items() if v is not None}})
    print(cores_table(sizes, args.commands, args.full).markdown())


if __name__ == "__main__":
    main()

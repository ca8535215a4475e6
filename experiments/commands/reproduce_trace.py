"""The Mooncake trace of `reproduce`: which one it replays, and the check it passes before the
sweep starts (see `experiments.commands.reproduce`'s docstring)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from auction_gym.workload import iter_mooncake

from ..cli import UsageError

if TYPE_CHECKING:
    from .reproduce import Sweep

REPO = Path(__file__).resolve().parents[2]
FULL_TRACE_ENV = "RADIX_AUCTION_MOONCAKE_TRACE"
"""The environment variable naming the full Mooncake conversation trace (12,031 requests; not in
the repository, which ships only its first 1,000 lines)."""
SLICE = REPO / "tests/data/mooncake/conversation_slice.jsonl"


def full_trace() -> Path | None:
    """The full trace's path from FULL_TRACE_ENV, or None when it is not set."""
    path = os.environ.get(FULL_TRACE_ENV)
    return Path(path) if path else None


DEFAULT_TRACES = tuple(p for p in (full_trace(), SLICE) if p is not None)
"""`--trace`'s default: the first of these that exists (the full trace, then the shipped slice)."""


def pick_trace(given: Path | None, sweep: Sweep) -> Path | None:
    """The trace to replay (`given`, else the first of DEFAULT_TRACES that exists), checked against
    `sweep` (`check_trace`) before anything runs; prints which one, or that there is none."""
    trace = given if given is not None else next((p for p in DEFAULT_TRACES if p.is_file()), None)
    if trace is None:
        print(f"Mooncake trace: none ({' and '.join(map(str, DEFAULT_TRACES))} do not exist); "
              "the mooncake workload is left out", flush=True)
    else:
        print(f"Mooncake trace: {trace}: {check_trace(trace, sweep)}", flush=True)
    return trace


def check_trace(trace: Path, sweep: Sweep) -> str:
    """Parse the lines of `trace` that `sweep` replays (its first `mooncake_lines`) and describe them
    in one line. A malformed line raises ValueError naming the file and line; a trace the sweep
    cannot use raises UsageError: fewer than two requests or a single arrival time (no arrival
    rate to scale), or a KV capacity of the sweep that every request exceeds."""
    lines = sweep.mooncake_lines
    arrivals, needs = [], []
    for r in iter_mooncake(trace, limit=lines):
        arrivals.append(r.arrival)
        # The engine rejects, on arrival, a request whose prompt + output exceeds its KV capacity.
        needs.append(r.prompt_len + r.output_len)
    where = f"--trace {trace}: its first {lines} lines"
    if len(arrivals) < 2 or arrivals[-1] == arrivals[0]:
        raise UsageError(f"{where} hold {len(arrivals)} request(s); the sweep needs two or more with "
                         "different timestamps (it scales the trace's arrival rate)")
    rejected = {kv: sum(n > kv for n in needs) for kv in sweep.mooncake_kv}
    for kv, count in rejected.items():
        if count == len(needs):
            raise UsageError(f"{where}: every request's prompt + output exceeds the sweep's {kv} KV tokens, "
                             "so the engine would reject them all")
    counts = ", ".join(f"{count} at {kv}" for kv, count in rejected.items())
    return f"{len(needs)} requests from its first {lines} lines; rejected for KV capacity (KV tokens): {counts}"


def mooncake_rate(trace: Path, lines: int) -> float:
    """Arrivals per second of the trace's first `lines` requests at time_scale 1."""
    times = [r.arrival for r in iter_mooncake(trace, limit=lines)]
    return (len(times) - 1) / (times[-1] - times[0])

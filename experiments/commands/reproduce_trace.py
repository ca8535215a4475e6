"""The Mooncake trace of `reproduce`: which one it replays, and the check it passes before the
sweep starts (see `experiments.commands.reproduce`'s docstring). The sweep's workloads that replay
a trace (`WorkloadEntry.trace_argument`: mooncake) all replay this one."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from auction_gym.engine import EngineConfig
from auction_gym.request import Request
from auction_gym.workload import SAMPLE_TRACE, get_workload

from ..errors import UsageError
from .reproduce_sweep import NUM_BIDDERS, Sweep

FULL_TRACE_ENV = "RADIX_AUCTION_MOONCAKE_TRACE"
"""The environment variable naming the full Mooncake conversation trace (12,031 requests; not in
the package, which ships only its first 1,000 lines)."""
SLICE = SAMPLE_TRACE


def full_trace() -> Path | None:
    """The full trace's path from FULL_TRACE_ENV, or None when it is not set."""
    path = os.environ.get(FULL_TRACE_ENV)
    return Path(path) if path else None


DEFAULT_TRACES = tuple(p for p in (full_trace(), SLICE) if p is not None)
"""`--trace`'s default: the first of these that exists (the full trace, then the shipped slice)."""


def pick_trace(given: Path | None, sweep: Sweep) -> Path | None:
    """The trace to replay (`given`, else the first of DEFAULT_TRACES that exists), checked against
    `sweep` (`check_trace`) before anything runs; prints which one, or that there is none. None
    without a word when no workload of the sweep replays a trace."""
    if not sweep.traced():
        return None
    trace = given if given is not None else next((p for p in DEFAULT_TRACES if p.is_file()), None)
    if trace is None:
        print(f"Mooncake trace: none ({' and '.join(map(str, DEFAULT_TRACES))} do not exist); "
              f"the {' and '.join(sweep.traced())} workload is left out", flush=True)
    else:
        print(f"Mooncake trace: {trace}: {check_trace(trace, sweep)}", flush=True)
    return trace


def _requests(workload: str, trace: Path, sweep: Sweep, **kwargs: object) -> list[Request]:
    """The requests of `trace` that the sweep replays as `workload` (its grid's arguments, seed 0)."""
    return list(get_workload(workload).stream(NUM_BIDDERS, 0, trace, **{**sweep.grids[workload].kwargs, **kwargs}))


def check_trace(trace: Path, sweep: Sweep) -> str:
    """Parse the requests of `trace` that `sweep` replays (for mooncake, its first `limit` lines)
    and describe them in one line. A malformed line raises ValueError naming the file and line; a
    trace the sweep cannot use raises UsageError: fewer than two requests or a single arrival time
    (no arrival rate to scale), or a KV capacity of the sweep that every request exceeds."""
    return "; ".join(_check(workload, trace, sweep) for workload in sweep.traced())


def _check(workload: str, trace: Path, sweep: Sweep) -> str:
    grid = sweep.grids[workload]
    requests = _requests(workload, trace, sweep)
    arrivals = [r.arrival for r in requests]
    read = f"its first {grid.kwargs['limit']} lines" if "limit" in grid.kwargs else "it"
    where = f"--trace {trace}: {read}"
    if len(arrivals) < 2 or arrivals[-1] == arrivals[0]:
        raise UsageError(f"{where} hold {len(arrivals)} request(s); the sweep needs two or more with "
                         "different timestamps (it scales the trace's arrival rate)")
    rejected = {kv: sum(EngineConfig(kv_capacity_tokens=kv).rejection(r.prompt_len, r.output_len) is not None
                        for r in requests) for kv in grid.kv_capacities}
    for kv, count in rejected.items():
        if count == len(requests):
            raise UsageError(f"{where}: every request's prompt + output exceeds the sweep's {kv} KV tokens (less the "
                             "engine's margin, `EngineConfig.rejection`), "
                             "so the engine would reject them all")
    counts = ", ".join(f"{count} at {kv}" for kv, count in rejected.items())
    return f"{len(requests)} requests from {read}; rejected for KV capacity (KV tokens): {counts}"


def natural_rate(workload: str, trace: Path, sweep: Sweep) -> float:
    """Arrivals per second of the requests the sweep replays as `workload`, at time scale 1."""
    return arrival_rate(_requests(workload, trace, sweep, **{get_workload(workload).intensity: 1.0}))


def arrival_rate(requests: Iterable[Request]) -> float:
    """Arrivals per second over `requests` (in arrival order): intervals / first-to-last span."""
    times = [r.arrival for r in requests]
    return (len(times) - 1) / (times[-1] - times[0])

"""Replay one workload through the simulated engine under every scheduler and print a table.

The default is the synthetic agentic workload near the engine's saturation with a small KV cache,
where admission order matters for both hit rate and latency; `--workload NAME` replays any
registered workload instead (`auction_gym.workload.registry`: `shared_prefix`, SGLang's
generated-shared-prefix benchmark, ...), and `--trace PATH` the Mooncake trace (`--workload
mooncake` alone replays the sample the package ships, `auction_gym.workload.SAMPLE_TRACE`). The workload gets
those of the options --rate, --duration, --time-scale, --limit, --num-groups and
--prompts-per-group that it takes (its registry entry's arguments), given or at the demo's values,
then --workload-kwargs; one of those options given to a workload that does not take it is refused.

Above the table: how many requests the workload loaded and how many the engine rejected (one whose
prompt + output exceeds the KV capacity less SGLang's margin, `EngineConfig.rejection`, never runs),
with the engine's reason; the table's `done` column counts the finished ones. Nothing to run (no
request loaded, or every one rejected) is an error, not a table of NaNs.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from auction_gym import EngineConfig, Metrics, Request, SimEngine, scheduler_names
from auction_gym.engine import rejections
from auction_gym.registry import mechanism_names
from auction_gym.workload import SAMPLE_TRACE, get_workload, workload_names

from ..argtypes import json_dict, names, positive_float, positive_int, random_seed, trace_file
from ..errors import UsageError

WORKLOAD_OPTIONS: dict[str, Any] = {"rate": 35.0, "duration": 60.0, "time_scale": 4.0, "limit": None,
                                     "num_groups": 64, "prompts_per_group": 16}
"""The demo's options that set a workload argument of the same name, and the demo's value of each
for a workload that takes it where the option is not given. The options themselves default to
None, so that one given to a workload that does not take it is refused rather than dropped."""


@dataclass(frozen=True)
class Row:
    scheduler: str
    metrics: Metrics
    wall_s: float
    rejected: dict[int, str]
    """The engine's reason for each request it rejected, by request id, in id order (`rejections`)."""

    @property
    def loaded(self) -> int:
        """Requests the workload submitted."""
        m = self.metrics
        return m.finished + m.rejected + m.unfinished


def compare_schedulers(
    workload: Callable[[], Iterable[Request]], config: EngineConfig, schedulers: Iterable[str] | None = None
) -> list[Row]:
    """Run a fresh engine per scheduler (None: every registered one, `auction_gym.registry`) on the
    same workload (`workload()` is called once each)."""
    rows = []
    for name in schedulers if schedulers is not None else mechanism_names():
        t0 = time.perf_counter()
        engine = SimEngine(name, config)
        metrics = engine.run(workload())
        rows.append(Row(name, metrics, time.perf_counter() - t0, rejections(engine.records)))
    return rows


def request_counts(row: Row, title: str, kv_capacity: int) -> str:
    """One line: requests loaded and rejected (with the engine's reason for the first); UsageError
    when nothing could run (no request loaded, or every one rejected). `title` names the workload."""
    if row.loaded == 0:
        raise UsageError(f"nothing to run, the workload has no request: {title}")
    if not row.rejected:
        return f"requests: {row.loaded} loaded, none rejected"
    first = next(iter(row.rejected))
    example = f"e.g. request {first}: {row.rejected[first]}"
    if len(row.rejected) == row.loaded:
        raise UsageError(f"nothing to run: the engine rejected all {row.loaded} requests ({example}); "
                         f"raise --kv-capacity (now {kv_capacity})")
    return (f"requests: {row.loaded} loaded, {len(row.rejected)} rejected by the engine ({example}); "
            "`done` counts the finished ones")


COLUMNS: tuple[tuple[str, Callable[[Row], str]], ...] = (
    ("scheduler", lambda r: r.scheduler),
    ("hit rate", lambda r: f"{r.metrics.hit_rate:.3f}"),
    ("TTFT mean", lambda r: f"{r.metrics.mean_ttft:.2f}"),
    ("TTFT p99", lambda r: f"{r.metrics.p99_ttft:.2f}"),
    ("lat mean", lambda r: f"{r.metrics.mean_latency:.2f}"),
    ("lat p99", lambda r: f"{r.metrics.p99_latency:.2f}"),
    ("req/s", lambda r: f"{r.metrics.throughput_rps:.2f}"),
    ("tok/s", lambda r: f"{r.metrics.throughput_tps:.0f}"),
    ("done", lambda r: f"{r.metrics.finished:d}"),
    ("wall s", lambda r: f"{r.wall_s:.1f}"),
)
"""The table's columns: heading and cell of a row; the first is left-aligned, the numbers right."""


def format_table(rows: list[Row]) -> str:
    """The rows as a text table, each column as wide as its widest cell (a scheduler's name of any
    length keeps the numbers under their headings)."""
    cells = [[head for head, _ in COLUMNS], *([cell(r) for _, cell in COLUMNS] for r in rows)]
    widths = [max(len(line[c]) for line in cells) for c in range(len(COLUMNS))]

    def line(values: list[str]) -> str:
        return " ".join(v.ljust(w) if c == 0 else v.rjust(w) for c, (v, w) in enumerate(zip(values, widths)))

    head = line(cells[0])
    return "\n".join([head, "-" * len(head), *map(line, cells[1:])])


def run_demo(
    seed: int = 0, bidders: int = 8, kv_capacity: int = 60_000, schedulers: Iterable[str] | None = None,
    workload_name: str = "agentic", trace: Path | None = None, workload_kwargs: dict[str, Any] | None = None,
) -> str:
    """Build the workload (a registered one, with `workload_kwargs`; `trace` for one that replays a
    trace), run every scheduler on it, return the printed report."""
    config = EngineConfig(kv_capacity_tokens=kv_capacity)
    kwargs = workload_kwargs or {}
    requests = list(get_workload(workload_name).stream(bidders, seed, trace, **kwargs))
    given = "".join(f", {name}={value!r}" for name, value in kwargs.items())
    source = f" {trace}" if trace is not None else ""
    title = f"{workload_name} workload{source}: {len(requests)} requests, {bidders} bidders{given}, seed {seed}"
    rows = compare_schedulers(lambda: requests, config, schedulers)
    # The engine rejects a request on arrival, whatever the scheduler, so any row's counts do.
    counts = request_counts(rows[0], title, kv_capacity)
    cost = config.cost_model.name
    return (f"{title}\nengine: {kv_capacity} KV tokens, {cost}; times in simulated seconds\n{counts}\n\n"
            + format_table(rows))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=random_seed, default=0,
                        help="seed of the workload's draws (default 0)")
    parser.add_argument("--workload", choices=workload_names(), default=None,
                        help="a registered workload (default agentic; with --trace, the one that replays it)")
    parser.add_argument("--rate", type=positive_float, default=None,
                        help=f"arrivals per second (default {WORKLOAD_OPTIONS['rate']:g})")
    parser.add_argument("--duration", type=positive_float, default=None,
                        help=f"agentic workload length in s (default {WORKLOAD_OPTIONS['duration']:g})")
    parser.add_argument("--bidders", type=positive_int, default=8, help="tenants sending requests (default 8)")
    parser.add_argument("--kv-capacity", type=positive_int, default=60_000,
                        help="KV cache size in tokens (default 60000)")
    parser.add_argument("--schedulers", type=names, default=None,
                        help=f"comma-separated (default: every registered one, {','.join(mechanism_names())})")
    parser.add_argument("--trace", type=trace_file, default=None,
                        help="replay a Mooncake trace (JSONL) instead of the agentic workload (--workload mooncake "
                        "alone: the sample the package ships)")
    parser.add_argument("--time-scale", type=positive_float, default=None,
                        help=f"trace arrival-time multiplier (default {WORKLOAD_OPTIONS['time_scale']:g})")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="replay only the first N lines of the trace (default all)")
    parser.add_argument("--num-groups", type=positive_int, default=None,
                        help=f"shared_prefix: groups (default {WORKLOAD_OPTIONS['num_groups']})")
    parser.add_argument("--prompts-per-group", type=positive_int, default=None,
                        help=f"shared_prefix: prompts per group (default {WORKLOAD_OPTIONS['prompts_per_group']})")
    parser.add_argument("--workload-kwargs", type=json_dict, default={},
                        help="JSON object of further workload arguments, over the options above (default {})")


def chosen_workload(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The workload's name (`--workload`; with `--trace` alone, the first registered one that
    replays a trace; else agentic), the trace it replays (`--trace`, else for a workload that
    replays one the shipped SAMPLE_TRACE; None for the others) and its arguments: the options in
    WORKLOAD_OPTIONS that it takes (given, else the demo's value), then `--workload-kwargs`.
    UsageError for a trace given to a workload that replays none, or an option of WORKLOAD_OPTIONS
    given to one that does not take it."""
    traced = [name for name in workload_names() if get_workload(name).trace_argument is not None]
    name = args.workload or (traced[0] if args.trace is not None and traced else "agentic")
    entry = get_workload(name)
    if entry.trace_argument is None and args.trace is not None:
        raise UsageError(f"--trace: the {name} workload replays no trace")
    trace = None if entry.trace_argument is None else args.trace or SAMPLE_TRACE
    takes = entry.parameter_defaults()
    if unused := [option for option in WORKLOAD_OPTIONS if getattr(args, option) is not None and option not in takes]:
        flags = ", ".join(f"--{option.replace('_', '-')}" for option in unused)
        taken = ", ".join(f"--{option.replace('_', '-')}" for option in WORKLOAD_OPTIONS if option in takes)
        raise UsageError(f"{flags}: the {name} workload takes no such argument (of these options it takes: "
                         f"{taken or 'none'})")
    kwargs = {option: value if (value := getattr(args, option)) is not None else default
              for option, default in WORKLOAD_OPTIONS.items() if option in takes}
    return name, trace, {**kwargs, **args.workload_kwargs}


def run(args: argparse.Namespace) -> None:
    unknown = set(args.schedulers or ()) - set(scheduler_names())
    if unknown:
        raise UsageError(f"--schedulers: unknown {', '.join(sorted(unknown))}; "
                         f"valid: {', '.join(scheduler_names())}")
    name, trace, kwargs = chosen_workload(args)
    try:
        get_workload(name).check_kwargs(kwargs)
    except ValueError as e:
        raise UsageError(f"--workload-kwargs: {e}") from None
    print(run_demo(seed=args.seed, bidders=args.bidders, kv_capacity=args.kv_capacity, schedulers=args.schedulers,
                   workload_name=name, trace=trace, workload_kwargs=kwargs))

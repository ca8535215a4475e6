"""The workloads a market can replay, by name: the one registry of workloads.

Each entry names a workload, where its request stream lives, which keyword arguments it takes and
the market's defaults for them. Everything else derives from it: `WORKLOADS` and the keyword check
of `MarketConfig` (`auction_gym.market.config`), `MarketConfig.make_workload`, the workload rows of
`RadixAuctionEnv`'s docstring, and the workloads of `radix-auction demo`, `reproduce` and
`cluster` (whose sweeps of them are the experiments' own, `experiments.sweeps`). Registration
order is table order. To add one, see the documentation's "Extending" page.

A stream is called `target(num_bidders=N, seed=S, **kwargs)` (and, for a workload that replays a
trace, with the trace's path under `trace_argument`) and returns the requests in arrival order
(times in seconds), as an iterable the engine reads as its clock advances. Targets are
"module:attr" strings imported on first use.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..registry import resolve, with_table
from ..request import Request

INTENSITIES = ("rate", "time_scale")
"""How a workload's arrival intensity is set: "rate" (requests/s; higher is faster) or
"time_scale" (a multiplier of the trace's arrival times; higher is slower)."""


@dataclass(frozen=True)
class WorkloadEntry:
    """One workload: `name` (what configs and the command line say), `target` (its stream, as
    "module:attr" or the callable; see the module docstring), `summary` (one line),
    `parameters` (a dataclass whose fields, less `num_bidders`, are its keyword arguments, or a
    callable whose keyword parameters are; None: the target's own), `defaults` (the market's
    values over the parameters' own), `trace_argument` (the keyword receiving
    `MarketConfig.trace_path`; None: no trace), `open_ended` (a stream without end unless given
    `duration` (s) or `num_requests`: the market then sets `duration` to outlast the episode),
    and `intensity` (its argument that sets how fast requests arrive, one of INTENSITIES). How the
    experiments sweep it is theirs (`experiments.sweeps`)."""

    name: str
    target: str | Callable[..., Iterable[Request]]
    summary: str
    parameters: str | type | Callable[..., Any] | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    trace_argument: str | None = None
    open_ended: bool = False
    intensity: str = "rate"

    def parameter_defaults(self) -> dict[str, Any]:
        """{keyword argument: its default} (the market's `defaults` over the parameters' own; an
        argument without a default maps to `inspect.Parameter.empty`), in declaration order."""
        return {**self.own_parameters(), **self.defaults}

    def own_parameters(self) -> dict[str, Any]:
        """{keyword argument: its default} as `parameters` (or the target) declares them."""
        source = resolve(self.parameters if self.parameters is not None else self.target)
        if dataclasses.is_dataclass(source):
            own = {f.name: (f.default if f.default is not dataclasses.MISSING else
                            f.default_factory() if f.default_factory is not dataclasses.MISSING
                            else inspect.Parameter.empty)
                   for f in dataclasses.fields(source)}
        else:
            kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            own = {p.name: p.default for p in inspect.signature(source).parameters.values() if p.kind in kinds}
        for given in ("num_bidders", "seed", self.trace_argument):
            own.pop(given, None)
        return own

    def check_kwargs(self, kwargs: Mapping[str, Any]) -> None:
        """Raise ValueError naming the keyword arguments this workload does not take."""
        known = self.parameter_defaults()
        if unknown := set(kwargs) - set(known):
            raise ValueError(f"unknown workload_kwargs {sorted(unknown)} for workload {self.name!r}; "
                             f"known: {sorted(known)}")

    def check_values(self, num_bidders: int, kwargs: Mapping[str, Any]) -> None:
        """Raise ValueError for a value of `kwargs` (over the market's `defaults`) that the
        workload's parameters refuse, where they are a dataclass with a `validate` method: what its
        stream would refuse when an episode starts, refused when a market is configured. A
        workload with no such parameters (a trace's reader) checks its arguments when it reads."""
        source = resolve(self.parameters) if self.parameters is not None else None
        if not (dataclasses.is_dataclass(source) and callable(getattr(source, "validate", None))):
            return
        given = {**self.defaults, **kwargs}
        if "num_bidders" in {f.name for f in dataclasses.fields(source)}:
            given["num_bidders"] = num_bidders
        try:
            parameters = source(**given)
        except TypeError:  # a required field its stream fills in itself: checked there, as before
            return
        try:
            parameters.validate()
        except TypeError as e:  # a value of the wrong type, met by a comparison or sum inside validate
            raise ValueError(f"workload_kwargs for workload {self.name!r}: {e}") from None

    def stream(self, num_bidders: int, seed: int, trace: str | Path | None = None,
               **kwargs: Any) -> Iterable[Request]:
        """The requests of `num_bidders` bidders drawn from `seed`, with `kwargs` as given (the
        market's `defaults` are not applied here); `trace` is required iff `trace_argument` is set."""
        if (trace is None) != (self.trace_argument is None):
            need = f"needs a trace ({self.trace_argument})" if trace is None else "takes no trace"
            raise ValueError(f"workload {self.name!r} {need}")
        if self.trace_argument is not None:
            kwargs = {self.trace_argument: trace, **kwargs}
        return resolve(self.target)(num_bidders=num_bidders, seed=seed, **kwargs)


_ENTRIES: dict[str, WorkloadEntry] = {}


def register_workload(entry: WorkloadEntry) -> WorkloadEntry:
    """Add `entry` at the end of the table. ValueError when the name is taken, the intensity is not
    one of INTENSITIES, or `defaults` or the intensity name an argument the workload does not take
    (checked here, so a typo fails at registration, not in an episode)."""
    if entry.name in _ENTRIES:
        raise ValueError(f"workload name {entry.name!r} is already registered")
    if entry.intensity not in INTENSITIES:
        raise ValueError(f"workload {entry.name!r}: intensity must be one of {INTENSITIES}, got {entry.intensity!r}")
    known = set(entry.own_parameters())
    named = set(entry.defaults) | {entry.intensity}
    if entry.open_ended:
        named |= {"duration", "num_requests"}
    if unknown := named - known:
        raise ValueError(f"workload {entry.name!r} does not take {sorted(unknown)}; it takes {sorted(known)}")
    _ENTRIES[entry.name] = entry
    return entry


def workload_names() -> tuple[str, ...]:
    """Every registered workload, in table order."""
    return tuple(_ENTRIES)


def get_workload(name: str) -> WorkloadEntry:
    """The entry of `name`; an unknown name raises ValueError listing the valid ones."""
    try:
        return _ENTRIES[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; valid: {', '.join(_ENTRIES)}") from None


WORKLOAD_TABLE = "{workload_table}"
"""The line of a docstring that `with_workload_table` replaces by a row per registered workload."""


def with_workload_table(doc: str | None) -> str | None:
    """`doc` with its WORKLOAD_TABLE line replaced by markdown rows `| name | summary |` of every
    registered workload (None stays None)."""
    return with_table(doc, WORKLOAD_TABLE, [(e.name, e.summary) for e in _ENTRIES.values()])


for _entry in (
    WorkloadEntry(
        "agentic", "auction_gym.workload.agentic:agentic_stream",
        "synthetic agentic traffic: sessions, fan-outs, rollouts, urgent calls (AgenticConfig)",
        parameters="auction_gym.workload.agentic:AgenticConfig",
        defaults={"rate": 20.0, "bidder_heterogeneity": 0.0, "shape_mix": {"session": 0.6, "urgent": 0.4}},
        open_ended=True,
    ),
    WorkloadEntry(
        "shared_prefix", "auction_gym.workload.shared_prefix:shared_prefix_stream",
        "SGLang's generated-shared-prefix benchmark (SharedPrefixConfig)",
        parameters="auction_gym.workload.shared_prefix:SharedPrefixConfig",
    ),
    WorkloadEntry(
        "mooncake", "auction_gym.workload.mooncake:iter_mooncake",
        "replay of a Mooncake trace (JSONL, `trace_path`; iter_mooncake's arguments)",
        defaults={"time_scale": 4.0}, trace_argument="path", intensity="time_scale",
    ),
):
    register_workload(_entry)

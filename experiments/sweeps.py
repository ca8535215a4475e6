"""How the experiments sweep each workload: `radix-auction reproduce`'s load sweep and the scaling
of its intensity to one replica and to many (`radix-auction cluster`, and `markets` for one), by
workload name; the one registry of both.

The workloads themselves (their streams, arguments and the market's defaults) are the library's
(`auction_gym.workload.registry`); what grid of loads and KV sizes a command replays them over is
the commands'. A workload without an entry here is left out of both sweeps; one with only `load`
(or only `replicas`) is in one. Registration order does not matter: the commands take the
workloads in the library's table order. To add one, see the documentation's "Extending" page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

from auction_gym.market import MarketConfig
from auction_gym.registry import resolve
from auction_gym.workload import AgenticConfig, get_workload, workload_names


@dataclass(frozen=True)
class SweepGrid:
    """One size of a load sweep over a workload (`radix-auction reproduce`): the engine's KV
    capacities (tokens), the loads (arrival rate / the rate LPM sustains when saturated), and the
    workload's keyword arguments at every point (its size: seconds, groups, trace lines)."""

    kv_capacities: tuple[int, ...]
    loads: tuple[float, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadSweep:
    """How `reproduce` sweeps a workload's load: `saturating`, the intensity (in the workload's
    `intensity` argument's units) at which the engine saturates, and the quick and full grids."""

    saturating: float
    quick: SweepGrid
    full: SweepGrid


@dataclass(frozen=True)
class ReplicaScale:
    """How `radix-auction cluster` offers a workload to R replicas at a load L (scale = L x R;
    `markets` offers it to one replica the same way):
    `per_replica`, the intensity one replica is offered at load 1, in the workload's `intensity`
    units (the rate times the scale, or the time scale divided by it), as a number or a function
    of no arguments (or its "module:attr"); `size_argument`, the keyword argument that sets how
    many requests a point replays, given max(1, size // `size_divisor`) x R for the command's
    `--size`; `kwargs`, fixed workload arguments; `engine_kwargs`, the engine's (`EngineConfig`)."""

    per_replica: float | str | Callable[[], float]
    size_argument: str
    size_divisor: int = 1
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def workload_kwargs(self, intensity: str, scale: float, size: int, replicas: int) -> dict[str, Any]:
        """The workload's keyword arguments at `scale` (load x replicas) for `size` and `replicas`."""
        base = self.per_replica if isinstance(self.per_replica, (int, float)) else resolve(self.per_replica)()
        level = base * scale if intensity == "rate" else base / scale
        return {intensity: level, self.size_argument: max(1, size // self.size_divisor) * replicas, **self.kwargs}


@dataclass(frozen=True)
class WorkloadSweeps:
    """The sweeps of one registered workload, `workload`: `load` (how `reproduce` sweeps it; None:
    left out of that sweep) and `replicas` (how `cluster` scales it; None: left out of that one)."""

    workload: str
    load: LoadSweep | None = None
    replicas: ReplicaScale | None = None


_ENTRIES: dict[str, WorkloadSweeps] = {}


def register_sweeps(entry: WorkloadSweeps) -> WorkloadSweeps:
    """Add `entry`. ValueError when the workload is not registered, already has sweeps, or a grid
    or the replica scaling names an argument the workload does not take (checked here, so a typo
    fails at registration, not in a sweep)."""
    workload = get_workload(entry.workload)
    if entry.workload in _ENTRIES:
        raise ValueError(f"workload {entry.workload!r} already has sweeps registered")
    named: set[str] = set()
    if entry.load is not None:
        named |= set(entry.load.quick.kwargs) | set(entry.load.full.kwargs)
    if entry.replicas is not None:
        named |= {entry.replicas.size_argument} | set(entry.replicas.kwargs)
    known = set(workload.own_parameters())
    if unknown := named - known:
        raise ValueError(f"the sweeps of workload {entry.workload!r} name {sorted(unknown)}, which it does not "
                         f"take; it takes {sorted(known)}")
    _ENTRIES[entry.workload] = entry
    return entry


def load_sweep(workload: str) -> LoadSweep | None:
    """How `reproduce` sweeps `workload`'s load (None: it is left out)."""
    entry = _ENTRIES.get(workload)
    return entry.load if entry is not None else None


def replica_scale(workload: str) -> ReplicaScale | None:
    """How `cluster` scales `workload` to replicas (None: it is left out)."""
    entry = _ENTRIES.get(workload)
    return entry.replicas if entry is not None else None


def load_swept() -> tuple[str, ...]:
    """The registered workloads with a load sweep, in the library's table order."""
    return tuple(name for name in workload_names() if load_sweep(name) is not None)


def replica_scaled() -> tuple[str, ...]:
    """The registered workloads with a replica scaling, in the library's table order."""
    return tuple(name for name in workload_names() if replica_scale(name) is not None)


def default_served_rate() -> float:
    """`MarketConfig().served_rate()`: what the default market's engine serves with every running
    slot busy (requests/s), the agentic workload's load 1 on one replica."""
    return MarketConfig().served_rate()


# Agentic traffic with the workload's full mix (sessions, fan-out, rollouts, urgent calls) and
# tenants that differ, as `reproduce` sweeps it, unlike the env's default scenario (the
# workload's `defaults`).
_REPRODUCE_AGENTIC = {"bidder_heterogeneity": AgenticConfig.bidder_heterogeneity, "shape_mix": AgenticConfig().shape_mix}
_QUICK_LOADS = (0.5, 1.0, 1.5, 2.5)
_FULL_LOADS = (0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0)

for _entry in (
    WorkloadSweeps(
        "agentic",
        LoadSweep(80.0, SweepGrid((20_000, 60_000), _QUICK_LOADS, {**_REPRODUCE_AGENTIC, "duration": 20.0}),
                  SweepGrid((15_000, 30_000, 60_000), _FULL_LOADS, {**_REPRODUCE_AGENTIC, "duration": 60.0})),
        # One replica's load 1: what the default market's engine serves with every slot busy.
        ReplicaScale(default_served_rate, "num_requests"),
    ),
    WorkloadSweeps(
        "shared_prefix",
        # Loads placed around the policies' sustainable throughputs (strict priority's is about
        # 0.7 of LPM's there).
        LoadSweep(200.0, SweepGrid((40_000,), (0.6, 0.9, 2.5), {"num_groups": 64, "prompts_per_group": 16}),
                  SweepGrid((40_000, 100_000), (0.5, 0.7, 0.8, 0.9, 1.0, 1.2, 2.0),
                            {"num_groups": 64, "prompts_per_group": 64})),
        ReplicaScale(8.0, "num_groups", size_divisor=16, kwargs={"prompts_per_group": 16}),
    ),
    WorkloadSweeps(
        "mooncake",
        # A time scale of 0.25 is 4x the trace's own rate.
        LoadSweep(0.25, SweepGrid((200_000,), _QUICK_LOADS, {"limit": 300}),
                  SweepGrid((100_000, 400_000), _FULL_LOADS, {"limit": 1000})),
        ReplicaScale(4.0, "limit", engine_kwargs={"kv_capacity_tokens": 100_000}),
    ),
):
    register_sweeps(_entry)

"""What `reproduce`, its report and its trace check share: the radix auction's name and the sweep's
grid. (The three import from here, and none from another, so there is no import cycle.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from auction_gym.workload import get_workload

from ..sweeps import SweepGrid, load_sweep, load_swept

AUCTION = "radix_vcg"
NUM_BIDDERS = 8
"""Tenants of every workload the sweep replays."""


@dataclass(frozen=True)
class Sweep:
    """The grid of one run of `reproduce`: per workload, in the registry's order, its KV
    capacities, loads and arguments (`experiments.sweeps.SweepGrid`)."""

    grids: Mapping[str, SweepGrid]
    max_snapshots: int = 200

    def traced(self) -> tuple[str, ...]:
        """The workloads of the sweep that replay a trace (`WorkloadEntry.trace_argument`)."""
        return tuple(name for name in self.grids if get_workload(name).trace_argument is not None)


def sweep_of(size: str) -> Sweep:
    """The "quick" or "full" sweep: every registered workload that has a `LoadSweep`
    (`experiments.sweeps`), with its grid of that size (read from the registries now, so a
    workload registered later is in it)."""
    return Sweep({name: getattr(load_sweep(name), size) for name in load_swept()})

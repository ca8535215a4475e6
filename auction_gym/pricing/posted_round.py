"""The round a posted-price design decided: its admission order and each request's bill."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..policy import Decision
from ..request import Request


@dataclass(eq=False, slots=True)
class PostedRound(Decision):
    """One admission round of a posted-price design (the `Decision` the engine hands back on
    `Iteration.decision`): the order, and what each request pays if it is admitted from it.

    `charges` is the market's one way to price a round (docs/design.md section 3): an auction's
    round charges VCG payments, this one the posted price of each admitted request. Money is in the
    workload's units and needs no conversion, so `seconds_per_unit` is not read.
    """

    order: list[Request]
    """The waiting queue, first = admitted first."""
    bills: dict[int, tuple[int, float]] = field(default_factory=dict)
    """Request id -> (its bidder, what it pays if admitted); a request that pays nothing is absent."""
    prices: tuple[float, ...] = ()
    """The prices per token posted in the round (a tier's each, or the one congestion price)."""
    priorities: Mapping[int, int] = field(default_factory=dict)
    """Request id -> its integer priority in the round (larger = more important, SGLang's default
    direction), for the engine's priority rules (`EngineConfig.priority_preemption`,
    `radix_eviction_policy`); empty for a design without priorities (every request then has 0)."""
    stateless_charges = True

    def admission_order(self) -> list[Request]:
        """The requests, first = admitted first (a new list)."""
        return list(self.order)

    def charges(
        self, admitted: Sequence[int], per_bidder: Sequence[int], seconds_per_unit: float
    ) -> dict[int, float]:
        """Bidder -> the sum of the bills of its requests `admitted` (ids) from this round."""
        due: dict[int, float] = {}
        bills = self.bills
        for rid in admitted:
            bill = bills.get(rid)
            if bill is not None:
                due[bill[0]] = due.get(bill[0], 0.0) + bill[1]
        return due

"""The radix auction's allocator of an engine's rounds: one queue tree kept from round to round.

`TreeAllocator` brings one `IncrementalQueueTree` (incremental_tree.py; on the compiled core a
`CompiledQueueTree`, compiled_tree.py, the same rounds bit for bit), fed each request's bid
before its bidder's multiplier, to each round's queue by the changes the engine reports (a
`QueueDelta`), and decides a round of two requests or more over it: a market's over the skeleton
of nodes that mix bidders (factored.py), priced from that allocation; a replay's (every
multiplier 1) by reading the tree's own order, which is the same bit for bit, with no payment
inputs made. docs/economic-model.md section 3 says why and at what cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..policy import QueueDelta, check_bids
from ..request import Request
from .base import Allocation
from .compiled_tree import CompiledQueueTree, queue_tree
from .factored import FactoredAllocation

if TYPE_CHECKING:
    from .base import AuctionMechanism

_KEPT_SKIPS = 64
"""Rounds decided without the tree whose changes are kept for the next that uses it (beyond, it
compares queues)."""


@dataclass(eq=False)
class OrderedRound:
    """A round ordered without its payments' inputs (a round without multipliers, or a lone
    request): its inputs and order; the auction builds the full allocation (completion times, cost
    and what the payments read) from scratch when the round is priced (`RadixTreeAuction.full`)."""

    requests: list[Request]
    bids: list[float]
    """The bids the round was decided on."""
    prefix_lens: list[int] | None
    admission: list[Request]
    """The requests in the order decided."""
    full: Allocation | None = None
    """The from-scratch allocation of the same inputs (the same order), once built."""

    @property
    def order(self) -> list[int]:
        """Positions in `requests` in the order decided."""
        position = {id(r): k for k, r in enumerate(self.requests)}
        return [position[id(r)] for r in self.admission]

    def whole(self, pricing: AuctionMechanism) -> Allocation:
        """The from-scratch allocation `pricing` builds of the same inputs, built once."""
        if self.full is None:
            self.full = pricing.allocate(self.requests, prefix_lens=self.prefix_lens, bids=self.bids)
        return self.full


class TreeAllocator:
    """Decides an engine's rounds over one queue tree kept across them; see the module docstring.

    Args:
        request_work: completion units per request (the auction's `request_work`).
        costed: False under the "unit" cost model (no edge work; cached lengths ignored).
        cache_ties: ties go by longest cached prefix, then id (`smith.tie_value`); else by id.
    """

    def __init__(self, request_work: float, costed: bool, cache_ties: bool = False) -> None:
        self.request_work = request_work
        self._tree = queue_tree(request_work, costed, cache_ties)
        self._following = False
        """Whether the tree holds the queue of the last round (so that round's changes lead on)."""
        self._skipped: list[QueueDelta] = []
        """The changes of the rounds since the tree's, decided without it."""
        self.lone_round = self._tree.lone_round if self.compiled else None
        """On the compiled core, `CompiledQueueTree.lone_round`, called without a Python layer: a market's
        round of one request as `RadixTreeAuction.admit` returns it, made where its inputs need no
        checks, or None where the round's own checks must read them. None on the Python core."""

    @property
    def compiled(self) -> bool:
        """Whether the tree is the compiled core's (so `market_round` can decide a round)."""
        return isinstance(self._tree, CompiledQueueTree)

    def market_round(
        self, queue: Sequence[Request], multipliers: Sequence[float], changes: QueueDelta,
        lens_of: Mapping[Request, int] | None,
    ) -> tuple[list[Request], Any] | None:
        """`allocate` of a market's round of two requests or more on the compiled core, with its bids
        and cached lengths (of `lens_of`) read in the same compiled call, which makes the round's
        values as `RadixTreeAuction.admit` returns them (`CompiledQueueTree.market_round`); or None,
        with nothing changed, when the tree is not following the queue or the call does not take the
        inputs as they are."""
        if not self._following:
            return None
        skipped = self._skipped
        delta = QueueDelta.combine([*skipped, changes]) if skipped else changes
        self._following, self._skipped = False, []
        decided = self._tree.market_round(queue, multipliers, delta, lens_of)
        self._following = True
        if decided is None:
            self._skipped = skipped
        return decided

    def skip(self, changes: QueueDelta | None) -> None:
        """A round decided without the tree (a lone request, or inputs unchanged): keep its
        `changes` for the next round that uses it (None: not known, so that one compares queues)."""
        if changes is None or not self._following or len(self._skipped) >= _KEPT_SKIPS:
            self._following, self._skipped = False, []
        else:
            self._skipped.append(changes)

    def allocate(
        self, requests: list[Request], bids: list[float], prefix_lens: list[int] | None,
        multipliers: Sequence[float] | None, changes: QueueDelta | None,
    ) -> OrderedRound | FactoredAllocation:
        """The round over `requests` (two or more), whose `bids` (alpha x urgency with
        `multipliers`, one per bidder; the requests' own bids without) and cached `prefix_lens`
        (None under "unit") the auction read; `changes`, how the queue changed since the round
        before (None: not known). Raises ValueError on a bad bid or prompt, leaving the tree as it was."""
        if multipliers is not None and not sum(bids) < math.inf:
            # The tree checks the urgencies it holds, not their products, which may overflow to inf
            # (and give NaN payments) where both factors are finite. A NaN or inf bid makes the sum
            # NaN or inf (one C-level pass); a negative one has a negative urgency, which the tree names.
            check_bids(requests, bids)
        base = bids if multipliers is None else [r.urgency for r in requests]
        delta = None
        if changes is not None and self._following:
            delta = QueueDelta.combine([*self._skipped, changes]) if self._skipped else changes
        self._following, self._skipped = False, []
        self._tree.update(requests, base, prefix_lens, delta)
        self._following = True
        if multipliers is None:
            return OrderedRound(requests, bids, prefix_lens, self._tree.order())
        return self._tree.factored(requests, bids, prefix_lens, multipliers)

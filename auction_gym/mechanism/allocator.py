"""The radix auction's allocator of an engine's rounds: one queue tree kept from round to round.

`TreeAllocator` holds one `IncrementalQueueTree` (incremental_tree.py; on the compiled core a
`CompiledQueueTree`, compiled_tree.py, the same rounds bit for bit) and brings it to each round's
queue by the changes the engine passes with each round (the requests that joined and left the
queue since the round before, and those whose cached prefix was matched again: a `QueueDelta`),
those of the rounds decided without the tree (`skip`) combined, or, when they are not known, by
comparing queues. The tree is fed each
request's base bid, the bid before its bidder's multiplier: its urgency in a market's round (bids
alpha_i x urgency), its own `bid` in a round without multipliers (an engine replay, where every
multiplier is 1). A round of two requests or more is then decided over it:

- with multipliers, over the tree's skeleton (factored.py): the nodes that hold more than one
  bidder are re-sorted in money, each single-bidder block below them keeps its order and its S and
  F in urgency units scaled by its bidder's multiplier. The `FactoredAllocation` holds the order
  and what the VCG payments read (radix_auction.py), so the market prices the round from it.
- without multipliers, the skeleton is not re-sorted: with every multiplier 1 the money keys are
  the tree's own keys, so the order the tree keeps at every node, the mixed ones included, is the
  skeleton's, bit for bit (`tests/test_allocator.py` checks both against each other). The order is
  read off the root in C, so a replay's round costs the tree's update and that pass
  (`OrderedRound`). The payments' inputs are not made: that costs Python steps per block of every
  node that mixes bidders, every round (on the Mooncake trace, one node of a few hundred blocks
  below the root), for rounds nothing prices. One that is priced after all builds its allocation
  from scratch from the round's record (radix_auction.py), as a one-off round does.

Either kind of round may follow the other on one allocator: the requests whose base bid changed
(urgency against own bid) are re-costed, as any changed bid is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..policy import QueueDelta
from ..request import Request
from .base import Allocation
from .compiled_tree import queue_tree
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

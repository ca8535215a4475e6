"""The radix auction's allocator of an engine's rounds: one queue tree kept from round to round.

`TreeAllocator` holds one `IncrementalQueueTree` (incremental_tree.py) and brings it to each round's
queue by the changes the engine reports (the requests that joined and left the queue since the
refresh the tree last followed, and those whose cached prefix was matched again:
`WaitingPrefixes.delta_since`), or, when none are known, by comparing queues. The tree is fed each
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
from typing import Sequence

from ..request import Request
from ..scheduler.waiting import WaitingPrefixes
from .base import Allocation
from .factored import FactoredAllocation, factored_allocation
from .incremental_tree import IncrementalQueueTree, queue_order


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


class TreeAllocator:
    """Decides an engine's rounds over one queue tree kept across them; see the module docstring.

    Args:
        request_work: completion units per request (the auction's `request_work`).
        costed: False under the "unit" cost model (no edge work; cached lengths ignored).
        cache_ties: ties go by longest cached prefix, then id (`smith.tie_value`); else by id.
    """

    def __init__(self, request_work: float, costed: bool, cache_ties: bool = False) -> None:
        self.request_work = request_work
        self._tree = IncrementalQueueTree(request_work, costed, cache_ties)
        self._synced: int | None = None
        """The refresh of the engine's queue (`WaitingPrefixes.serial`) the tree was last brought
        to; None: not known to be one."""

    def allocate(
        self, requests: list[Request], bids: list[float], prefix_lens: list[int] | None,
        multipliers: Sequence[float] | None, refreshed: WaitingPrefixes | None,
    ) -> OrderedRound | FactoredAllocation:
        """The round over `requests` (two or more), whose `bids` (alpha x urgency with
        `multipliers`, one per bidder; the requests' own bids without) and cached `prefix_lens`
        (None under "unit") the auction read; `refreshed`, the engine's refresh whose queue
        `requests` is (None: not known to be). Raises ValueError on a bad bid or prompt, leaving
        the tree as it was."""
        base = bids if multipliers is None else [r.urgency for r in requests]
        delta = None
        if refreshed is not None and self._synced is not None:
            delta = refreshed.delta_since(self._synced)
        root = self._tree.update(requests, base, prefix_lens, delta)
        self._synced = None if refreshed is None else refreshed.serial
        if multipliers is None:
            return OrderedRound(requests, bids, prefix_lens, queue_order(root))
        return factored_allocation(root, requests, bids, prefix_lens, multipliers, self.request_work)

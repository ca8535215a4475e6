"""The queue tree kept across rounds on the compiled core (`auction_gym.core`): the tree, the
round's changes found and applied, what is read from it and the VCG payments of the rounds decided
over it run in C++ (csrc/round_tree.cpp, round_tree_checks.cpp, incremental_tree.cpp, factored.cpp,
payments.cpp).

`CompiledQueueTree.update` is one call into C++: the compiled tree holds the requests (by slot,
with what `IncrementalQueueTree.update` compares: bid, cached length, prompt), compares the bids
over the queue there and makes the reference's checks in its order, so a bad input raises what the
Python tree raises and leaves the tree as it was; orders come back as the requests themselves.
A round over the skeleton (`factored`) is a `FactoredAllocation` whose per-block lists cross to
Python only when something reads them (`FactoredAllocation.of_compiled`): a round reads its
admission order and, when it charges, its payments, which the compiled round computes itself.
The compiled tree makes the same operations in the same order as the Python one, so its orders,
stats, factored allocations and the payments read from them are the same bit for bit
(`tests/test_core_allocator.py`; its refusals of bad inputs: `tests/test_core_round.py`).
"""

from __future__ import annotations

from typing import Sequence

from .. import core
from ..policy import QueueDelta
from ..request import Request
from .factored import FactoredAllocation
from .incremental_tree import IncrementalQueueTree
from .validation import validate_requests


def queue_tree(request_work: float, costed: bool, cache_ties: bool) -> IncrementalQueueTree:
    """The queue tree of the core active now (`core.active`)."""
    if core.active() == "compiled":
        return CompiledQueueTree(request_work, costed, cache_ties)
    return IncrementalQueueTree(request_work, costed, cache_ties)


class CompiledQueueTree(IncrementalQueueTree):
    """`IncrementalQueueTree` with the tree held by the compiled core; the same arguments."""

    def __init__(self, request_work: float, costed: bool, cache_ties: bool = False) -> None:
        self.request_work = request_work
        self.costed = costed
        self.cache_ties = cache_ties
        self._tree = core.compiled_module().RoundTree(request_work, costed, cache_ties, validate_requests)
        # Called once a round by the allocator: the compiled tree's own methods, without a Python layer.
        self.market_round = self._tree.market_round
        """`update` by a `QueueDelta` and `factored` in one call, `market_round(requests, multipliers, delta,
        lens_of)`, with the round's bids (multipliers[bidder] x urgency) and cached lengths (of `lens_of`) read
        there, and the round's values made there as `RadixTreeAuction.admit` returns them: (its admission
        order, a new list; a `radix_auction.CompiledRound`, whose requests are a copy of the list `requests`
        made when the call began, whose allocation is a `FactoredAllocation` holding the compiled round,
        `_core.FactoredRound`, which holds the bids and cached lengths; the decision's `pricing` and the
        allocation's `request_work` left for the auction to set). None, with nothing changed, for inputs
        the compiled call does not take as they are (which the Python layers then check and refuse with
        their own errors); a bad input the call takes raises what `update` raises, `validate_requests`
        naming the culprit."""
        self.lone_round = self._tree.lone_round
        """A market's round of one request, `lone_round(requests, multipliers, lens_of)`, its bid and
        cached length (of `lens_of`) read in one call, when the checks of a lone round (`policy.round_bids`,
        `validate_requests`, `check_bids`) take its inputs as they are, and its values made there as
        `RadixTreeAuction.admit` returns them: (its order, a new list; a `radix_auction.LoneRound`
        holding the list `requests` and an `allocator.OrderedRound`, its `pricing` left for the auction
        to set). None, nothing raised, otherwise."""

    def update(
        self, requests: Sequence[Request], bids: Sequence[object], prefix_lens: Sequence[int] | None,
        delta: QueueDelta | None = None,
    ) -> None:
        bids = bids if type(bids) is list else list(bids)
        try:
            if delta is not None:
                self._follow(requests, bids, delta)
            else:
                self._tree.update(requests, bids, prefix_lens if self.costed else None)
        except (TypeError, ValueError):
            validate_requests(requests)  # names the culprit
            raise

    def _follow(self, requests: Sequence[Request], bids: list[object], delta: QueueDelta) -> None:
        self._tree.follow(requests, bids, delta.joined, delta.left, delta.rematched, delta.length_of)

    def order(self) -> list[Request]:
        return self._tree.order()

    def factored(
        self, requests: list[Request], bids: list[float], prefix_lens: list[int] | None, alpha: Sequence[float],
    ) -> FactoredAllocation:
        decided = self._tree.factored(list(alpha))
        return FactoredAllocation.of_compiled(requests, bids, prefix_lens, self.request_work, decided)

    def node_stats(self) -> list[tuple]:
        """(depth, S, P, tie, request ids attached) of every node below the root, sorted."""
        return sorted(self._tree.node_stats())

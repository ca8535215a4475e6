"""The queue tree kept across rounds on the compiled core (`auction_gym.core`): the tree, its
re-costing, what is read from it and the VCG payments of the rounds decided over it run in C++
(csrc/incremental_tree.cpp, factored.cpp, payments.cpp).

`CompiledQueueTree` finds a round's changes as `IncrementalQueueTree` finds them (its `update`,
inherited: passes over the queue that run in C) and hands them to the compiled tree in one call:
the requests that left, those that joined (id, bidder, tokens copied once, bid, cached length) and
those whose bid or cached length changed. Requests cross as slots, indices into a list of the
requests held that maps the orders handed back to `Request` objects in one pass. The compiled tree
makes the same operations in the same order as the Python one, so its orders, stats, factored
allocations and the payments read from them are the same bit for bit
(`tests/test_core_allocator.py`).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .. import core
from ..request import Request
from .factored import FactoredAllocation, Skeleton
from .incremental_tree import IncrementalQueueTree, RoundChanges

_ID_RANGE = 1 << 63
"""Request ids the compiled tree holds (int64); smith.TIE_SPAN's packing is exact below it anyway."""


def queue_tree(request_work: float, costed: bool, cache_ties: bool) -> IncrementalQueueTree:
    """The queue tree of the core active now (`core.active`)."""
    if core.active() == "compiled":
        return CompiledQueueTree(request_work, costed, cache_ties)
    return IncrementalQueueTree(request_work, costed, cache_ties)


class _Held:
    """What the Python side keeps of a request in the compiled tree: what `update` compares."""

    __slots__ = ("request", "source", "tokens", "rid", "bid", "cached", "reach", "node")

    def __init__(self, request: Request, source: np.ndarray | None, tokens: np.ndarray, bid: float, cached: int) -> None:
        self.request = request
        self.source = source
        """The request's `tokens` as given (None: writeable, so placed again every round, as `_Req`)."""
        self.tokens = tokens
        self.rid = request.id
        self.bid = bid
        self.cached = self.reach = cached
        self.node: int | None = None
        """Its slot in the compiled tree once placed (None before), where `_Req` holds its node."""


class CompiledQueueTree(IncrementalQueueTree):
    """`IncrementalQueueTree` with the tree held by the compiled core; the same arguments."""

    def __init__(self, request_work: float, costed: bool, cache_ties: bool = False) -> None:
        self.request_work = request_work
        self.costed = costed
        self.cache_ties = cache_ties
        self._tree = core.compiled_module().QueueTree(request_work, costed, cache_ties)
        self._entries: dict[Request, _Held] = {}
        self._by_rid: dict[int, _Held] = {}
        self._held: list[Request | None] = []
        """The request in each slot."""
        self._free: list[int] = []
        """Slots of requests that left, to be reused."""

    @staticmethod
    def _new_block(request: Request, tokens: np.ndarray, bid: float, cached: int) -> _Held:
        if not -_ID_RANGE <= request.id < _ID_RANGE:
            raise ValueError(f"request {request.id}: the compiled core holds request ids within int64")
        # A prompt that could change in place is placed again every round (as `_Req`'s); the compiled
        # tree copies the tokens when it places them, in the same `update`.
        return _Held(request, None if tokens.flags.writeable else request.tokens, tokens, bid, cached)

    def _place(self, gone: Iterable[Request], added: list[_Held], changes: RoundChanges) -> None:
        entries, by_rid, held, free = self._entries, self._by_rid, self._held, self._free
        left = []
        for r in gone:
            e = entries.pop(r)
            del by_rid[e.rid]
            changes.blocks.discard(e)
            left.append(e.node)
            held[e.node] = None
            free.append(e.node)
        for e in added:
            entries[e.request] = by_rid[e.rid] = e
            if free:
                e.node = free.pop()
                held[e.node] = e.request
            else:
                e.node = len(held)
                held.append(e.request)
        rebid = list(changes.blocks)
        self._tree.apply(
            left, [e.node for e in added], [e.rid for e in added], [e.request.bidder for e in added],
            [e.tokens for e in added], [e.bid for e in added], [e.cached for e in added],
            [e.node for e in rebid], [e.bid for e in rebid], [e.cached for e in rebid],
        )

    def order(self) -> list[Request]:
        return list(map(self._held.__getitem__, self._tree.order()))

    def factored(
        self, requests: list[Request], bids: list[float], prefix_lens: list[int] | None, alpha: Sequence[float],
    ) -> FactoredAllocation:
        decided = self._tree.factored(list(alpha))
        (parent, children, attached, edge_work, leaf_node, leaf_owner, s, p, f, tie, key, sorted_blocks, g, sum_f,
         leaf_order, admission) = decided.fields()
        return FactoredAllocation(
            requests=requests, bids=bids, prefix_lens=prefix_lens, request_work=self.request_work,
            tree=Skeleton(parent=parent, children=children, attached=attached, edge_work=edge_work,
                          leaf_node=leaf_node),
            leaf_owner=leaf_owner, s=s, p=p, f=f, tie=tie, key=key, sorted_blocks=sorted_blocks, g=g, sum_f=sum_f,
            leaf_order=leaf_order, admission=list(map(self._held.__getitem__, admission)), cost=f[0],
            compiled=decided,
        )

    def node_stats(self) -> list[tuple]:
        """(depth, S, P, tie, request ids attached) of every node below the root, sorted."""
        return sorted(self._tree.node_stats())

"""The radix-tree auction's allocation kept from round to round: work proportional to what changed.

A from-scratch build is O(n) Python steps per round over queues that can hold thousands of
requests of which a round admits a few. `IncrementalQueueTree` keeps the same tree across rounds
and applies only the round's changes (requests in and out, bids and cached prefixes changed),
re-costing only the nodes on a changed block's root path. Its order and stats equal the
from-scratch build's bit for bit (`tests/test_incremental_tree.py`). How and at what cost:
docs/economic-model.md section 3 ("The allocation kept across rounds").
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import chain, compress, count, repeat
from operator import attrgetter, is_, ne, or_
from typing import Iterable, Sequence

import numpy as np

from ..policy import QueueDelta
from ..request import Request
from .factored import FactoredAllocation, factored_allocation
from .queue_tree import common_prefix_len
from .smith import SortKey, block_key, tie_value
from .validation import validate_requests

_FLAT = attrgetter("flat")
_BID, _CACHED, _SOURCE, _REQUEST = map(attrgetter, ("bid", "cached", "source", "request"))
_TOKENS, _DEPTH = map(attrgetter, ("tokens", "depth"))


class QueueBlock:
    """What a node's sorted list holds of a block: its stats and the key it is listed under."""

    __slots__ = ("s", "p", "f", "tie", "key", "reach", "flat", "zero_flat", "listed", "owner")
    is_node = False

    def __init__(self) -> None:
        self.s = self.p = self.f = 0.0
        """Bid sum; work (completion units it adds to what is served after it); internal cost
        (sum of bid x completion inside the block, from its start)."""
        self.owner: int | None = None
        """The bidder of every request in the block; None when it holds more than one."""
        self.tie = 0
        """The least tie-break value of its requests (`smith.tie_value`): the smallest request id,
        or with cache ties the longest cached prefix, then the smallest id."""
        self.key: SortKey = (0, 0.0, 0)
        self.reach = 0
        """Largest cached length among its requests (tokens)."""
        self.flat: list[Request] = []
        """Its requests in depth-first Smith order (none kept at the root: `queue_order`)."""
        self.zero_flat: list[Request] | None = None
        """Its requests in the order they take when all their bids are 0 (factored.py's
        `zero_bid_order`; None until asked since the block last changed)."""
        self.listed: SortKey | None = None
        """The key it is listed under in its parent's sorted blocks (None: not listed)."""


class _Req(QueueBlock):
    """A waiting request's block: attached to `node`, ending there or hanging below it."""

    __slots__ = ("request", "source", "tokens", "rid", "bid", "cached", "node")

    def __init__(self, request: Request, tokens: np.ndarray, bid: float, cached: int) -> None:
        # QueueBlock's fields set here, not by its __init__: a block is made for every arrival, and
        # its stats are set when it is first costed (`_recompute`).
        self.s = self.p = self.f = 0.0
        self.tie, self.key, self.listed = request.id, (0, 0.0, 0), None
        self.request = request
        self.source = request.tokens
        """The request's `tokens` as given (to notice a replaced array)."""
        self.tokens = tokens
        """Read-only int64 tokens (`source` converted if needed)."""
        self.rid = request.id
        self.owner = request.bidder
        self.bid = bid
        self.cached = self.reach = cached
        """Longest cached prefix (tokens); 0 under "unit"."""
        self.node: QueueNode | None = None
        self.flat = self.zero_flat = [request]


class QueueNode(QueueBlock):
    """A node of the queue's tree: a prefix (`depth` tokens of `tokens`) shared by two or more
    blocks, with the blocks sorted by key."""

    __slots__ = ("depth", "tokens", "parent", "next", "ends", "alive", "blocks", "keys", "edge", "__weakref__")
    is_node = True

    def __init__(self, depth: int, tokens: np.ndarray, parent: QueueNode | None) -> None:
        super().__init__()
        self.depth = depth
        self.edge = 0.0
        """Uncached tokens on the edge into it (0 for the root and under "unit")."""
        self.tokens = tokens
        """An array whose first `depth` tokens are the node's prefix."""
        self.parent = parent
        self.next: dict[int, QueueNode | _Req] = {}
        """Child node or hanging request, by the token that follows the node's prefix."""
        self.ends: list[_Req] = []
        """Requests whose prompt is exactly the node's prefix."""
        self.alive = True
        self.blocks: list[QueueBlock] = []
        """Its blocks listed so far, by key (Smith order)."""
        self.keys: list[SortKey] = []
        """Their keys."""

    def list_block(self, b: QueueBlock) -> None:
        i = bisect_left(self.keys, b.key)
        self.keys.insert(i, b.key)
        self.blocks.insert(i, b)
        b.listed = b.key

    def unlist_block(self, b: QueueBlock) -> None:
        i = bisect_left(self.keys, b.listed)
        if self.blocks[i] is not b:
            raise AssertionError("a block listed under another key")
        del self.keys[i], self.blocks[i]
        b.listed = None


class RoundChanges:
    """What one round's updates touched: requests to re-cost and nodes to recompute."""

    __slots__ = ("blocks", "nodes")

    def __init__(self) -> None:
        self.blocks: set[_Req] = set()
        self.nodes: set[QueueNode] = set()


class IncrementalQueueTree:
    """The queue's radix tree and its welfare-maximal depth-first order, updated round to round.

    Args:
        request_work: completion units per request (the auction's `request_work`).
        costed: False under "unit" (no edge work; cached lengths ignored).
        cache_ties: blocks whose keys tie go by longest cached prefix, then smallest id
            (`smith.tie_value`); else by smallest id.
    """

    def __init__(self, request_work: float, costed: bool, cache_ties: bool = False) -> None:
        self.request_work = request_work
        self.costed = costed
        self.cache_ties = cache_ties
        self._root = QueueNode(0, np.empty(0, dtype=np.int64), None)
        self._entries: dict[Request, _Req] = {}  # request (hashed by identity) -> its block
        self._by_rid: dict[int, _Req] = {}  # request id -> its block

    def __del__(self) -> None:
        # Nodes and their blocks link both ways (`parent`, `node`), so a dropped tree would wait for
        # the cyclic garbage collector (see RadixCache.__del__); unlinked, it goes with its auction.
        stack = [self._root] if hasattr(self, "_root") else []  # absent if __init__ raised
        while stack:
            v = stack.pop()
            for b in [*v.next.values(), *v.ends]:
                if b.is_node:
                    stack.append(b)
                else:
                    b.node = None
            v.parent, v.next, v.ends, v.blocks = None, {}, [], []

    def update(
        self, requests: Sequence[Request], bids: Sequence[object], prefix_lens: Sequence[int] | None,
        delta: QueueDelta | None = None,
    ) -> QueueNode:
        """Bring the tree to this round's queue and return its root. `requests` is the queue
        (non-empty), `bids` the requests' bids as read this round, `prefix_lens` their cached
        prefix lengths in tokens (ignored when not `costed`). Raises ValueError as
        `validate_requests` does. `queue_order(root)` is then the from-scratch allocation's order.

        The difference from the last round is found in passes that run in C (maps, set
        operations, list comparisons); Python steps are spent per changed request only. With
        `delta`, how `requests` differ from the queue of the last update and their cached lengths
        (the round's `WaitingRound.changes`, the caller's guarantee), only the bids are
        compared over the queue (a caller may change any of them in any round); a waiting
        request's prompt is then taken to stay as it joined, as the engine's prefix matching
        takes it."""
        if delta is not None:
            return self._follow(requests, bids, delta)
        entries = self._entries
        # Lists as given (the auction passes lists) are read, not copied: a pass over the queue saved.
        bids = bids if type(bids) is list else list(bids)
        if not self.costed:
            lens = [0] * len(requests)
        else:
            lens = prefix_lens if type(prefix_lens) is list else list(prefix_lens)
        n = len(requests)
        present = set(requests)
        try:
            if len(present) != n:
                raise ValueError("the same request twice in the queue")
            new = present - entries.keys() if len(entries) != n or None in map(entries.get, requests) else set()
            gone = entries.keys() - present if len(entries) + len(new) != n else set()
            added = []
            if new:
                mask = list(map(new.__contains__, requests))
                added = self._fresh_blocks(list(compress(requests, mask)), compress(bids, mask), compress(lens, mask), gone)
            entries.update(zip(map(_REQUEST, added), added))
            known = list(map(entries.__getitem__, requests))
            try:
                stale = self._stale(known, requests)
                changed = self._changed(known, bids, lens)
            except ValueError:
                for e in added:
                    del entries[e.request]
                raise
        except (TypeError, ValueError):
            validate_requests(requests)  # names the culprit
            raise
        changes = RoundChanges()
        for e, b, c in changed:
            e.bid, e.cached, e.reach = b, c, c
            changes.blocks.add(e)
        for e in stale:  # its prompt or id was replaced (or may change in place): place it again
            gone.add(e.request)
            added.append(self._new_block(e.request, validate_requests([e.request])[0][0], e.bid, e.cached))
        return self._place(gone, added, changes)

    def _place(self, gone: Iterable[Request], added: list[_Req], changes: RoundChanges) -> QueueNode:
        """Remove the blocks of the requests `gone`, insert the blocks `added`, and recompute what
        `changes` (the round's re-costed blocks, to which both add) touched; returns the root."""
        entries = self._entries
        for r in gone:
            self._remove(entries.pop(r), changes)
        for e in added:
            entries[e.request] = e
            self._insert(e, changes)
        self._recompute(changes)
        return self._root

    @staticmethod
    def _stale(known: list[_Req], requests: Sequence[Request]) -> list[_Req]:
        """The blocks whose request's `tokens` array is no longer the one the block was made from.
        (A request's id is read once, when it joins: the engine keys its records by it.)"""
        if all(map(is_, map(_SOURCE, known), map(_TOKENS, requests))):  # one pass in C
            return []
        return [e for e, r in zip(known, requests) if e.node is not None and e.source is not r.tokens]

    @staticmethod
    def _changed(known: list[_Req], bids: list[object], lens: list[int]) -> list[tuple[_Req, float, int]]:
        """(block, bid, cached length) of the blocks whose bid or cached length changed;
        ValueError on a bad bid."""
        old_bids, old_lens = list(map(_BID, known)), list(map(_CACHED, known))
        if old_bids == bids and old_lens == lens:
            return []
        at = compress(count(), map(or_, map(ne, old_bids, bids), map(ne, old_lens, lens)))
        return [(known[i], _checked_bid(bids[i], known[i].rid), lens[i]) for i in at]

    def _follow(self, requests: Sequence[Request], bids: Sequence[object], delta: QueueDelta) -> QueueNode:
        """`update` with `delta`: checks and builds everything first, so a bad bid or prompt
        leaves the tree as it was."""
        entries = self._entries
        bids = bids if type(bids) is list else list(bids)
        if not all(map(entries.__contains__, delta.left)):
            raise AssertionError("a request reported as left is not in the tree")
        if len(entries) - len(delta.left) + len(delta.joined) != len(requests):
            raise AssertionError("the queue's changes do not lead from the tree's queue to this one")
        known = list(map(entries.get, requests))  # None: joined
        added: list[_Req] = []
        try:
            if delta.joined:
                at = list(compress(count(), map(is_, known, repeat(None))))
                fresh = [requests[i] for i in at]
                if set(fresh) != set(delta.joined):
                    raise AssertionError("the requests reported as joined are not the queue's new ones")
                lens = list(map(delta.length_of.__getitem__, fresh)) if self.costed else [0] * len(fresh)
                added = self._fresh_blocks(fresh, [bids[i] for i in at], lens, set(delta.left))
                for i, e in zip(at, added):
                    known[i] = e
            rebid = self._changed_bids(known, bids)
        except (TypeError, ValueError):
            validate_requests(requests)  # names the culprit
            raise
        changes = RoundChanges()
        for e, b in rebid:
            e.bid = b
            changes.blocks.add(e)
        if self.costed:
            length_of = delta.length_of
            for r in delta.rematched:
                e, c = entries[r], length_of[r]
                if c != e.cached:
                    e.cached = e.reach = c
                    changes.blocks.add(e)
        return self._place(delta.left, added, changes)

    @staticmethod
    def _changed_bids(known: list[_Req], bids: list[object]) -> list[tuple[_Req, float]]:
        """(block, bid) of the blocks whose bid changed; ValueError on a bad bid."""
        old_bids = list(map(_BID, known))
        if old_bids == bids:
            return []
        return [(known[i], _checked_bid(bids[i], known[i].rid)) for i in compress(count(), map(ne, old_bids, bids))]

    def _fresh_blocks(self, fresh: list[Request], bids: Iterable[object], lens: Iterable[int], gone: set[Request]) -> list[_Req]:
        """Blocks for the requests `fresh` (new to the tree) with their `bids` and cached `lens`;
        ValueError on a bad bid or prompt or a repeated request id (against each other and the
        requests that stay, those not `gone`)."""
        tokens, _ = validate_requests(fresh)
        added = []
        for r, t, b, c in zip(fresh, tokens, bids, lens):
            holder = self._by_rid.get(r.id)
            if holder is not None and holder.request not in gone:
                raise ValueError(f"request {r.id}: duplicate request id in the queue")
            added.append(self._new_block(r, t, _checked_bid(b, r.id), c))
        return added

    @staticmethod
    def _new_block(request: Request, tokens: np.ndarray, bid: float, cached: int) -> _Req:
        """The block of a request joining the tree."""
        return _block(request, tokens, bid, cached)

    def order(self) -> list[Request]:
        """The queue of the last `update` in the depth-first Smith order (a new list)."""
        return queue_order(self._root)

    def factored(
        self, requests: list[Request], bids: list[float], prefix_lens: list[int] | None, alpha: Sequence[float],
    ) -> FactoredAllocation:
        """The round over the skeleton of the tree brought to `requests` with their urgencies as bids
        (`factored.factored_allocation`); `bids` are alpha[bidder] x urgency, `alpha` one per bidder."""
        return factored_allocation(self._root, requests, bids, prefix_lens, alpha, self.request_work)

    def node_stats(self) -> list[tuple]:
        """(depth, S, P, tie, ids of the requests attached) of every node below the root, sorted:
        what a tree built from scratch is compared on."""
        out, stack = [], list(self._root.next.values())
        while stack:
            v = stack.pop()
            if v.is_node:
                attached = sorted(b.rid for b in [*v.next.values(), *v.ends] if not b.is_node)
                out.append((v.depth, v.s, v.p, v.tie, attached))
                stack += v.next.values()
        return sorted(out)

    def _insert(self, e: _Req, changes: RoundChanges) -> None:
        """Attach `e` at the deepest node its prompt passes through, splitting the edge or pairing
        it with the hanging request it shares a longer prefix with."""
        self._by_rid[e.rid] = e
        t, n = e.tokens, len(e.tokens)
        v = self._root
        while True:
            d = v.depth
            b = None if n == d else v.next.get(int(t[d]))
            if b is None:
                _attach(e, v, changes)
                return
            other = b.tokens[:b.depth] if b.is_node else b.tokens
            shared = d + common_prefix_len(t[d:], other[d:])
            if b.is_node and shared == b.depth:
                v = b
                continue
            u = QueueNode(shared, t, v)  # the shared prefix ends inside b's edge
            v.next[int(t[d])] = u
            if b.listed is not None:
                v.unlist_block(b)
            if b.is_node:
                b.parent = u
                u.next[int(b.tokens[shared])] = b
                changes.nodes.add(b)
            else:
                _attach(b, u, changes)
            _attach(e, u, changes)
            return

    def _remove(self, e: _Req, changes: RoundChanges) -> None:
        """Detach `e`; a node other than the root left with one block hands it to its parent."""
        del self._by_rid[e.rid]
        changes.blocks.discard(e)
        v = e.node
        if len(e.tokens) == v.depth:
            v.ends.remove(e)
        else:
            del v.next[int(e.tokens[v.depth])]
        if e.listed is not None:
            v.unlist_block(e)
        changes.nodes.add(v)
        up = v.parent
        if up is None or len(v.ends) + len(v.next) > 1:
            return
        (last,) = v.ends or v.next.values()
        up.next[int(v.tokens[up.depth])] = last
        v.alive = False
        if v.listed is not None:
            up.unlist_block(v)
        last.listed = None  # listed in `up` when recomputed (which is marked as its parent)
        if last.is_node:
            last.parent = up
            changes.nodes.add(last)
        else:
            last.node = up  # now hanging below `up`: re-costed there
            changes.blocks.add(last)

    def _recompute(self, changes: RoundChanges) -> None:
        """Re-cost the changed requests' blocks, then the marked nodes and their ancestors,
        children before parents, as `RadixTreeAuction._allocate_tree` computes them (and in the
        same order of additions, so to the same floats), each block listed in its parent under
        its new key."""
        overhead, costed, cache_ties = self.request_work, self.costed, self.cache_ties
        marked = changes.nodes
        for e in changes.blocks:
            v, n, b = e.node, len(e.tokens), e.bid
            lo = v.depth if v.depth > e.cached else e.cached
            w = float(n - lo) if costed and n > lo else 0.0
            e.s, e.p, e.f = b, w + overhead, w * b + b * overhead
            e.tie = tie = tie_value(e.rid, e.cached, cache_ties)
            e.key = block_key(b, e.p, tie)
            _relist(e, v)
            marked.add(v)
        path: set[QueueNode] = set()
        for v in marked:
            while v is not None and v.alive and v not in path:
                path.add(v)
                v = v.parent
        for v in sorted(path, key=_DEPTH, reverse=True):
            _restat(v, costed)


def queue_order(root: QueueNode) -> list[Request]:
    """The queue in the depth-first Smith order of the tree whose root is `root` (a new list)."""
    return list(chain.from_iterable(map(_FLAT, root.blocks)))


def _restat(v: QueueNode, costed: bool) -> None:
    """Recompute node `v` from its blocks (in Smith order) and list it in its parent: S, P, F, tie,
    reach, owner and order (the root: nothing, it is in no block). The sums are
    `smith.tree_stats`'s, in its order of additions, so to its floats. One pass in Python: faster
    here than a pass in C per statistic, whose calls cost more than the work at a node of a few
    blocks (and still about twice the loop at 300 blocks)."""
    blocks = v.blocks
    up = v.parent
    if up is None:
        return
    first = blocks[0]
    owner, tie, reach = first.owner, first.tie, 0
    work = bid_sum = inter = internal = 0.0
    for b in blocks:
        s = b.s
        inter += s * work
        work += b.p
        bid_sum += s
        internal += b.f
        if b.reach > reach:
            reach = b.reach
        if b.tie < tie:
            tie = b.tie
        if b.owner != owner:  # None (more than one bidder) from then on
            owner = None
    v.owner = owner
    v.flat = list(chain.from_iterable(map(_FLAT, blocks)))
    v.zero_flat = None
    v.reach = reach
    lo = up.depth if up.depth > reach else reach
    v.edge = e = float(v.depth - lo) if costed and v.depth > lo else 0.0
    v.s, v.p, v.f, v.tie = bid_sum, e + work, e * bid_sum + internal + inter, tie
    v.key = block_key(bid_sum, v.p, tie)
    _relist(v, up)


def _block(request: Request, tokens: np.ndarray, bid: float, cached: int) -> _Req:
    """A new block; a prompt that could change in place is copied, and placed again every round."""
    if not tokens.flags.writeable:
        return _Req(request, tokens, bid, cached)
    frozen = tokens.copy()
    frozen.flags.writeable = False
    e = _Req(request, frozen, bid, cached)
    e.source = None
    return e


def _checked_bid(bid: object, rid: int) -> float:
    """`bid` as a float; ValueError unless it is finite and >= 0."""
    b = float(bid)
    if not 0.0 <= b < math.inf:
        raise ValueError(f"request {rid}: bid must be finite and >= 0, got {bid!r}")
    return b


def _attach(e: _Req, v: QueueNode, changes: RoundChanges) -> None:
    """Attach request `e` to node `v` (ending there or hanging below), to be re-costed."""
    e.node = v
    if len(e.tokens) == v.depth:
        v.ends.append(e)
    else:
        v.next[int(e.tokens[v.depth])] = e
    changes.blocks.add(e)


def _relist(b: QueueBlock, parent: QueueNode) -> None:
    """List `b` in `parent`'s sorted blocks under its current key."""
    if b.listed != b.key:
        if b.listed is not None:
            parent.unlist_block(b)
        parent.list_block(b)

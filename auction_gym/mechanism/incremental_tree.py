"""The radix-tree auction's allocation kept from round to round: work proportional to what changed.

`build_queue_tree` and `RadixTreeAuction._allocate_tree` rebuild the queue's tree, re-sort every
node's blocks and walk the whole order at every admission round: O(n) Python steps per round over a
queue that, with one replica overloaded (the Mooncake trace at time scale 1), holds thousands of
requests of which a round admits a few. `IncrementalQueueTree` keeps the same tree as objects
across rounds and updates it from the difference between this round's queue and the last:

- a new request is inserted (splitting the edge or the hanging request it shares a prefix with),
  an admitted one removed (a node left with one block is spliced out, as the from-scratch build
  would never make it);
- a request whose bid or cached prefix length changed gets its block re-costed;
- every node on a changed block's root path is marked, and only the marked nodes re-sort their
  blocks and recompute their (S, P, F), their tie and their depth-first order (`flat`), children
  before parents; the others keep theirs.

The result is the same allocation as the from-scratch build, bit for bit: a node's stats are a
function of its blocks' stats in Smith order, whose keys are unique (ties broken by the smallest
request id in the block), so recomputing the marked nodes in the same way gives the same floats;
the tree itself (nodes at the longest common prefixes of neighbours in sorted order, a request at
the deepest node on its path, hanging below it when it shares nothing beyond) is a function of the
set of prompts. What is still O(n) per round, in tight loops: reading the queue to find what
changed, and writing the order out as positions. Payments are not computed here: the caller builds
the from-scratch allocation when a round is priced (see `RadixTreeAuction`).

Cost per round: O(n) for the difference, plus O(sum over marked nodes of d_v log d_v + the size of
their subtree's order list, copied in C), plus O(depth) per inserted or removed request.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Sequence

import numpy as np

from ..request import Request
from .queue_tree import _lcp
from .smith import SortKey, block_key
from .validation import validate_requests

_KEY = attrgetter("key")


class _Req:
    """A waiting request's block: attached to `node`, ending there or hanging below it."""

    __slots__ = ("request", "source", "tokens", "rid", "bid", "cached", "node", "pos", "seen",
                 "s", "p", "f", "tie", "key")
    is_node = False

    def __init__(self, request: Request, tokens: np.ndarray, bid: float, cached: int) -> None:
        self.request = request  # held, so its id() is not reused while it is in the tree
        self.source = request.tokens
        """The request's `tokens` as given (to notice a replaced array)."""
        self.tokens = tokens
        """Read-only int64 tokens (`source` converted if needed)."""
        self.rid = request.id
        self.bid = bid
        self.cached = cached
        """Longest cached prefix (tokens); 0 under "unit"."""
        self.node: _Node | None = None
        self.pos = 0
        """Position in the last round's queue."""
        self.seen = 0
        """The last round that read it."""
        self.s = self.p = self.f = 0.0
        self.tie = request.id
        self.key: SortKey = (0, 0.0, 0)


class _Node:
    """A node of the queue's tree: a prefix (`depth` tokens of `tokens`) shared by two or more blocks."""

    __slots__ = ("depth", "tokens", "parent", "next", "ends", "alive", "reach",
                 "s", "p", "f", "tie", "key", "flat")
    is_node = True

    def __init__(self, depth: int, tokens: np.ndarray, parent: _Node | None) -> None:
        self.depth = depth
        self.tokens = tokens
        """An array whose first `depth` tokens are the node's prefix."""
        self.parent = parent
        self.next: dict[int, _Node | _Req] = {}
        """Child node or hanging request, by the token that follows the node's prefix."""
        self.ends: list[_Req] = []
        """Requests whose prompt is exactly the node's prefix."""
        self.alive = True
        self.reach = 0
        """Largest cached length among the requests below (tokens)."""
        self.s = self.p = self.f = 0.0
        self.tie = 0
        self.key: SortKey = (0, 0.0, 0)
        self.flat: list[_Req] = []
        """The subtree's requests in depth-first Smith order."""


class IncrementalQueueTree:
    """The queue's radix tree and its welfare-maximal depth-first order, updated round to round.

    Args:
        request_work: completion units per request (the auction's `request_work`).
        costed: False under "unit" (no edge work; cached lengths ignored).
    """

    def __init__(self, request_work: float, costed: bool) -> None:
        self.request_work = request_work
        self.costed = costed
        self._root = _Node(0, np.empty(0, dtype=np.int64), None)
        self._entries: dict[int, _Req] = {}  # id(request) -> its block
        self._round = 0

    def order(self, requests: Sequence[Request], bids: Sequence[object], prefix_lens: Sequence[int] | None) -> list[int]:
        """Positions in `requests` (non-empty) in the welfare-maximal depth-first order: the
        from-scratch allocation's `order`. `bids` are the requests' bids as read this round,
        `prefix_lens` their cached prefix lengths in tokens (ignored when not `costed`). Raises
        ValueError as `validate_requests` does, before changing the tree."""
        self._round += 1
        stamp, entries = self._round, self._entries
        lens = prefix_lens if self.costed else [0] * len(requests)
        fresh: list[int] = []
        changed: list[tuple[_Req, float, int]] = []
        try:
            for i, r in enumerate(requests):
                e = entries.get(id(r))
                if e is None or e.source is not r.tokens or e.rid != r.id:
                    fresh.append(i)
                    continue
                if e.seen == stamp:  # the same request twice
                    raise ValueError
                e.seen, e.pos = stamp, i
                b, c = bids[i], lens[i]
                if b != e.bid or c != e.cached:
                    b = float(b)
                    if not 0.0 <= b < math.inf:
                        raise ValueError
                    changed.append((e, b, c))
            added = self._fresh_blocks(requests, fresh, bids, lens)
        except (TypeError, ValueError):
            validate_requests(requests)  # names the culprit
            raise
        changes = _Changes()
        if fresh or len(entries) != len(requests):
            for key in [k for k, e in entries.items() if e.seen != stamp]:
                self._remove(entries.pop(key), changes)
        for e, b, c in changed:
            e.bid, e.cached = b, c
            changes.blocks.add(e)
        for e in added:
            entries[id(e.request)] = e
            self._insert(e, changes)
        self._recompute(changes)
        return [e.pos for e in self._root.flat]

    def _fresh_blocks(
        self, requests: Sequence[Request], fresh: list[int], bids: Sequence[object], lens: Sequence[int]
    ) -> list[_Req]:
        """Blocks for the requests new to the tree; ValueError on a bad bid or prompt or a repeated id."""
        if not fresh:
            return []
        new = [requests[i] for i in fresh]
        tokens, _ = validate_requests(new)
        ids = {e.rid for e in self._entries.values() if e.seen == self._round}
        added = []
        for i, r, t in zip(fresh, new, tokens):
            b = float(bids[i])
            if r.id in ids or not 0.0 <= b < math.inf:
                raise ValueError
            ids.add(r.id)
            e = _Req(r, t, b, lens[i])
            if t.flags.writeable:  # could change in place: read it again next round
                e.source = None
            e.seen, e.pos = self._round, i
            added.append(e)
        return added

    def _insert(self, e: _Req, changes: _Changes) -> None:
        """Attach `e` at the deepest node its prompt passes through, splitting the edge or pairing
        it with the hanging request it shares a longer prefix with."""
        t, n = e.tokens, len(e.tokens)
        v = self._root
        while True:
            d = v.depth
            b = None if n == d else v.next.get(int(t[d]))
            if b is None:
                self._attach(e, v, changes)
                return
            other = b.tokens[:b.depth] if b.is_node else b.tokens
            shared = d + _lcp(t[d:], other[d:])
            if b.is_node and shared == b.depth:
                v = b
                continue
            u = _Node(shared, t, v)  # the shared prefix ends inside b's edge
            v.next[int(t[d])] = u
            if b.is_node:
                b.parent = u
                u.next[int(b.tokens[shared])] = b
                changes.nodes.add(b)
            else:
                self._attach(b, u, changes)
            self._attach(e, u, changes)
            return

    @staticmethod
    def _attach(e: _Req, v: _Node, changes: _Changes) -> None:
        e.node = v
        if len(e.tokens) == v.depth:
            v.ends.append(e)
        else:
            v.next[int(e.tokens[v.depth])] = e
        changes.blocks.add(e)

    @staticmethod
    def _remove(e: _Req, changes: _Changes) -> None:
        """Detach `e`; a node other than the root left with one block hands it to its parent."""
        v = e.node
        if len(e.tokens) == v.depth:
            v.ends.remove(e)
        else:
            del v.next[int(e.tokens[v.depth])]
        changes.nodes.add(v)
        up = v.parent
        if up is None or len(v.ends) + len(v.next) > 1:
            return
        (last,) = v.ends or v.next.values()
        up.next[int(v.tokens[up.depth])] = last
        v.alive = False
        changes.nodes.add(up)
        if last.is_node:
            last.parent = up
            changes.nodes.add(last)
        else:
            last.node = up  # now hanging below `up`: re-costed there
            changes.blocks.add(last)

    def _recompute(self, changes: _Changes) -> None:
        """Re-cost the changed requests' blocks, then the marked nodes and their ancestors,
        children before parents, exactly as `RadixTreeAuction._allocate_tree` computes them."""
        overhead, costed = self.request_work, self.costed
        marked = changes.nodes
        for e in changes.blocks:
            n, b = len(e.tokens), e.bid
            lo = e.node.depth if e.node.depth > e.cached else e.cached
            w = float(n - lo) if costed and n > lo else 0.0
            own = w + overhead
            e.s, e.p, e.f, e.tie = b, own, w * b + b * overhead, e.rid
            e.key = block_key(b, own, e.rid)
            marked.add(e.node)
        path: set[_Node] = set()
        for v in marked:
            while v is not None and v.alive and v not in path:
                path.add(v)
                v = v.parent
        for v in sorted(path, key=attrgetter("depth"), reverse=True):
            self._recompute_node(v, costed)

    @staticmethod
    def _recompute_node(v: _Node, costed: bool) -> None:
        blocks = [*v.next.values(), *v.ends]
        blocks.sort(key=_KEY)
        work = inter = bid_sum = internal = 0.0
        reach = 0
        flat: list[_Req] = []
        for b in blocks:
            sb = b.s
            inter += sb * work
            work += b.p
            bid_sum += sb
            internal += b.f
            if b.is_node:
                flat += b.flat
                if b.reach > reach:
                    reach = b.reach
            else:
                flat.append(b)
                if b.cached > reach:
                    reach = b.cached
        e = 0.0
        if costed and v.parent is not None:
            lo = v.parent.depth if v.parent.depth > reach else reach
            e = float(v.depth - lo) if v.depth > lo else 0.0
        v.reach, v.flat = reach, flat
        v.s, v.p, v.f = bid_sum, e + work, e * bid_sum + internal + inter
        v.tie = min([b.tie for b in blocks])
        v.key = block_key(v.s, v.p, v.tie)


class _Changes:
    """What one round's updates touched: blocks of requests to re-cost and nodes to recompute."""

    __slots__ = ("blocks", "nodes")

    def __init__(self) -> None:
        self.blocks: set[_Req] = set()
        self.nodes: set[_Node] = set()

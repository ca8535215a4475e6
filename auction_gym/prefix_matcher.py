"""Longest cached prefix of every waiting request, kept up to date from round to round.

Cache-aware policies need each waiting request's cached prefix at every admission round. Matching
the whole queue from the root each round costs O(queue x path length) and dominates a saturated
replay. Here a request is re-matched only when the cache logged a change where its previous match
ended (`RadixCache.changes_since`): its end node X was evicted, or X's child on the request's path
(the child key the request follows out of X) appeared, went or split. A change elsewhere under X,
say a new conversation under a prefix every request shares, does not touch it. A re-match resumes
from X (or its closest surviving ancestor), not from the root.

Matching does not refresh LRU times (`RadixCache.peek`; a split made by `split=True` gives both halves
the clock's current time): ordering the queue is not serving it. SGLang's `lpm` and `dfs-weight`
match with `match_prefix`, which does, so there the waiting requests' prefixes are kept warm by the
ordering itself; here that is one rule for every policy, `waiting_prefixes.WaitingPrefixes` (itself built on
a matcher), so policies are compared under one eviction rule.
"""

from __future__ import annotations

from abc import ABCMeta
from operator import attrgetter
from typing import Sequence

from . import core
from .radix_cache import RadixCache, TreeNode
from .request import Request, fcfs_key

_id = attrgetter("id")
Key = int | bytes | None


class PrefixMatcher(core.EitherCore, metaclass=ABCMeta):
    """Per-request (cached prefix length, cache node), incrementally.

    Constructed on the compiled core (`auction_gym.core.active()`), `PrefixMatcher(...)` returns
    the compiled matcher, `auction_gym._core.PrefixMatcher` (an instance of this class as
    `isinstance` sees it), which reads the compiled cache only (TypeError for another).

    Requests are identified by id while they wait (the engine keeps ids unique; a different object
    under a known id is matched afresh); `requests` maps the ids of the last queue to their requests. After `update`, `dropped` lists the ids whose
    previous result no longer holds (gone, or re-matched) and `added` the ids matched this round
    (new, or re-matched), so a policy can maintain its order incrementally too.

    Args:
        split: split a partially matched edge so each request's node is where its match ends
            (`RadixCache.peek`); without it the node is the deepest one matched in full.
        whole_prompt: match the whole prompt (`RadixCache.prefix_len(r.tokens)`, the auctions'
            cached set) instead of all but its last token (what the engine can reuse).
    """

    def __new__(cls, split: bool = False, whole_prompt: bool = False) -> PrefixMatcher:
        if cls is PrefixMatcher and core.active() == "compiled":
            return core.compiled_module().PrefixMatcher(split, whole_prompt)
        return super().__new__(cls)

    def __init__(self, split: bool = False, whole_prompt: bool = False) -> None:
        self.split = split
        self.whole_prompt = whole_prompt
        self._cache: RadixCache | None = None
        self._cursor: tuple[int, int] | None = None
        self._match: dict[int, tuple[int, TreeNode]] = {}
        self._objs: set[Request] = set()  # the last queue's requests
        self._next: dict[int, Key] = {}
        # end node -> child key the request follows out of it -> ids
        self._hanging: dict[TreeNode, dict[Key, set[int]]] = {}
        self.requests: dict[int, Request] = {}
        self.length_of: dict[Request, int] = {}
        """Each waiting request's matched length (tokens), by the request itself: read in one map
        over a queue of thousands, without its ids."""
        self.dropped: list[int] = []
        self.added: list[int] = []
        self.splits: dict[int, TreeNode] = {}
        """Request id -> the lower half of the edge its match split in the last `update` (with `split`)."""
        self.joined: list[Request] = []
        """The requests matched for the first time in the last `update` (new to the queue)."""
        self.left: set[Request] = set()
        """The requests of the queue before the last `update` that are not in it."""
        self.rematched: list[Request] = []
        """The requests of both queues matched again in the last `update` (their length may differ)."""

    def update(
        self, queue: Sequence[Request], cache: RadixCache, changes: tuple[list[Request], set[Request]] | None = None,
    ) -> dict[int, tuple[int, TreeNode]]:
        """Match every request of `queue` against `cache`; returns request id -> (length, node).

        A request matches at most prompt - 1 tokens (the engine always computes the last one),
        unless `whole_prompt`. `changes`, when given, is (joined, left): how `queue` differs from
        the queue of the last update (`WaitingQueue.take_changes`), the caller's guarantee, which
        saves comparing the two; a waiting request's prompt is taken to stay as it joined.
        """
        if cache is not self._cache:
            self._cache, self._cursor = cache, None
        self._cursor, changed = cache.changes_since(self._cursor)
        self.splits = {}
        # By object, not id: a request that replaced another under the same id is then simply one
        # gone and one new. Without `changes` the diff is two set differences, the only work here
        # proportional to the queue.
        if changes is None:
            objs = set(queue)
            left, joined = self._objs - objs, objs - self._objs
            self._objs = objs
        else:
            joined, left = changes
            self._objs -= left
            self._objs.update(joined)
        gone = set(map(_id, left))
        fresh = sorted(joined, key=fcfs_key)  # sorted: splits and ties deterministic
        # Ids in ascending order, not a set's: the order of re-matches decides which request's
        # split makes which node, and the order of unmarks the cache's heap entries.
        stale = sorted(set(self._match) - gone if changed is None else self._affected(changed) - gone)
        self.dropped = sorted(gone.union(stale))
        starts = {rid: self._forget(rid) for rid in self.dropped}
        for rid in gone:
            del self.requests[rid]
        for rid in stale:
            self._peek(self.requests[rid], cache, start=starts[rid] if changed is not None else None)
        self.joined, self.left, self.rematched = [], left, [self.requests[rid] for rid in stale]
        self.added = stale
        for r in fresh:
            if r.id in self._match:
                # A second object under an id that still waits (a caller's error, which the engine
                # and the auctions' checks reject): ignored until the first one leaves.
                self._objs.discard(r)
                continue
            self.requests[r.id] = r
            self._peek(r, cache, start=None)
            self.added.append(r.id)
            self.joined.append(r)
        return self._match

    def _affected(self, changed: list[tuple[TreeNode, Key]]) -> set[int]:
        out: set[int] = set()
        for node, key in changed:
            by_key = self._hanging.get(node)
            if by_key is None:
                continue
            if key is None:
                for rids in by_key.values():
                    out |= rids
            elif key in by_key:
                out |= by_key[key]
        return out

    def _peek(self, r: Request, cache: RadixCache, start: TreeNode | None) -> None:
        tokens = r.tokens if self.whole_prompt else r.tokens[:-1]
        nodes = cache.node_count  # a peek adds nodes only by splitting
        length, node = cache.peek(tokens, start=start, split=self.split)
        if cache.node_count != nodes:  # the walk split an edge (at most one): node is the upper half
            (self.splits[r.id],) = node.children.values()
        key = cache.edge_key(tokens, node.depth)
        self._match[r.id] = (length, node)
        self.length_of[r] = length
        self._next[r.id] = key
        # setdefault, not nested defaultdicts: no Python factory call per new node
        self._hanging.setdefault(node, {}).setdefault(key, set()).add(r.id)

    def _forget(self, rid: int) -> TreeNode:
        node = self._match.pop(rid)[1]
        del self.length_of[self.requests[rid]]
        key = self._next.pop(rid)
        by_key = self._hanging[node]
        by_key[key].discard(rid)
        if not by_key[key]:
            del by_key[key]
            if not by_key:
                del self._hanging[node]
        return node


if (_compiled := core.compiled_module()) is not None:
    PrefixMatcher.register(_compiled.PrefixMatcher)

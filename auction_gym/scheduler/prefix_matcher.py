"""Longest cached prefix of every waiting request, kept up to date from round to round.

Cache-aware policies need each waiting request's cached prefix at every admission round. Matching
the whole queue from the root each round costs O(queue x path length) and dominates a saturated
replay; here a request is re-matched only when the cache logged a change at the node its previous
match ended on (`RadixCache.changes_since`), and then from that node, not from the root.

Matching does not refresh LRU times (`RadixCache.peek`): ordering the queue is not serving it. SGLang's
`lpm` and `dfs-weight` match with `match_prefix`, which does, so there the waiting requests' prefixes
are also kept warm; here only serving a request (admission) refreshes its prefix, under every
policy alike, so policies are compared under one eviction rule.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ..radix_cache import RadixCache, TreeNode
from ..request import Request


class PrefixMatcher:
    """Per-request (cached prefix length, cache node), incrementally.

    Args:
        split: split a partially matched edge so each request's node is where its match ends
            (`RadixCache.peek`); without it the node is the deepest one matched in full.
    """

    def __init__(self, split: bool = False) -> None:
        self.split = split
        self._cache: RadixCache | None = None
        self._cursor: tuple[int, int] | None = None
        self._match: dict[int, tuple[int, TreeNode]] = {}
        self._request: dict[int, Request] = {}
        self._hanging: dict[TreeNode, set[int]] = defaultdict(set)

    def update(self, queue: Sequence[Request], cache: RadixCache) -> dict[int, tuple[int, TreeNode]]:
        """Match every request of `queue` against `cache`; returns request id -> (length, node).

        A request matches at most prompt - 1 tokens: the engine always computes the last one.
        """
        if cache is not self._cache:
            self._cache, self._cursor = cache, None
            self._match, self._request, self._hanging = {}, {}, defaultdict(set)
        self._cursor, changed = cache.changes_since(self._cursor)
        stale = set(self._match) if changed is None else {
            rid for node in set(changed) for rid in self._hanging.get(node, ())
        }
        fresh = [r for r in queue if self._request.get(r.id) is not r]
        gone = self._match.keys() - {r.id for r in fresh} - set(map(_id, queue))
        for rid in gone | {r.id for r in fresh}:
            self._forget(rid)
        for rid in stale - gone - {r.id for r in fresh}:
            self._peek(self._request[rid], cache, start=self._forget(rid))
        for r in fresh:
            self._peek(r, cache, start=None)
        return self._match

    def _peek(self, r: Request, cache: RadixCache, start: TreeNode | None) -> None:
        length, node = cache.peek(r.tokens[:-1], start=start, split=self.split)
        self._match[r.id] = (length, node)
        self._request[r.id] = r
        self._hanging[node].add(r.id)

    def _forget(self, rid: int) -> TreeNode | None:
        if rid not in self._match:
            return None
        node = self._match.pop(rid)[1]
        del self._request[rid]
        ids = self._hanging[node]
        ids.discard(rid)
        if not ids:
            del self._hanging[node]
        return node


def _id(r: Request) -> int:
    return r.id

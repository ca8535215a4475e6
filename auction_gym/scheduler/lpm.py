"""Longest prefix match first (SGLang's `lpm` policy).

Requests with more of their prompt in the cache go first; equal matches keep arrival order. Unlike
SGLang, there is no fallback to FCFS when the queue is longer than 128 requests: the policy is the
same at every queue length, so comparisons across loads compare one policy. Matching does not
refresh LRU times (see `prefix_matcher`).

The order is kept sorted across rounds and only requests whose match changed move, so a round
costs O(changes x log queue) plus one list copy, not a sort of the whole queue.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence

from ..radix_cache import RadixCache
from ..request import Request
from .base import register_scheduler
from .prefix_matcher import PrefixMatcher


@register_scheduler("lpm")
class LPM:
    name = "lpm"

    def __init__(self) -> None:
        self._matcher = PrefixMatcher()
        self._cache: RadixCache | None = None
        self._key: dict[int, tuple[int, float, int]] = {}
        self._keys: list[tuple[int, float, int]] = []  # sorted: (-cached length, arrival, id)
        self._order: list[Request] = []  # the requests, in the order of `_keys`

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        if cache is not self._cache:
            self._cache, self._key, self._keys, self._order = cache, {}, [], []
        match = self._matcher.update(queue, cache)
        for rid in self._matcher.dropped:
            at = bisect_left(self._keys, self._key.pop(rid))
            del self._keys[at], self._order[at]
        for rid in self._matcher.added:
            r = self._matcher.requests[rid]
            key = self._key[rid] = (-match[rid][0], r.arrival, rid)
            at = bisect_left(self._keys, key)
            self._keys.insert(at, key)
            self._order.insert(at, r)
        return list(self._order)

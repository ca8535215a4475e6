"""Longest prefix match first (SGLang's `lpm` policy).

Requests with more of their prompt in the cache go first; equal matches keep arrival order. By
default there is no fallback to FCFS for long queues: the policy is the same at every queue length,
so comparisons across loads compare one policy. SGLang's `lpm` (0.5.23, `schedule_policy.py`,
`WAITING_QUEUE_PREFIX_MATCH_MAX`) orders first come, first served whenever more than 128 requests
wait (`len(queue) > 128`; the same cut applies to its `hrrn`, not to `dfs-weight`):
`make_scheduler("lpm", fcfs_above=128)` does that (`SGLANG_FCFS_ABOVE` names the 128). Matching does
not refresh LRU times (see `prefix_matcher`); keeping what waits warm is `WaitingPrefixes`'s job.

The order is kept sorted across rounds and only requests whose match changed move, so a round
costs O(changes x log queue) plus one list copy, not a sort of the whole queue.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence

from .._checks import is_int
from ..radix_cache import RadixCache
from ..request import Request
from .base import fcfs_key
from .prefix_matcher import PrefixMatcher

SGLANG_FCFS_ABOVE = 128
"""SGLang's `WAITING_QUEUE_PREFIX_MATCH_MAX`: its `lpm` orders FCFS when more requests than this wait."""


class LPM:
    """Longest prefix match first; see the module docstring.

    Args:
        fcfs_above: order first come, first served when more than this many requests wait
            (SGLang: `SGLANG_FCFS_ABOVE`); None, the default, never does.
    """

    name = "lpm"

    def __init__(self, fcfs_above: int | None = None) -> None:
        if fcfs_above is not None and not (is_int(fcfs_above) and fcfs_above >= 0):
            raise ValueError(f"fcfs_above must be None or an int >= 0, got {fcfs_above!r}")
        self.fcfs_above = None if fcfs_above is None else int(fcfs_above)
        self._matcher = PrefixMatcher()
        self._cache: RadixCache | None = None
        self._key: dict[int, tuple[int, float, int]] = {}
        self._keys: list[tuple[int, float, int]] = []  # sorted: (-cached length, arrival, id)
        self._order: list[Request] = []  # the requests, in the order of `_keys`

    def in_batch_deprioritizes(self, waiting: int) -> bool:
        """Whether SGLang's in-batch prefix check reorders a queue of `waiting` requests: yes, as
        SGLang's `lpm` sorts by it, unless above the FCFS cut (where SGLang's policy is `fcfs`)."""
        return self.fcfs_above is None or waiting <= self.fcfs_above

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        if self.fcfs_above is not None and len(queue) > self.fcfs_above:
            # No match at all, as in SGLang; the next matched round catches up on what changed.
            return sorted(queue, key=fcfs_key)
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

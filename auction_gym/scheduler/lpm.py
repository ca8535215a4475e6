"""Longest prefix match first (SGLang's `lpm` policy).

Requests with more of their prompt in the cache go first; equal matches keep arrival order. Unlike
SGLang, there is no fallback to FCFS when the queue is longer than 128 requests: the policy is the
same at every queue length, so comparisons across loads compare one policy. Matching does not
refresh LRU times (see `prefix_matcher`).
"""

from __future__ import annotations

from typing import Sequence

from ..radix_cache import RadixCache
from ..request import Request
from .base import fcfs_key, register_scheduler
from .prefix_matcher import PrefixMatcher


@register_scheduler("lpm")
class LPM:
    name = "lpm"

    def __init__(self) -> None:
        self._matcher = PrefixMatcher()

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        match = self._matcher.update(queue, cache)
        return sorted(queue, key=lambda r: (-match[r.id][0], r.arrival, r.id))

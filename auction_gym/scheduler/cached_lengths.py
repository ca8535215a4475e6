"""Each waiting request's cached prefix length, for a policy whose order reads it.

The engine lends its `WaitingPrefixes` (`Scheduler.attach_waiting_prefixes`), whose lengths are
already matched for the round; a policy run on a queue of its own (a test, a replay without that
refresh) matches the queue itself, incrementally (`PrefixMatcher`). Both match the whole prompt, as
SGLang's policy matches do, and neither refreshes LRU times.
"""

from __future__ import annotations

from typing import Sequence

from ..radix_cache import RadixCache
from ..request import Request
from .prefix_matcher import PrefixMatcher
from .waiting import WaitingPrefixes


class CachedLengths:
    """`lengths(queue, cache)`: per request of `queue`, its cached prefix length (tokens)."""

    def __init__(self) -> None:
        self._matcher = PrefixMatcher(whole_prompt=True)
        self._prefixes: WaitingPrefixes | None = None

    def attach(self, prefixes: WaitingPrefixes) -> None:
        """Read the lengths from the engine's refresh when they are this round's."""
        self._prefixes = prefixes

    def lengths(self, queue: Sequence[Request], cache: RadixCache) -> list[int]:
        found = self._prefixes.lengths(queue, cache) if self._prefixes is not None else None
        if found is None:
            match = self._matcher.update(queue, cache)
            found = [match[r.id][0] for r in queue]
        return found

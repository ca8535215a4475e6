"""Waiting requests' cached prefixes, kept warm in the cache's LRU order (SGLang's rule).

SGLang's cache-aware policies match every waiting request every round, so what waits is evicted
last; without it a prefix could be evicted just before its request is admitted. `WaitingPrefixes`
gives that order to every policy at O(requests whose match changed) per round, and returns how
the queue changed (a `QueueDelta`) for the policy. docs/sglang-fidelity.md ("Waiting requests keep
their cached prefixes warm") says how, and where it differs from SGLang.
"""

from __future__ import annotations

from abc import ABCMeta
from collections import deque
from operator import attrgetter
from typing import Mapping, Sequence

from . import core
from .policy import QueueDelta
from .prefix_matcher import PrefixMatcher
from .radix_cache import RadixCache, TreeNode
from .request import Request, fcfs_key

_ID = attrgetter("id")
_KEPT_DELTAS = 64
"""Refreshes whose changes are kept for `WaitingPrefixes.delta_since` (a reader that fell further
behind compares the whole queue instead)."""


class WaitingPrefixes(core.EitherCore, metaclass=ABCMeta):
    """Refreshes the waiting queue's cached prefixes once per admission round; see the module docstring.

    The engine holds one per cache and calls `refresh(waiting, cache)` once per admission round,
    before the scheduler orders the queue (and so before admission evicts anything). Constructed
    on the compiled core (`auction_gym.core.active()`), `WaitingPrefixes()` returns the compiled
    one, `auction_gym._core.WaitingPrefixes`, which refreshes the compiled cache only (TypeError
    for another): the engine builds both on one core.
    """

    def __new__(cls) -> WaitingPrefixes:
        if cls is WaitingPrefixes and core.active() == "compiled":
            return core.compiled_module().WaitingPrefixes()
        return super().__new__(cls)

    def __init__(self) -> None:
        self._cache: RadixCache | None = None
        self._version: tuple[int, int] | None = None  # the cache's version when last refreshed
        self._lengths: tuple[Sequence[Request], list[int]] | None = None  # lengths' last answer this round
        self._refreshed: Sequence[Request] | None = None  # the list the last refresh was given
        self.serial = 0
        """Refreshes so far (`delta_since` counts from it)."""
        self._known_from = 0  # the first refresh from which changes are known (the last reset's)
        self._reset()

    def _reset(self) -> None:
        with core.use("python"):  # the reference is Python throughout, whatever cache it reads
            self._matcher = PrefixMatcher(split=True, whole_prompt=True)
        self._match: dict[int, tuple[int, TreeNode]] = {}  # request id -> (length, node), as refreshed
        self._next_rank = 0
        self._rank: dict[int, int] = {}  # request id -> its stamp order
        self._node: dict[int, TreeNode] = {}  # request id -> where its match ends (not the root)
        self._ranks_at: dict[TreeNode, set[int]] = {}  # node -> ranks of the requests ending there
        # (joined, left, rematched) of the last refreshes, the latest last; refreshes before the
        # first kept one (or before a reset) are unknown to `delta_since`.
        self._deltas: deque[tuple[list[Request], set[Request], list[Request]]] = deque(maxlen=_KEPT_DELTAS)

    def refresh(
        self, waiting: Sequence[Request], cache: RadixCache, changes: tuple[list[Request], set[Request]] | None = None,
    ) -> QueueDelta | None:
        """Mark where every request of `waiting` matches, and start the cache's round. `changes`,
        when given, is (joined, left): how `waiting` differs from the last refresh's queue (the
        engine's `WaitingQueue.take_changes`), which spares comparing the two. Returns how the
        queue changed since the last refresh, with every request's cached prefix length (None
        after the cache changed: not known).

        Cost: O(requests whose match changed since the last call, x the path they re-walk), plus,
        without `changes`, the matcher's set operations over the queue; not a walk per waiting request.
        """
        if cache is not self._cache:
            self._cache = cache
            self._reset()
            changes = None  # relative to a queue the new matcher never saw
            self._known_from = self.serial + 1  # the new matcher's first changes are from nothing
        match = self._match = self._matcher.update(waiting, cache, changes)
        self.serial += 1
        self._deltas.append((self._matcher.joined, self._matcher.left, self._matcher.rematched))
        self._lengths, self._refreshed = None, waiting
        requests = self._matcher.requests
        # Unmark first, while the cache's round is still the one in which these were last stamped.
        for rid in self._matcher.dropped:
            self._unmark(rid, cache)
            if rid not in requests:
                del self._rank[rid]
        cache.new_round()
        fresh = sorted((requests[rid] for rid in self._matcher.added if rid not in self._rank), key=fcfs_key)
        for r in fresh:
            self._rank[r.id] = self._next_rank
            self._next_rank += 1
        for rid in self._matcher.added:
            self._mark(rid, match[rid][1], cache)
        for rid, lower in self._matcher.splits.items():
            cache.stamp_in_round(lower, self._rank[rid])  # SGLang stamps the edge at that request's turn
        self._version = cache.version
        return self.delta_since(self.serial - 1)

    @property
    def length_of(self) -> Mapping[Request, int]:
        """Each request of the last refresh -> its longest cached prefix (whole prompt, tokens)."""
        return self._matcher.length_of

    def lengths(self, queue: Sequence[Request], cache: RadixCache) -> list[int] | None:
        """Each request's longest cached prefix of its whole prompt (tokens), as `cache.prefix_len`
        gives it, when the last `refresh` was of exactly these requests in this cache, unchanged
        since; None otherwise. A scheduler the engine attached this to reads its queue's lengths
        here instead of matching the queue again. Asked again in the same
        round for the same list (the engine's in-batch check, then its policy), it answers from the
        first call, and the very list `refresh` was given is taken to hold what it held then: a
        list must not change in place between `refresh` and its last `lengths`."""
        requests = self._matcher.requests
        if cache is not self._cache or cache.version != self._version or len(queue) != len(requests):
            return None
        if self._lengths is not None and self._lengths[0] is queue:
            return self._lengths[1]
        # Passes in C: the auction reads thousands of lengths a round. Another list is checked
        # request by request (they compare by identity); the engine asks for the one it refreshed,
        # which saves that pass.
        if queue is not self._refreshed and list(map(requests.get, map(_ID, queue))) != list(queue):
            return None
        out = list(map(self._matcher.length_of.__getitem__, queue))
        self._lengths = (queue, out)
        return out

    def delta_since(self, serial: int) -> QueueDelta | None:
        """How the queue of the last refresh differs from that of refresh number `serial`; None when
        that refresh is not kept (the reader compares the queues). For a reader that holds the
        last refresh's queue, unchanged since (`lengths` answers for it)."""
        behind = self.serial - serial
        if serial < self._known_from or not 0 <= behind <= len(self._deltas):
            return None
        if behind == 0:  # asked again after the same refresh
            return QueueDelta([], [], [], self._matcher.length_of)
        length_of, deltas = self._matcher.length_of, self._deltas
        if behind == 1:  # the usual case: the reader followed every refresh
            joined, left, rematched = deltas[-1]
            return QueueDelta(joined, list(left), rematched, length_of)
        return QueueDelta.combine([QueueDelta(deltas[k][0], list(deltas[k][1]), deltas[k][2], length_of)
                                   for k in range(len(deltas) - behind, len(deltas))])

    def start(self, r: Request, limit: int) -> TreeNode | None:
        """A `start` for matching, in the cache last refreshed, the first `limit` tokens of `r`'s
        prompt or of tokens that begin with it (a retracted request's prompt + output): the node
        where the last `refresh` matched its prompt, or the nearest ancestor at most `limit` tokens
        deep; None when `r` was not in that refresh. The admission that follows the refresh matches
        from there instead of re-comparing the cached path from the root (the cache climbs from a
        node evicted since to its closest surviving ancestor). ValueError when it must climb a tree
        that the cache's `reset()` detached since the refresh."""
        if self._matcher.requests.get(r.id) is not r:
            return None
        node = self._match[r.id][1]
        try:
            while node.depth > limit:
                node = node.parent
        except AttributeError:  # climbed off a detached node: a reset tree's (refused off the hot path)
            raise ValueError("start: the refreshed cache was reset since") from None
        return node

    def _mark(self, rid: int, node: TreeNode, cache: RadixCache) -> None:
        if node is cache.root:
            return  # nothing cached: nothing to keep warm
        rank = self._rank[rid]
        self._node[rid] = node
        ranks = self._ranks_at.setdefault(node, set())
        ranks.add(rank)
        if rank > node.wait:
            cache.set_wait(node, rank)

    def _unmark(self, rid: int, cache: RadixCache) -> None:
        node = self._node.pop(rid, None)
        if node is None:
            return
        ranks = self._ranks_at[node]
        rank = self._rank[rid]
        ranks.discard(rank)
        if not ranks:
            del self._ranks_at[node]
            cache.set_wait(node, -1)
        elif rank == node.wait:  # the latest one left: O(requests ending here), only then
            cache.set_wait(node, max(ranks))


if (_compiled := core.compiled_module()) is not None:
    WaitingPrefixes.register(_compiled.WaitingPrefixes)

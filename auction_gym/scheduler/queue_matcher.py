"""A policy's prefix matcher kept over the engine's waiting queue from round to round.

An engine's round says how its queue changed since the round before (`WaitingRound.changes`, a
`QueueDelta`). Where those changes lead from the queue this matcher matched last, it is told
them (`PrefixMatcher.update`'s `changes`), which spares the set operations over the whole queue
that finding them again costs; elsewhere (the first round, a round built outside an engine, another
cache) it compares the two queues, as a matcher does by itself. Either way the match is the same.
"""

from __future__ import annotations

from ..policy import WaitingRound
from ..prefix_matcher import PrefixMatcher
from ..radix_cache import RadixCache, TreeNode
from ..request import Request


class QueueMatcher:
    """A `PrefixMatcher` (built with `split` and `whole_prompt`) told each round's changes where
    they follow the queue it matched last; see the module docstring."""

    __slots__ = ("matcher", "_cache", "_waiting")

    def __init__(self, split: bool = False, whole_prompt: bool = False) -> None:
        self.matcher = PrefixMatcher(split=split, whole_prompt=whole_prompt)
        self._cache: RadixCache | None = None
        self._waiting = 0  # the length of the queue matched last

    def update(
        self, round: WaitingRound,
    ) -> tuple[dict[int, tuple[int, TreeNode]], tuple[list[Request], set[Request]] | None]:
        """The match of `round.queue` (`PrefixMatcher.update`) and the (joined, left) it was told,
        None where it compared the queues. The changes are taken where they come from the same cache
        and add up to the queue's length (a queue that changed otherwise is compared)."""
        queue, cache, changes = round.queue, round.cache, round.changes
        told = None
        if changes is not None and cache is self._cache \
                and len(queue) == self._waiting + len(changes.joined) - len(changes.left):
            told = changes.joined, set(changes.left)
        match = self.matcher.update(queue, cache, told)
        if len(match) != len(queue):  # a match is kept by request id, which the engine keeps unique
            self._cache = None  # the matcher followed this queue: the next one is compared with it
            raise ValueError(f"request {_repeated_id(queue)}: duplicate request id in the queue")
        self._cache, self._waiting = cache, len(queue)
        return match, told


def _repeated_id(queue: list[Request]) -> int:
    """The first id that `queue` holds twice."""
    seen: set[int] = set()
    for r in queue:
        if r.id in seen:
            return r.id
        seen.add(r.id)
    raise AssertionError("no id is repeated")

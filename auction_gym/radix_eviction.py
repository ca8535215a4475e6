"""Which unlocked leaf of a `RadixCache` is evicted first: the cache's eviction order, SGLang's
LRU (`lru`) or lowest priority then LRU (`priority`, `evict_policy.PriorityStrategy`), with the
waiting requests' prefixes kept warm by per-round marks instead of re-stamped paths. Why this
evicts exactly as SGLang's stamping does is docs/engine.md section 4 ("The radix cache's clock").
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .radix_cache import TreeNode

EVICTION_POLICIES = ("lru", "priority")
"""The eviction orders a cache knows (`RadixCache.eviction_policy`): SGLang 0.5.23's `lru` and `priority`."""
ROUND_TICKS = 1 << 32
"""Ticks a `new_round()` reserves for the round's waiting stamps (`round_start + wait`); ranks stay
below it, so those stamps fall between the accesses before the round and those after it."""


class EvictionOrder:
    """The eviction candidates of a `RadixCache` (its base class) and the clock's round: what
    `evict` pops, what an access, a lock or a wait mark pushes. The cache sets `_by_priority`, keeps
    the clock `_tick` and the tree (`root`, and `nodes()`, which `_rebuild_heap` walks); this keeps
    the heaps."""

    _by_priority: bool
    _tick: int
    root: TreeNode

    def _reset_order(self) -> None:
        self._round_start = 0
        self._serial = 0
        # Lazy min-heaps of eviction candidates: (last_access, serial, node) for nodes nobody waits
        # on, (wait, serial, node) for waited-on ones. Entries go stale when the node is touched,
        # locked, gains a child, changes `wait` or is evicted; `evict` skips those.
        self._heap: list[tuple[int, int, TreeNode]] = []
        self._wait_heap: list[tuple[int, int, TreeNode]] = []
        # Waited-on candidates given a first-heap entry this round (their own time passed their
        # round time): `new_round` gives them a wait-heap entry again.
        self._waited_touched: list[TreeNode] = []

    def new_round(self) -> None:
        """Start an admission round: from here until the next call, a waited-on node's time is
        `round_start + wait`, after every access so far and before every access to come."""
        self._round_start = self._tick + 1
        self._tick = self._round_start + ROUND_TICKS
        touched, self._waited_touched = self._waited_touched, []
        for node in touched:  # their round time is the later again: back on the wait heap
            if node.alive and node.wait >= 0 and not node.children and not node.lock_ref:
                self._push(node)

    def stamp_in_round(self, node: TreeNode, rank: int) -> None:
        """Give `node` the time `round_start + rank` of the current round, unless its own is later:
        the time SGLang's match of the waiting request ranked `rank` gives the lower half of an edge
        it splits (`WaitingPrefixes` calls it after `new_round()`). The root and evicted nodes are
        ignored."""
        stamp = self._round_start + rank
        if node is not self.root and node.alive and stamp > node.last_access:
            self._touch(node, stamp)

    def set_wait(self, node: TreeNode, wait: int) -> None:
        """Mark `node` as where waiting requests' matches end, `wait` the largest of their ranks
        (0 <= wait < ROUND_TICKS; a larger rank is stamped later in each round), or -1 for none.

        A node that was waited on keeps the time it had in the current round (the later of
        `round_start + wait` and its own) as its `last_access`: to unmark what stopped waiting in
        the last round, call this before `new_round()`. The root and evicted nodes are ignored.
        """
        if node is self.root or not node.alive:
            return
        if node.wait >= 0:
            node.last_access = max(node.last_access, self._round_start + node.wait)
        node.wait = wait
        if not node.children and not node.lock_ref:
            self._push(node)

    def _touch(self, node: TreeNode, tick: int) -> None:
        if node is self.root:
            return
        node.last_access = tick
        # A waited-on leaf's entry is keyed by its rank while its round time is the later one.
        if not node.children and node.lock_ref == 0 and (node.wait < 0 or tick > self._round_start + node.wait):
            self._push(node)

    def _push(self, node: TreeNode) -> None:
        """Add a heap entry for a candidate (an unlocked leaf): on the wait heap, keyed by its rank,
        when it is waited on and its round time is not earlier than its own; else keyed by its own
        (and, if waited on, listed for `new_round`). Under `priority` eviction the key is
        (priority, that time), SGLang's (priority, last_access_time)."""
        self._serial += 1
        if node.wait < 0:
            heap, time = self._heap, node.last_access
        elif node.last_access > self._round_start + node.wait:
            heap, time = self._heap, node.last_access
            self._waited_touched.append(node)
        else:
            heap, time = self._wait_heap, node.wait
        heapq.heappush(heap, ((node.priority, time) if self._by_priority else time, self._serial, node))

    def _unpush(self, node: TreeNode) -> None:
        """Take back the last `_push`, of `node`, leaving the heaps as they were before it (entry for
        entry, the order heappush moved them in reversed): for a refused `unlock`, off the hot path."""
        if node.wait >= 0 and node.last_access > self._round_start + node.wait:
            self._waited_touched.pop()
        heap = next(h for h in (self._heap, self._wait_heap) if any(e[1] == self._serial for e in h))
        at = next(i for i, e in enumerate(heap) if e[1] == self._serial)
        path = [len(heap) - 1]  # the heap positions heappush moved the entry up through
        while path[-1] != at:
            path.append((path[-1] - 1) >> 1)
        for below, above in reversed(list(zip(path, path[1:]))):
            heap[above] = heap[below]
        heap.pop()
        self._serial -= 1

    def _waits_in_round(self, node: TreeNode) -> bool:
        """Whether `node`'s time in the current round is its waiting rank's (`round_start + wait`):
        it is waited on and not accessed later since the round began. Such a candidate's entry is on
        the wait heap."""
        return node.wait >= 0 and node.last_access <= self._round_start + node.wait

    def _heap_key(self, node: TreeNode) -> int | tuple[int, int]:
        """A candidate's heap key: its time (`wait` on the wait heap, else `last_access`), after its
        priority under `priority` eviction."""
        time = node.wait if self._waits_in_round(node) else node.last_access
        return (node.priority, time) if self._by_priority else time

    def _pop_oldest(self) -> tuple[TreeNode | None, int]:
        """Take the least recently used candidate off its heap: (node, its time), or (None, 0).

        Stale entries on top are dropped first. A waited-on node's time is the later of
        `round_start + wait` and its own (module docstring).
        """
        heap, waiting, start = self._heap, self._wait_heap, self._round_start
        while heap:
            stamp, _, n = heap[0]
            if (n.alive and not n.children and not n.lock_ref and stamp == n.last_access
                    and (n.wait < 0 or stamp > start + n.wait)):
                break
            heapq.heappop(heap)
        while waiting:
            wait, _, n = waiting[0]
            if n.alive and not n.children and not n.lock_ref and n.wait == wait and n.last_access <= start + wait:
                break
            heapq.heappop(waiting)  # a waited-on node touched this round is in `_waited_touched`
        if waiting and (not heap or start + waiting[0][0] < heap[0][0]):
            wait, _, node = heapq.heappop(waiting)
            return node, start + wait
        if heap:
            stamp, _, node = heapq.heappop(heap)
            return node, stamp
        return None, 0

    def _pop_lowest_priority(self) -> tuple[TreeNode | None, int]:
        """`_pop_oldest` under `priority` eviction: the candidate of lowest (priority, time)."""
        heap, waiting = self._heap, self._wait_heap
        while heap and not self._current(heap[0], False):
            heapq.heappop(heap)
        while waiting and not self._current(waiting[0], True):
            heapq.heappop(waiting)
        if waiting:
            (priority, wait), _, _ = waiting[0]
            if not heap or (priority, self._round_start + wait) < heap[0][0]:
                node = heapq.heappop(waiting)[2]
                return node, self._round_start + wait
        if heap:
            node = heapq.heappop(heap)[2]
            return node, node.last_access
        return None, 0

    def _current(self, entry: tuple, waiting: bool) -> bool:
        """Whether a heap entry is a candidate's current one (not stale)."""
        key, _, n = entry
        return (n.alive and not n.children and not n.lock_ref and self._waits_in_round(n) == waiting
                and key == self._heap_key(n))

    def _rebuild_heap(self) -> None:
        self._heap, self._wait_heap, touched = [], [], []
        for node in self.nodes():
            if not node.children and node.lock_ref == 0:
                self._serial += 1
                waits = self._waits_in_round(node)
                (self._wait_heap if waits else self._heap).append((self._heap_key(node), self._serial, node))
                if node.wait >= 0 and not waits:
                    touched.append(node)
        heapq.heapify(self._heap)
        heapq.heapify(self._wait_heap)
        self._waited_touched = touched

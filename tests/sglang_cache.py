"""SGLang 0.5.23's radix cache written out plainly, the references the cache's eviction order is
tested against: LRU stamping (`SGLangLRU`) and the `priority` eviction policy
(`SGLangPriorityCache`), and `play`, which runs one stream of operations on the cache and a
reference side by side (`tests/test_radix_cache.py`, `tests/test_waiting.py`,
`tests/test_preemption.py`)."""

from __future__ import annotations

import itertools
from typing import Sequence

from auction_gym import RadixCache, Request
from auction_gym.waiting_prefixes import WaitingPrefixes


class SGLangLRU:
    """Reference: SGLang's stamping written out plainly. Every access stamps every node of its path,
    a split stamps both halves, a new leaf is stamped just after its path; eviction scans every
    unlocked leaf for the oldest. Nodes are [key, children, parent, time, lock, priority]; an
    insert given a priority raises every node of its path to it (read only by the subclass's
    eviction), a split's upper half takes the lower's."""

    def __init__(self) -> None:
        self.root = [(), {}, None, 0.0, 1, -(10**9)]
        self.clock = 0

    def _walk(self, seq: tuple[int, ...], now: int, priority: int | None) -> tuple[list, int]:
        node, pos = self.root, 0
        while pos < len(seq) and seq[pos] in node[1]:
            child = node[1][seq[pos]]
            child[3] = now
            m = 0
            while m < len(child[0]) and pos + m < len(seq) and child[0][m] == seq[pos + m]:
                m += 1
            split = m < len(child[0])
            if split:
                upper = [child[0][:m], {child[0][m]: child}, node, now, child[4], child[5]]
                node[1][seq[pos]] = upper
                child[0], child[2] = child[0][m:], upper
                child = upper
            if priority is not None:
                child[5] = max(child[5], priority)
            node, pos = child, pos + m
            if split:
                break
        return node, pos

    def match(self, seq) -> list:
        self.clock += 1
        return self._walk(tuple(seq), self.clock, None)[0]

    def insert(self, seq, priority: int | None = None) -> list:
        self.clock += 1
        seq = tuple(seq)
        node, pos = self._walk(seq, self.clock, priority)
        if pos < len(seq):
            leaf = [seq[pos:], {}, node, self.clock + 0.5, 0, 0 if priority is None else priority]
            node[1][seq[pos]] = leaf
            node = leaf
        return node

    def round(self, waiting: Sequence[Sequence[int]]) -> None:
        """A scheduling round of SGLang's cache-aware policies (`SchedulePolicy.calc_priority`):
        every waiting prompt, whole, is matched in the list's order, one access each (a match
        stamps, it raises no priority)."""
        for prompt in waiting:
            self.match(prompt)

    def lock(self, node: list, delta: int) -> None:
        while node is not self.root:
            node[4] += delta
            node = node[2]

    def eviction_key(self, node: list) -> tuple:
        """The unlocked leaf evicted first has the smallest key: the oldest stamp."""
        return (node[3],)

    def evict(self, n: int) -> int:
        freed = 0
        while freed < n:
            leaves = [x for x in self.nodes() if not x[1] and not x[4]]
            if not leaves:
                break
            x = min(leaves, key=self.eviction_key)
            del x[2][1][x[0][0]]
            freed += len(x[0])
        return freed

    def nodes(self) -> list:
        out, stack = [], list(self.root[1].values())
        while stack:
            x = stack.pop()
            out.append(x)
            stack.extend(x[1].values())
        return out

    def sequences(self) -> set[tuple[int, ...]]:
        out, stack = set(), [(self.root, ())]
        while stack:
            x, path = stack.pop()
            path += x[0]
            if not x[1] and x is not self.root:
                out.add(path)
            stack.extend((c, path) for c in x[1].values())
        return out


class SGLangPriorityCache(SGLangLRU):
    """Reference: SGLang's `priority` policy written out plainly: the stamping above, and eviction
    of the unlocked leaf of lowest (priority, time)."""

    def eviction_key(self, node: list) -> tuple:
        return (node[5], node[3])


def play(ours: RadixCache, ref: SGLangLRU, program) -> None:
    """Run `program`, steps (op, tokens, n[, priority]), on `ours` and `ref` side by side, checking
    after each step that `ours` keeps its invariants and caches what `ref` does. Ops: insert (with
    the step's priority when it has one), match, lock and unlock (the n-th lock held), evict (n
    tokens, which must free as many on both), and, for admission rounds, arrive (a request of those
    tokens joins the queue), admit (the n-th queued request leaves) and round (`WaitingPrefixes`
    refreshes the queue in `ours`; `ref` matches every queued prompt in order)."""
    waiting, queue, locks, ids = WaitingPrefixes(), [], [], itertools.count()
    for op, seq, n, *priority in program:
        if op == "insert":
            ours.insert(seq, **({"priority": priority[0]} if priority else {}))
            ref.insert(seq, *priority)
        elif op == "match":
            ours.match_prefix(seq)
            ref.match(seq)
        elif op == "lock":
            node, ref_node = ours.match_prefix(seq).last_node, ref.match(seq)
            ours.lock(node)
            ref.lock(ref_node, 1)
            locks.append((node, ref_node))
        elif op == "unlock" and locks:
            node, ref_node = locks.pop(n % len(locks))
            ours.unlock(node)
            ref.lock(ref_node, -1)
        elif op == "evict":
            assert ours.evict(n) == ref.evict(n)
        elif op == "arrive":
            queue.append(Request(next(ids), 0, seq, 1.0, arrival=0.0))
        elif op == "admit" and queue:
            queue.pop(n % len(queue))
        elif op == "round":
            waiting.refresh(list(queue), ours)
            ref.round([r.tokens for r in queue])
        ours.check()
        assert {tuple(s.tolist()) for s in ours.sequences()} == ref.sequences()

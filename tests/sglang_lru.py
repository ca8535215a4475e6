"""SGLang 0.5.23's LRU stamping written out plainly, the reference the cache's eviction order is
tested against (`tests/test_radix_cache.py`, `tests/test_waiting.py`)."""

from __future__ import annotations

from typing import Sequence


class SGLangLRU:
    """Reference: SGLang's stamping written out plainly. Every access stamps every node of its path,
    a split stamps both halves, a new leaf is stamped just after its path; eviction scans every
    unlocked leaf for the oldest. Nodes are [key, children, parent, time, lock]."""

    def __init__(self) -> None:
        self.root = [(), {}, None, 0.0, 1]
        self.clock = 0

    def _walk(self, seq: tuple[int, ...], now: int) -> tuple[list, int]:
        node, pos = self.root, 0
        while pos < len(seq) and seq[pos] in node[1]:
            child = node[1][seq[pos]]
            child[3] = now
            m = 0
            while m < len(child[0]) and pos + m < len(seq) and child[0][m] == seq[pos + m]:
                m += 1
            if m < len(child[0]):
                upper = [child[0][:m], {child[0][m]: child}, node, now, child[4]]
                node[1][seq[pos]] = upper
                child[0], child[2] = child[0][m:], upper
                return upper, pos + m
            node, pos = child, pos + m
        return node, pos

    def match(self, seq) -> list:
        self.clock += 1
        return self._walk(tuple(seq), self.clock)[0]

    def insert(self, seq) -> list:
        self.clock += 1
        seq = tuple(seq)
        node, pos = self._walk(seq, self.clock)
        if pos < len(seq):
            leaf = [seq[pos:], {}, node, self.clock + 0.5, 0]
            node[1][seq[pos]] = leaf
            node = leaf
        return node

    def round(self, waiting: Sequence[Sequence[int]]) -> None:
        """A scheduling round of SGLang's cache-aware policies (`SchedulePolicy.calc_priority`):
        every waiting prompt, whole, is matched in the list's order, one access each."""
        for prompt in waiting:
            self.match(prompt)

    def lock(self, node: list, delta: int) -> None:
        while node is not self.root:
            node[4] += delta
            node = node[2]

    def evict(self, n: int) -> int:
        freed = 0
        while freed < n:
            leaves = [x for x in self.nodes() if not x[1] and not x[4]]
            if not leaves:
                break
            x = min(leaves, key=lambda x: x[3])
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


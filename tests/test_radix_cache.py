"""RadixCache against a brute-force model: the set of every cached token prefix."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from auction_gym import RadixCache

seqs = st.lists(st.integers(0, 3), min_size=1, max_size=12)


def prefixes(seq, page: int) -> set[tuple[int, ...]]:
    """Page-aligned prefixes: the cache stores whole pages, so each one costs `page` tokens."""
    aligned = len(seq) - len(seq) % page
    return {tuple(seq[:k]) for k in range(page, aligned + 1, page)}


class CacheMachine(RuleBasedStateMachine):
    """Random insert / match / lock / unlock / evict sequences."""

    @initialize(page=st.sampled_from([1, 2, 3]))
    def setup(self, page: int) -> None:
        self.page = page
        self.cache = RadixCache(page_size=page)
        self.model: set[tuple[int, ...]] = set()
        self.locks: list[tuple[object, tuple[int, ...]]] = []

    def expected_match(self, seq) -> int:
        for k in range(len(seq) - len(seq) % self.page, 0, -self.page):
            if tuple(seq[:k]) in self.model:
                return k
        return 0

    @rule(seq=seqs)
    def insert(self, seq) -> None:
        before = self.expected_match(seq)
        res = self.cache.insert(seq)
        assert res.cached == before
        self.model |= prefixes(seq, self.page)
        assert res.last_node.depth == len(seq) - len(seq) % self.page

    @rule(seq=seqs, extra=seqs)
    def insert_from_match(self, seq, extra) -> None:
        """Inserting from a node known to be a prefix gives what inserting from the root gives."""
        node = self.cache.match_prefix(seq).last_node
        full = seq + extra
        before = self.expected_match(full)
        res = self.cache.insert(full, start=node)
        assert res.cached == before
        self.model |= prefixes(full, self.page)
        assert res.last_node.depth == len(full) - len(full) % self.page

    @rule(seq=seqs)
    def match(self, seq) -> None:
        assert self.cache.prefix_len(seq) == self.expected_match(seq)
        m = self.cache.match_prefix(seq)
        assert m.length == self.expected_match(seq)
        assert m.last_node.depth == m.length

    @rule(seq=seqs)
    def lock(self, seq) -> None:
        m = self.cache.match_prefix(seq)
        self.cache.lock(m.last_node)
        self.locks.append((m.last_node, tuple(seq[: m.length])))

    @precondition(lambda self: self.locks)
    @rule(i=st.integers(0, 100))
    def unlock(self, i: int) -> None:
        node, _ = self.locks.pop(i % len(self.locks))
        self.cache.unlock(node)

    @rule(n=st.integers(0, 30))
    def evict(self, n: int) -> None:
        evictable_before = self.cache.evictable_size
        freed = self.cache.evict(n)
        after: set[tuple[int, ...]] = set()
        for s in self.cache.sequences():
            after |= prefixes(list(s), self.page)
        assert after <= self.model, "evict must only remove"
        assert (len(self.model) - len(after)) * self.page == freed, "evict frees what it reports"
        assert freed >= min(n, evictable_before), "evict stops early only when nothing is evictable"
        self.model = after

    @invariant()
    def sizes_add_up(self) -> None:
        nodes = list(self.cache.nodes())
        assert self.cache.total_size == sum(len(n) for n in nodes) == len(self.model) * self.page
        assert self.cache.protected_size == sum(len(n) for n in nodes if n.lock_ref > 0)
        assert self.cache.node_count == len(nodes)
        for n in nodes:
            assert len(n) > 0 and len(n) % self.page == 0
            assert n.lock_ref >= 0 and (n.lock_ref == 0 or n.parent.lock_ref > 0)

    @invariant()
    def locked_paths_survive(self) -> None:
        for node, prefix in self.locks:
            assert node.alive
            assert self.cache.prefix_len(list(prefix)) >= len(prefix)


TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_evicts_least_recently_used_leaf_first():
    c = RadixCache()
    c.insert([1, 2, 3])
    c.insert([1, 2, 4])
    c.insert([5, 6])
    c.match_prefix([1, 2, 3])  # [1,2,4] and [5,6] are now older than [1,2,3]
    assert c.evict(1) == 1
    assert c.prefix_len([1, 2, 4]) == 2 and c.prefix_len([5, 6]) == 2
    assert c.evict(1) == 2  # the whole [5,6] leaf goes
    assert c.prefix_len([5, 6]) == 0 and c.prefix_len([1, 2, 3]) == 3


def test_parent_becomes_evictable_after_last_child():
    c = RadixCache()
    c.insert([1, 2])
    c.insert([1, 2, 3])
    c.insert([1, 2, 4])
    assert c.evict(100) == 4
    assert c.total_size == 0 and c.node_count == 0


def test_locked_path_is_never_evicted():
    c = RadixCache()
    node = c.insert([7, 8, 9]).last_node
    c.lock(node)
    c.insert([7, 1])
    assert c.evict(100) == 1
    assert c.prefix_len([7, 8, 9]) == 3
    assert c.protected_size == 3 and c.evictable_size == 0
    c.unlock(node)
    assert c.evict(100) == 3


def test_match_splits_edge_and_keeps_locks():
    c = RadixCache()
    leaf = c.insert(np.arange(10)).last_node
    c.lock(leaf)
    m = c.match_prefix([0, 1, 2, 3, 99])
    assert m.length == 4 and m.last_node.depth == 4 and m.last_node.lock_ref == 1
    assert c.node_count == 2 and c.protected_size == 10
    c.unlock(leaf)
    assert c.protected_size == 0 and c.evictable_size == 10


def test_values_follow_tokens_and_are_freed():
    freed: list[int] = []
    c = RadixCache(on_evict=lambda v: freed.extend(v.tolist()))
    c.insert([1, 2, 3, 4], value=np.array([10, 11, 12, 13]))
    c.insert([1, 2, 5], value=np.array([20, 21, 22]))
    assert c.match_prefix([1, 2, 3]).value.tolist() == [10, 11, 12]
    assert c.match_prefix([1, 2, 5, 6]).value.tolist() == [10, 11, 22]
    c.evict(100)
    assert sorted(freed) == [10, 11, 12, 13, 22]


def test_page_size_aligns_matches():
    c = RadixCache(page_size=4)
    c.insert(list(range(10)))  # only 8 tokens (2 pages) are cached
    assert c.total_size == 8
    assert c.prefix_len(list(range(7)) + [99]) == 4
    assert c.prefix_len([0, 1, 2]) == 0


@pytest.mark.parametrize("bad", [[], [[1, 2]], [1.5], [-1]])
def test_bad_tokens_raise(bad):
    c = RadixCache()
    if bad == []:
        assert c.insert(bad).cached == 0  # an empty sequence is a no-op, not an error
        return
    with pytest.raises(ValueError):
        c.insert(bad)


def test_unlock_without_lock_raises():
    c = RadixCache()
    node = c.insert([1]).last_node
    with pytest.raises(RuntimeError):
        c.unlock(node)

"""RadixCache against a brute-force model: the set of every cached token prefix."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sglang_cache import SGLangLRU, play

from auction_gym import RadixCache, core
from auction_gym.radix_integrity import IntegrityError

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator

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

    def check_insert(self, seq, insert) -> None:
        """`insert()`, an insert of `seq` by some route, reports what the model held of it and
        leaves it cached down to its last whole page."""
        before = self.expected_match(seq)
        res = insert()
        assert res.cached == before
        self.model |= prefixes(seq, self.page)
        assert res.last_node.depth == len(seq) - len(seq) % self.page

    @rule(seq=seqs)
    def insert(self, seq) -> None:
        self.check_insert(seq, lambda: self.cache.insert(seq))

    @rule(seq=seqs, extra=seqs)
    def insert_from_match(self, seq, extra) -> None:
        """Inserting from a node known to be a prefix gives what inserting from the root gives."""
        node = self.cache.match_prefix(seq).last_node
        full = seq + extra
        self.check_insert(full, lambda: self.cache.insert(full, start=node))

    @rule(seq=seqs, extra=seqs)
    def extend_after_match(self, seq, extra) -> None:
        """Extending a node's path gives what inserting the whole sequence gives."""
        node = self.cache.match_prefix(seq).last_node
        full = seq + extra
        self.check_insert(full, lambda: self.cache.extend(node, full[node.depth:]))

    @rule(seq=seqs, extra=seqs)
    def match_from_match(self, seq, extra) -> None:
        """Matching from a node known to be a prefix gives what matching from the root gives."""
        node = self.cache.match_prefix(seq).last_node
        full = seq + extra
        m = self.cache.match_prefix(full, start=node)
        assert m.length == self.expected_match(full)
        assert m.last_node.depth == m.length

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

    @rule(seq=seqs, wait=st.integers(-1, 5))
    def mark_waiting(self, seq, wait: int) -> None:
        """Waiting marks change which leaves go first, never what evict may remove or reports."""
        self.cache.set_wait(self.cache.match_prefix(seq).last_node, wait)

    @rule()
    def new_round(self) -> None:
        self.cache.new_round()

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
    def consistent(self) -> None:
        self.cache.check()
        assert self.cache.total_size == len(self.model) * self.page

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


@pytest.mark.parametrize("case", ["below", "same", "from_root", "elsewhere"])
def test_move_lock_is_lock_then_unlock(case):
    """`move_lock(old, new)` leaves every count, size and eviction order as `lock(new)` then
    `unlock(old)` does, whether `old` is on `new`'s path (only the nodes between change) or not."""

    def build() -> tuple[RadixCache, object, object]:
        c = RadixCache()
        a = c.insert([1, 2, 3]).last_node
        c.insert([1, 2, 9, 9])
        b = c.insert([1, 2, 3, 4, 5]).last_node
        other = c.insert([6, 6]).last_node
        old, new = {"below": (a, b), "same": (b, b), "from_root": (c.root, b), "elsewhere": (other, b)}[case]
        c.lock(old)
        return c, old, new

    def state(c: RadixCache) -> list:
        c.check()
        return [c.evictable_size, c.protected_size, sorted((n.depth, n.lock_ref) for n in c.nodes()),
                [len(c.match_prefix(s).last_node.key) for s in ([1, 2, 3, 4, 5], [6, 6], [1, 2, 9, 9])],
                c.evict(100)]

    moved, old, new = build()
    moved.move_lock(old, new)
    stepwise, old, new = build()
    stepwise.lock(new)
    stepwise.unlock(old)
    assert state(moved) == state(stepwise)


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
    below = c.match_prefix([1, 2]).last_node
    c.extend(below, [7, 8], value=np.array([30, 31]))  # values go with the tokens passed
    assert c.match_prefix([1, 2, 7, 8]).value.tolist() == [10, 11, 30, 31]
    assert c.match_prefix([1, 2, 3, 4], start=below).value.tolist() == [10, 11, 12, 13]  # from the root
    c.evict(100)
    assert sorted(freed) == [10, 11, 12, 13, 22, 30, 31]


def test_values_appear_once_any_insert_stores_them():
    c = RadixCache()
    node = c.insert([1, 2, 3]).last_node
    assert c.match_prefix([1, 2, 3]).value is None  # nothing stored: no values, not an empty array
    c.extend(node, [4, 5], value=np.array([40, 41]))
    assert c.match_prefix([1, 2, 3, 4, 5]).value.tolist() == [40, 41]  # only the nodes that hold some


def test_extend_refuses_an_evicted_node():
    c = RadixCache()
    node = c.insert([1, 2]).last_node
    c.evict(2)
    with pytest.raises(ValueError, match="evicted"):
        c.extend(node, [3])


def test_a_negative_eviction_is_refused_and_evicts_nothing():
    c = RadixCache()
    c.insert([1, 2, 3])
    with pytest.raises(ValueError, match="num_tokens must be >= 0, got -5"):
        c.evict(-5)
    assert c.total_size == 3 and c.evict(0) == 0 and c.prefix_len([1, 2, 3]) == 3


@pytest.mark.parametrize("call", [
    lambda c, node: c.lock(None), lambda c, node: c.unlock(None), lambda c, node: c.extend(None, [4]),
    lambda c, node: c.insert(None), lambda c, node: c.match_prefix(None), lambda c, node: c.prefix_len(None),
    lambda c, node: c.move_lock(None, None), lambda c, node: c.move_lock(node, None),
    lambda c, node: c.move_lock(None, node),
], ids=["lock", "unlock", "extend", "insert", "match_prefix", "prefix_len", "move_lock", "move_lock_to_none",
        "move_lock_from_none"])
def test_none_for_a_node_or_tokens_is_a_type_error_on_either_core(call):
    c = RadixCache()
    node = c.insert([1, 2, 3]).last_node
    with pytest.raises(TypeError):
        call(c, node)
    c.check()  # nothing was left half done
    assert (c.evictable_size, c.protected_size, node.lock_ref) == (3, 0, 0)


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


def test_split_stamps_the_lower_half_as_sglang_does():
    """SGLang stamps a node before splitting it: the unmatched [3,4] counts as just used."""
    c = RadixCache()
    c.insert([1, 2, 3, 4])
    c.insert([5, 6, 7])
    c.match_prefix([1, 2, 9])
    assert c.evict(1) == 3
    assert [s.tolist() for s in c.sequences()] == [[1, 2, 3, 4]]


ops = st.lists(
    st.tuples(st.sampled_from(["insert", "match", "lock", "unlock", "evict"]), seqs, st.integers(0, 12)),
    max_size=40,
)


@given(ops)
@example([("insert", [0], 0), ("insert", [1, 1], 0), ("insert", [1, 1, 0], 0), ("insert", [1, 0, 0], 0),
          ("evict", [0], 3)])  # a split's lower half goes before the new leaf (SGLang makes the leaf later)
@settings(max_examples=300, deadline=None)
def test_eviction_order_equals_sglang_stamping(program):
    """Deepest-node stamps with inheritance evict exactly what stamping whole paths evicts."""
    play(RadixCache(), SGLangLRU(), program)


def test_waited_on_node_is_evicted_after_everything_else():
    c = RadixCache()
    waiting = c.insert([1, 2, 3]).last_node  # the oldest: LRU would take it first
    c.insert([5, 6])
    c.set_wait(waiting, 0)
    c.new_round()
    assert c.evict(1) == 2 and c.prefix_len([1, 2, 3]) == 3
    assert c.evict(1) == 3  # nothing else is left: what waits goes too


def _busy_cache() -> RadixCache:
    """A cache with a split, a lock, a waiting mark and an eviction behind it: check() passes. On
    the Python core, whose internals the tampering below reaches (the compiled one's are read-only)."""
    with core.use("python"):
        c = RadixCache(page_size=2)
    c.insert([1, 2, 3, 4, 5, 6])
    c.insert([1, 2, 7, 8])
    c.insert([9, 9])
    c.lock(c.match_prefix([1, 2, 3, 4]).last_node)
    c.set_wait(c.match_prefix([1, 2, 7, 8]).last_node, 3)
    c.new_round()
    c.evict(2)
    c.check()
    return c


def _at(c: RadixCache, tokens: list[int]):
    """The node where `tokens` end (without touching the cache)."""
    return c.peek(tokens)[1]


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda c: setattr(c, "evictable_size", c.evictable_size + 2), "sizes"),
        (lambda c: setattr(c, "node_count", c.node_count - 1), "sizes"),
        (lambda c: setattr(_at(c, [1, 2]), "lock_ref", 0), "lock_ref 0 is less than its children's 1"),
        (lambda c: setattr(_at(c, [1, 2, 3, 4]), "depth", 5), "depth is not its parent's"),
        (lambda c: setattr(c, "page_size", 4), "not a positive multiple of page_size 4"),
        (lambda c: setattr(_at(c, [1, 2, 7, 8]), "wait", -2), "wait mark -2"),
        (lambda c: c._heap.clear(), "no current entry on the heap"),
        (lambda c: c._wait_heap.clear(), "no current entry on the wait heap"),
        (lambda c: (c.match_prefix([1, 2, 7, 8]), c._waited_touched.clear()), "not listed for new_round"),
        (lambda c: c._heap.insert(0, (10**9, 0, c.root)), "not a heap"),
        (lambda c: setattr(_at(c, [1, 2, 3, 4]), "parent", c.root), "parent pointer"),
        (lambda c: _at(c, [1, 2]).children.update({99: _at(c, [1, 2]).children.popitem()[1]}), "first page"),
        (lambda c: setattr(c.root, "lock_ref", 2), "root"),
        (lambda c: setattr(_at(c, [1, 2]), "key_bytes", b"\x00" * 16), "bytes kept for its edge"),
    ],
)
def test_check_catches_a_corrupted_cache(tamper, message):
    c = _busy_cache()
    tamper(c)
    with pytest.raises(IntegrityError, match=message):
        c.check()


def test_version_changes_with_the_shape_only():
    """`version` moves when a node is added, split or evicted, not on reads, LRU refreshes or locks;
    it is the cursor `changes_since` hands out."""
    c = RadixCache()
    v0 = c.version
    c.insert([1, 2, 3])
    v1 = c.version
    assert v1 != v0 and c.changes_since(v0)[0] == v1
    c.prefix_len([1, 2])
    node = c.match_prefix([1, 2, 3]).last_node
    c.lock(node)
    c.unlock(node)
    assert c.version == v1 and c.changes_since(v1) == (v1, [])
    c.match_prefix([1, 2, 9])  # splits [1,2,3]
    v2 = c.version
    assert v2 != v1
    c.evict(100)
    assert c.version not in (v0, v1, v2)
    c.reset()
    assert c.version not in (v0, v1, v2) and c.changes_since(v2)[1] is None


@pytest.mark.parametrize("page_size", [1, 4])
def test_edge_key_is_a_whole_page_at_a_position_from_the_start(page_size):
    """`edge_key` reads the page that starts `pos` tokens in: None where no whole page is left, and
    a negative `pos` refused (it counted from the end on the Python core and read memory before the
    array on the compiled one)."""
    c = RadixCache(page_size=page_size)
    tokens = np.arange(10, 18, dtype=np.int64)
    assert c.edge_key(tokens, 0) == (10 if page_size == 1 else tokens[:4].tobytes())
    assert c.edge_key(tokens, 8 - page_size) == (17 if page_size == 1 else tokens[4:].tobytes())
    assert c.edge_key(tokens, 9 - page_size) is None
    for pos in (-1, -page_size, -8):
        with pytest.raises(ValueError, match="pos must be >= 0"):
            c.edge_key(tokens, pos)

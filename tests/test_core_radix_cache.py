"""The compiled radix cache against the Python one (docs/design.md section 8): the same random
operations on both, every returned value and the whole tree, the heaps included, compared after
each operation, under every eviction policy and two page sizes."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import core
from auction_gym.radix_cache import EVICTION_POLICIES, RadixCache

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core (auction_gym._core) is not built")


class Side:
    """One cache and the nodes it has handed out, numbered in the order they first came back (so
    that node identity is compared too), and the values its evictions freed."""

    def __init__(self, which: str, page_size: int, policy: str) -> None:
        self.freed: list[list[int]] = []
        with core.use(which):
            self.cache = RadixCache(page_size, lambda v: self.freed.append(v.tolist()), policy)
        self.held: list = []
        self.number: dict[int, int] = {}
        self.locked: list = []

    def name(self, node) -> tuple:
        """A node as comparable data: its number, and its fields."""
        if id(node) not in self.number:
            self.number[id(node)] = len(self.held)
            self.held.append(node)
        value = None if node.value is None else tuple(node.value.tolist())
        return (self.number[id(node)], tuple(node.key.tolist()), node.depth, node.lock_ref, node.last_access,
                node.wait, node.alive, node.priority, value)

    def plain(self, x):
        """A result with its nodes named (numpy arrays and named tuples as lists)."""
        if isinstance(x, (tuple, list)):
            return [self.plain(v) for v in x]
        if isinstance(x, np.ndarray):
            return x.tolist()
        if isinstance(x, dict):
            return [[k, self.plain(v)] for k, v in x.items()]
        if x is None or isinstance(x, (int, bytes, str)):
            return x
        return self.name(x)

    def state(self) -> list:
        c = self.cache
        c.check()
        return self.plain([
            [s.tolist() for s in c.sequences()], c.evictable_size, c.protected_size, c.total_size, c.node_count,
            c.version, list(c.nodes()), c.root, c._heap, c._wait_heap, c._waited_touched, c._round_start,
            c._tick, self.freed, c.root.children,
        ])


def _tokens(rng: np.random.Generator, stems: list[np.ndarray]) -> np.ndarray | list[int]:
    """A prompt that often shares a prefix with earlier ones (a stem, cut, then new tokens): a
    writable array, a read-only one or a list."""
    stem = stems[rng.integers(len(stems))]
    cut = stem[: rng.integers(len(stem) + 1)]
    out = np.concatenate([cut, rng.integers(0, 4, rng.integers(0, 9))]).astype(np.int64)
    if rng.random() < 0.3:
        stems.append(out.copy())
    form = rng.integers(3)
    if form == 1:  # read-only, as Request.tokens: the caches keep views of it
        out.flags.writeable = False
    return out.tolist() if form == 2 else out


def _pick(rng: np.random.Generator, n: int) -> int | None:
    return int(rng.integers(n)) if n else None


def _step(rng: np.random.Generator, sides: list[Side], stems: list[np.ndarray], cursors: list) -> str:
    """One random operation on both sides; asserts their results agree. Returns its name."""
    tokens = _tokens(rng, stems)
    op = rng.choice(["insert", "insert_prefixes", "insert_values", "match", "match_from", "rematch", "peek",
                     "prefix_len", "prefix_lens", "extend", "lock", "unlock", "move_lock", "raise_priority", "evict",
                     "round", "stamp", "set_wait", "changes", "edge_key", "reset", "match_detached"],
                    p=[.09, .03, .04, .11, .06, .02, .08, .03, .02, .05, .07, .06, .03, .04, .09, .03, .04, .05, .02,
                       .02, .015, .005])
    held = _pick(rng, len(sides[0].held))
    n = int(rng.integers(0, 40))
    # A snapshot's prompts and the prefix of each to cache (one length out of range at times).
    prompts = [_tokens(rng, stems) for _ in range(rng.integers(4))] if op in ("insert_prefixes", "prefix_lens") else []
    lengths = [int(rng.integers(len(t) + 1)) for t in prompts]
    if prompts and rng.random() < 0.1:
        lengths[-1] = len(prompts[-1]) + 1

    def node(side: Side, i: int | None):
        return side.cache.root if i is None else side.held[i]

    def run(side: Side):
        c = side.cache
        if op == "insert":
            return c.insert(tokens, priority=n % 3)
        if op == "insert_prefixes":
            return c.insert_prefixes(prompts, lengths)
        if op == "insert_values":
            return c.insert(tokens, value=np.arange(100, 100 + len(tokens)), priority=n % 3)
        if op == "match":
            return c.match_prefix(tokens)
        if op == "match_from":  # from where a peek ended, after an eviction may have taken it
            _, start = c.peek(tokens)
            c.evict(n % 5)
            return c.match_prefix(tokens, start=start)
        if op == "rematch":  # stale heap entries pile up until an eviction rebuilds the heaps
            return [c.insert(tokens).cached] + [c.match_prefix(tokens).length for _ in range(60)] + [c.evict(n % 3)]
        if op == "peek":
            return c.peek(tokens, split=bool(n % 2))
        if op == "prefix_len":
            return c.prefix_len(tokens)
        if op == "prefix_lens":  # a snapshot's lengths, then its bulk peeks (splitting edges at times)
            return c.prefix_lens(prompts), c.peek_prefixes(prompts, split=bool(n % 2))
        if op == "extend":
            target = node(side, held)
            return c.extend(target, tokens) if target.alive else None
        if op == "lock" and node(side, held).alive:  # an evicted node is not the caller's to lock
            side.locked.append(node(side, held))
            return c.lock(side.locked[-1])
        if op == "lock" and node(side, held).parent is None:  # but one of a reset tree is refused
            return c.lock(node(side, held))
        if op == "match_detached" and node(side, held).parent is None:
            return c.match_prefix(tokens, start=node(side, held))
        if op == "unlock" and side.locked:
            return c.unlock(side.locked.pop(n % len(side.locked)))
        if op == "move_lock" and side.locked:
            new = c.insert(tokens).last_node
            old = side.locked.pop(n % len(side.locked))
            side.locked.append(new)
            return c.move_lock(old, new)
        if op == "raise_priority":
            return c.raise_priority(node(side, held), n % 4)
        if op == "evict":
            return c.evict(n)
        if op == "round":
            return c.new_round()
        if op == "stamp":
            return c.stamp_in_round(node(side, held), n)
        if op == "set_wait":
            return c.set_wait(node(side, held), n % 12 - 1)
        if op == "changes":
            return c.changes_since(cursors[n % len(cursors)])
        if op == "edge_key":
            return c.edge_key(tokens, n % (len(tokens) + 1))
        if op == "reset":  # the nodes handed out, locked ones included, are still held and used
            return c.reset()
        return None

    results = [_outcome(side, run) for side in sides]
    assert results[0] == results[1], op
    for t in [tokens, *prompts]:
        if isinstance(t, np.ndarray) and t.flags.writeable:
            t[:] = 7  # the caller's array changes: the caches kept their own copies of what they took
    cursors.append(sides[0].cache.version)
    return str(op)


def _outcome(side: Side, run) -> list:
    """What `run(side)` returned, as comparable data, or the exception it raised (type and message)."""
    try:
        return ["returned", side.plain(run(side))]
    except (ValueError, RuntimeError) as e:
        return [type(e).__name__, str(e)]


@pytest.mark.parametrize("page_size", [1, 2])
@pytest.mark.parametrize("policy", EVICTION_POLICIES)
@pytest.mark.parametrize("seed", range(12))
def test_both_cores_agree_on_random_operations(seed, policy, page_size):
    rng = np.random.default_rng([seed, page_size, EVICTION_POLICIES.index(policy)])
    sides = [Side("python", page_size, policy), Side("compiled", page_size, policy)]
    stems = [np.arange(6, dtype=np.int64), np.zeros(0, dtype=np.int64)]
    cursors: list = [None]
    ops = set()
    for _ in range(250):
        ops.add(_step(rng, sides, stems, cursors))
        assert sides[0].state() == sides[1].state()
    assert sides[0].freed and len(ops) >= 15  # the sequence did evict values and ran nearly every operation


class SaysWriteable(np.ndarray):
    """A view that says it is writeable, read-only or not: the caches ask it, as Python does, and
    keep a copy of what they take of it, not a view of an array its owner goes on changing."""

    @property
    def flags(self):
        class Flags:
            writeable = True

        return Flags()


def _token_forms(base: np.ndarray) -> dict:
    """Arrays of the tokens of `base` (a writable int64 array, whose tokens change after each form is
    taken) as a caller may hand them: read in place (an exact ndarray of numpy's own int64, the
    view of a subclass), through the buffer protocol (a copied dtype) or not at all (strided,
    byte-swapped)."""
    import pickle

    read_only = base.copy()
    read_only.flags.writeable = False
    says = base.view(SaysWriteable)
    np.ndarray.flags.__get__(says).writeable = False  # the array's own flags, under the property
    return {"writable": base, "read_only": read_only, "subclass": says,
            "unpickled": pickle.loads(pickle.dumps(base)), "strided": np.repeat(base, 2)[::2],
            "reversed": base[::-1].copy()[::-1], "byte_swapped": base.astype(">i8")}


@pytest.mark.parametrize("form", ["writable", "read_only", "subclass", "unpickled",
                                  "strided", "reversed", "byte_swapped"])
def test_both_caches_read_every_kind_of_token_array_alike(form):
    """Token arrays read in place, through the buffer protocol or converted, and kept as views only
    where their owner says they are read-only (`flags.writeable`, asked of a subclass as Python
    asks it): the caches agree after the arrays they took change."""
    sides = [Side("python", 1, "lru"), Side("compiled", 1, "lru")]
    results = []
    for side in sides:
        base = np.arange(10, dtype=np.int64)
        tokens = _token_forms(base)[form]
        first = side.plain(side.cache.insert(tokens))
        base[:] = 7  # what the caller may do to an array it handed over
        results.append([first, side.plain(side.cache.match_prefix(np.arange(10, dtype=np.int64))), side.state()])
    assert results[0] == results[1]


def test_the_compiled_cache_is_a_radix_cache_with_its_nodes_shared():
    with core.use("compiled"):
        c = RadixCache()
    assert isinstance(c, RadixCache) and type(c) is core.compiled_module().RadixCache
    leaf = c.insert([1, 2, 3]).last_node
    assert c.match_prefix([1, 2, 3]).last_node is leaf and {leaf: 1}[c.peek([1, 2, 3])[1]] == 1
    assert leaf.parent is c.root and c.root.children[1] is leaf


def test_the_compiled_cache_checks_its_arguments_as_the_python_one():
    with core.use("compiled"):
        with pytest.raises(ValueError, match="eviction_policy"):
            RadixCache(eviction_policy="fifo")
        with pytest.raises(ValueError, match="page_size"):
            RadixCache(page_size=0)
        c = RadixCache()
    with pytest.raises(ValueError, match="non-negative"):
        c.insert([1, -2])
    with pytest.raises(ValueError, match="value has 1 entries for 2 tokens"):
        c.insert([1, 2], value=np.arange(1))
    node = c.insert([1, 2]).last_node
    c.evict(2)
    with pytest.raises(ValueError, match="evicted"):
        c.extend(node, [3])
    with pytest.raises(RuntimeError, match="not locked"):
        c.unlock(c.insert([1, 2]).last_node)


@pytest.mark.parametrize("length", [-1, 6, 1.5, 2**70, -2**70, "2", None, [1], True, np.float64(np.nan)])
def test_both_caches_refuse_a_prefix_length_that_is_not_one_alike(length):
    """Not an integer in 0..len(prompt): ValueError naming it on both cores, after the prefixes
    before it are inserted (the compiled core's int64 conversion raised RuntimeError for some)."""
    prompts, caches = [np.arange(3, dtype=np.int64), np.arange(10, 15, dtype=np.int64)], {}
    for which in ("python", "compiled"):
        with core.use(which):
            caches[which] = RadixCache()
        with pytest.raises(ValueError, match=r"^a prefix of (.+) tokens of 5$") as refused:
            caches[which].insert_prefixes(prompts, [2, length])
        assert refused.value.args[0] == f"a prefix of {length!r} tokens of 5"
        assert [s.tolist() for s in caches[which].sequences()] == [[0, 1]]


@pytest.mark.parametrize("length", [3, np.int64(3), np.float64(3.0), 3.0])
def test_both_caches_take_a_prefix_length_that_is_an_integer_of_any_type(length):
    prompt = np.arange(10, 15, dtype=np.int64)
    for which in ("python", "compiled"):
        with core.use(which):
            cache = RadixCache()
        cache.insert_prefixes([prompt], [length])
        assert [s.tolist() for s in cache.sequences()] == [[10, 11, 12]]


CURSORS = {  # each a function of the cache's epoch
    "none": lambda e: None, "start": lambda e: (e, 0), "middle": lambda e: (e, 2), "negative": lambda e: (e, -1),
    "before_start": lambda e: (e, -100), "huge": lambda e: (e, 10**30), "huge_negative": lambda e: (e, -10**30),
    "position_none": lambda e: (e, None), "numpy_position": lambda e: (e, np.int64(1)), "bool": lambda e: (e, True),
    "numpy_epoch": lambda e: (np.int64(e), 1), "stale_epoch": lambda e: (e + 1, 0),
    "string_epoch": lambda e: (str(e), 0),
    "string_position": lambda e: (e, "2"), "float_position": lambda e: (e, 1.5), "int": lambda e: 5,
    "one_part": lambda e: (e,), "empty": lambda e: (),
}


@pytest.mark.parametrize("cursor", CURSORS)
def test_both_caches_read_any_cursor_of_changes_since_alike(cursor):
    """`changes_since` reads a cursor as the Python cache does, whatever it is: the epoch compared
    by !=, the log sliced from the position as a list slices, the same errors (the compiled cache
    raised RuntimeError: std::bad_cast for parts that are not ints within 64 bits)."""
    seen = []
    for which in ("python", "compiled"):
        with core.use(which):
            c = RadixCache()
        for prompt in ([0, 1, 2, 3], [0, 1, 7], [0, 5]):
            c.insert(np.array(prompt, dtype=np.int64))
        try:
            now, changes = c.changes_since(CURSORS[cursor](c.version[0]))
            seen.append((now, None if changes is None else [key for _, key in changes]))
        except (TypeError, IndexError) as e:
            seen.append(type(e))
    assert seen[0] == seen[1]


@pytest.mark.parametrize("which", ["python", "compiled"])
def test_a_node_of_a_reset_tree_reads_as_evicted_and_breaks_nothing(which):
    """A reset detaches the old tree: a node kept from it, locked or not, is evicted to every
    operation, which never follows its missing parent; lock and unlock refuse it unchanged."""
    with core.use(which):
        c = RadixCache()
    old = c.insert([1, 2, 3]).last_node
    locked = c.insert([1, 2, 3, 4]).last_node
    c.lock(locked)
    touched = old.last_access
    c.reset()
    assert not old.alive and old.parent is None and not old.children
    c.set_wait(old, 1)
    c.stamp_in_round(old, 1)
    c.raise_priority(old, 5)
    assert (old.wait, old.last_access, old.priority) == (-1, touched, 5)
    leaf = c.insert([1, 2]).last_node
    assert c.evict(10) == 2 and not leaf.alive and c._heap == [] and c._wait_heap == []
    with pytest.raises(ValueError, match="detached"):
        c.match_prefix([1, 2, 3], start=old)
    for refused in (c.lock, c.unlock):
        with pytest.raises(ValueError, match="detached"):
            refused(locked)
        assert locked.lock_ref == 1 and c._heap == [] and (c.evictable_size, c.protected_size) == (0, 0)
    with pytest.raises(ValueError, match="detached"):
        c.move_lock(locked, c.insert([5]).last_node)
    assert c.protected_size == 1  # `lock(new)` then `unlock(old)`: the lock taken stays
    c.check()


COUNTS = [3, np.int64(3), True, -1, 3.0, np.float64(3.0), 2.5, float("nan"), "3", None, 2**63, -2**63 - 1]
CACHE_CALLS = {  # each a call of a cache holding [0..7] (its leaf `node`) with `v` as its int argument
    "evict": lambda c, node, v: c.evict(v),
    "raise_priority": lambda c, node, v: (c.raise_priority(node, v), node.priority),
    "insert": lambda c, node, v: (c.insert(np.arange(100, 104), priority=v).cached, c.root.children[100].priority),
    "extend": lambda c, node, v: (c.extend(node, np.arange(50, 53), priority=v).cached, node.children[50].priority),
}


@pytest.mark.parametrize("call", CACHE_CALLS)
@pytest.mark.parametrize("value", COUNTS, ids=repr)
def test_both_caches_take_an_int_within_64_bits_as_a_count_or_priority_and_refuse_the_rest(call, value):
    """A token count or a priority is an int within 64 bits (numpy's ints and bools too) on both
    cores, read as that int; anything else is a TypeError on both (the Python cache took floats
    and ints beyond 64 bits, which the compiled one refuses). A negative count to evict is a
    ValueError on both (both returned 0)."""
    seen = []
    for which in ("python", "compiled"):
        with core.use(which):
            c = RadixCache(eviction_policy="priority")
        node = c.insert(np.arange(8)).last_node
        try:
            seen.append(CACHE_CALLS[call](c, node, value))
        except (TypeError, ValueError) as error:
            seen.append(type(error))
    assert seen[0] == seen[1]
    accepted = type(value) is not float and isinstance(value, (int, np.integer)) and -2**63 <= value < 2**63
    refused = TypeError if not accepted else ValueError if call == "evict" and value < 0 else None
    assert (seen[0] if seen[0] in (TypeError, ValueError) else None) is refused
    if accepted and call != "evict":
        assert type(seen[0][1]) is int

"""The compiled prefix matcher and waiting prefixes against the Python ones (docs/design.md
section 8): the same random queues (requests joining, leaving, coming back) and cache changes
(inserts, splits, evictions, a reset, a new cache) between refreshes on both cores; every result, in its order
(a QueueDelta's lists, `length_of`'s items, the matchers' lists), and the whole cache compared
after each operation, under both eviction policies and two page sizes."""

from __future__ import annotations

import numpy as np
import pytest
from test_core_radix_cache import Side, _tokens

from auction_gym import core
from auction_gym.policy import QueueDelta
from auction_gym.prefix_matcher import PrefixMatcher
from auction_gym.radix_cache import EVICTION_POLICIES, RadixCache
from auction_gym.request import Request
from auction_gym.waiting_prefixes import WaitingPrefixes

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core (auction_gym._core) is not built")

MATCHERS = [(False, False), (True, False), (False, True), (True, True)]
"""(split, whole_prompt) of the matchers each side drives beside its WaitingPrefixes."""


class Waiting(Side):
    """A cache, a WaitingPrefixes and one PrefixMatcher per option, all on one core."""

    def __init__(self, which: str, page_size: int, policy: str) -> None:
        super().__init__(which, page_size, policy)
        self.which, self.page_size, self.policy = which, page_size, policy
        with core.use(which):
            self.prefixes = WaitingPrefixes()
            self.matchers = [PrefixMatcher(split, whole) for split, whole in MATCHERS]

    def new_cache(self) -> None:
        """Move to a new cache, which the next refresh and updates meet."""
        self.held, self.number = [], {}
        with core.use(self.which):
            self.cache = RadixCache(self.page_size, lambda v: self.freed.append(v.tolist()), self.policy)

    def plain(self, x):
        """A result as comparable data: requests by id, every container in its iteration order."""
        if isinstance(x, Request):
            return ["request", x.id]
        if isinstance(x, QueueDelta):
            return self.plain([x.joined, x.left, x.rematched, x.length_of])
        if isinstance(x, set):
            return self.plain(list(x))
        if isinstance(x, dict):
            return [[self.plain(k), self.plain(v)] for k, v in x.items()]
        if isinstance(x, (tuple, list)):
            return [self.plain(v) for v in x]
        return super().plain(x)


class Queue:
    """The waiting queue both sides read: a new list after every change (`lengths` takes the list
    it refreshed to hold what it held then), and (joined, left) since the last refresh."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.gone: list[Request] = []
        self.joined: dict[Request, None] = {}
        self.left: set[Request] = set()
        self.next_id = 0

    def join(self, r: Request) -> None:
        self.requests = [*self.requests, r]
        if r in self.left:  # it waited at the last refresh: back, not new (as WaitingQueue counts)
            self.left.discard(r)
        else:
            self.joined[r] = None

    def leave(self, r: Request) -> None:
        self.requests = [q for q in self.requests if q is not r]
        self.gone.append(r)
        if r in self.joined:
            del self.joined[r]
        else:
            self.left.add(r)

    def take_changes(self) -> tuple[list[Request], set[Request]]:
        out = list(self.joined), self.left
        self.joined, self.left = {}, set()
        return out


def _step(rng: np.random.Generator, sides: list[Waiting], queue: Queue, stems: list[np.ndarray]) -> str:
    """One random operation on both sides (the queue's changes before it); asserts their results agree."""
    op = str(rng.choice(["join", "leave", "rejoin", "insert", "split", "evict", "new_cache", "reset", "refresh",
                         "lengths", "length_of", "delta_since", "start", "match"],
                        p=[.16, .08, .03, .12, .05, .08, .01, .02, .16, .06, .04, .05, .06, .08]))
    n = int(rng.integers(0, 40))
    tokens = _tokens(rng, stems)
    if op == "join":
        for _ in range(1 + n % 4):
            arrival = float(rng.integers(0, 5))  # ties, broken by id
            queue.join(Request(queue.next_id, 0, [*_tokens(rng, stems), 9], 1.0, arrival=arrival))
            queue.next_id += 1
    elif op == "leave" and queue.requests:
        queue.leave(queue.requests[n % len(queue.requests)])
    elif op == "rejoin" and queue.gone:  # a retracted request waits again, the same object
        r = queue.gone.pop(n % len(queue.gone))
        if all(q.id != r.id for q in queue.requests):
            queue.join(r)
    if op == "refresh":
        changes = queue.take_changes()
        changes = changes if n % 3 else None
    order = queue.requests if n % 2 else list(reversed(queue.requests))
    probe = queue.requests[n % len(queue.requests)] if queue.requests and n % 5 else (queue.gone or [None])[-1]

    def run(side: Waiting):
        c, w = side.cache, side.prefixes
        if op == "insert":
            return c.insert(tokens)
        if op == "split":
            return c.peek(tokens, split=True)
        if op == "evict":
            return c.evict(n)
        if op == "new_cache":
            return side.new_cache()
        if op == "reset":  # the marks, matches and starts still name the old tree's nodes
            return c.reset()
        if op == "refresh":
            return w.refresh(queue.requests, c, changes)
        if op == "lengths":
            return w.lengths(queue.requests if n % 2 else list(queue.requests), c)
        if op == "length_of":
            return w.length_of
        if op == "delta_since":
            return w.delta_since(w.serial - n % 6)
        if op == "start":
            return None if probe is None else w.start(probe, n)
        if op == "match":
            return [[m.update(order, c), m.dropped, m.added, m.splits, m.joined, m.left, m.rematched, m.length_of,
                     m.requests] for m in side.matchers]
        return None

    results = [side.plain(run(side)) for side in sides]
    assert results[0] == results[1], op
    return op


@pytest.mark.parametrize("page_size", [1, 2])
@pytest.mark.parametrize("policy", EVICTION_POLICIES)
@pytest.mark.parametrize("seed", range(10))
def test_both_cores_agree_on_random_queues_and_caches(seed, policy, page_size):
    rng = np.random.default_rng([seed, page_size, EVICTION_POLICIES.index(policy), 7])
    sides = [Waiting("python", page_size, policy), Waiting("compiled", page_size, policy)]
    stems = [np.arange(6, dtype=np.int64), np.zeros(0, dtype=np.int64)]
    queue, ops, splits = Queue(), set(), 0
    for _ in range(300):
        ops.add(_step(rng, sides, queue, stems))
        assert sides[0].state() == sides[1].state()
        splits += bool(sides[0].prefixes._matcher.splits)
    assert len(ops) >= 12 and splits  # (nearly) every operation ran, and some refresh split an edge


def test_the_compiled_ones_are_the_python_classes_and_refuse_a_python_cache():
    with core.use("compiled"):
        prefixes, matcher = WaitingPrefixes(), PrefixMatcher(split=True)
    assert isinstance(prefixes, WaitingPrefixes) and isinstance(matcher, PrefixMatcher)
    assert type(prefixes) is core.compiled_module().WaitingPrefixes and matcher.split and not matcher.whole_prompt
    with core.use("python"):
        cache = RadixCache()
    r = Request(0, 0, [1, 2, 3], 1.0)
    with pytest.raises(TypeError, match="compiled RadixCache only"):
        prefixes.refresh([r], cache)
    with pytest.raises(TypeError, match="compiled RadixCache only"):
        matcher.update([r], cache)


@pytest.mark.parametrize("which", ["python", "compiled"])
def test_a_start_in_a_reset_tree_is_refused_where_it_would_climb(which):
    with core.use(which):
        c, w = RadixCache(), WaitingPrefixes()
    c.insert([1, 2, 3, 4])
    r = Request(0, 0, [1, 2, 3, 4, 9], 1.0, arrival=0.0)
    w.refresh([r], c, None)
    c.reset()
    kept = w.start(r, 4)  # where the refresh matched: no climb
    assert kept.depth == 4 and not kept.alive and kept.parent is None
    with pytest.raises(ValueError, match="reset since"):
        w.start(r, 2)
    w.refresh([r], c, None)
    assert w.length_of[r] == 0 and w.start(r, 2) is c.root


class _LaterRequest(Request):
    """A Request of another class: its keys are sorted by Python on either core."""

    __slots__ = ()


@pytest.mark.parametrize("seed", range(6))
def test_both_cores_rank_joining_requests_in_arrival_order(seed):
    """The ranks a refresh hands its new requests, in fcfs_key's order: tied, early and late
    arrivals, Requests and a subclass (whose keys Python sorts on either core) joining several at
    a time, some leaving between refreshes."""
    rng = np.random.default_rng([seed, 11])
    sides = {}
    for which in ("python", "compiled"):
        with core.use(which):
            sides[which] = (RadixCache(), WaitingPrefixes())
    waiting: list[Request] = []
    for rid in range(150):
        cls = _LaterRequest if rng.random() < 0.2 else Request
        arrival = float(rng.integers(0, 4)) if rng.random() < 0.5 else float(rng.random() * 4)
        waiting.append(cls(rid, 0, [1, 2, int(rng.integers(0, 3)), 5], 1.0, arrival=arrival))
        if rng.random() < 0.3 and len(waiting) > 1:
            waiting.pop(int(rng.integers(0, len(waiting) - 1)))
        if rng.random() < 0.4:
            for cache, prefixes in sides.values():
                prefixes.refresh(list(waiting), cache, None)
            python, compiled = (prefixes._rank for _, prefixes in sides.values())
            assert python == compiled and set(python) == {r.id for r in waiting}


@pytest.mark.parametrize("seed", range(4))
def test_the_waiting_prefixes_matcher_returns_the_match_it_keeps_in_cpp(seed):
    """The compiled waiting prefixes' own matcher keeps no `_match` dict, request by request: its
    `update` builds it, each request in the order it was last matched, as the Python one's dict
    iterates (ids re-matched after cache changes move to the end)."""
    rng = np.random.default_rng([seed, 11])
    sides = [Waiting("python", 1, "lru"), Waiting("compiled", 1, "lru")]
    for side in sides:
        with core.use(side.which):
            side.matchers = [side.prefixes._matcher if side.which == "compiled" else PrefixMatcher(True, True)]
    assert not sides[1].prefixes._matcher._match  # kept in C++ only
    stems = [np.arange(6, dtype=np.int64)]
    queue, moved = Queue(), 0
    for _ in range(150):
        op = str(rng.choice(["join", "leave", "insert", "evict", "update"], p=[.25, .1, .25, .1, .3]))
        n = int(rng.integers(0, 40))
        tokens = _tokens(rng, stems)
        if op == "join":
            queue.join(Request(queue.next_id, 0, [*_tokens(rng, stems), 9], 1.0, arrival=float(n % 3)))
            queue.next_id += 1
        elif op == "leave" and queue.requests:
            queue.leave(queue.requests[n % len(queue.requests)])
        results = []
        for side in sides:
            m = side.matchers[0]
            if op == "insert":
                side.cache.insert(tokens)
            elif op == "evict":
                side.cache.evict(n)
            elif op == "update":
                match = m.update(queue.requests, side.cache)
                results.append(side.plain([match, m.dropped, m.added, m.splits, m.length_of, m.requests]))
                moved += list(match) != sorted(match)
        assert results[:1] == results[1:], op
        assert sides[0].state() == sides[1].state()
    assert moved  # some re-match reordered the match

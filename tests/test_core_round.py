"""A round on the compiled core (mechanism/compiled_tree.py, csrc/round_tree.cpp) against the Python
reference: bad inputs raise what the Python tree raises and leave both trees as they were, and a
round over the skeleton reads its order and payments without its per-block lists, then the lists
on first use, all bit for bit. tests/test_core_allocator.py drives the trees through random rounds
of valid changes."""

from __future__ import annotations

import gc
import itertools
import weakref

import numpy as np
import pytest

from auction_gym import Request, core
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.mechanism.compiled_tree import CompiledQueueTree
from auction_gym.mechanism.incremental_tree import IncrementalQueueTree
from auction_gym.policy import QueueDelta

pytestmark = pytest.mark.skipif(core.compiled_module() is None,
                                reason="the compiled core (auction_gym._core) is not built")

BIDDERS = 3


def _trees(costed: bool = True) -> list[IncrementalQueueTree]:
    return [IncrementalQueueTree(1.0, costed, True), CompiledQueueTree(1.0, costed, True)]


def _outcome(tree: IncrementalQueueTree, call) -> tuple:
    """What `call(tree)` raised (type and message) or returned (None)."""
    try:
        call(tree)
    except (AssertionError, KeyError, TypeError, ValueError) as error:
        return type(error), str(error)
    return None


def _same(trees: list[IncrementalQueueTree], queue: list[Request], bids: list[float], lens: list[int]) -> None:
    """Both trees hold `queue` alike: the same order and node stats, the same round over the skeleton."""
    py, cc = trees
    assert [r.id for r in cc.order()] == [r.id for r in py.order()]
    assert cc.node_stats() == py.node_stats()
    alpha = [1.0, 0.5, 0.0]
    money = [alpha[r.bidder] * b for r, b in zip(queue, bids)]
    decided = [t.factored(queue, money, lens, alpha) for t in trees]
    assert decided[1].admission == decided[0].admission and decided[1].cost.hex() == decided[0].cost.hex()


def _bad_round(rng: np.random.Generator, queue: list[Request], ids) -> tuple[list[Request], list[object], QueueDelta | None]:
    """A round whose inputs one of the checks refuses, or that converts them: a bid that is NaN,
    negative, infinite, not a number or an int, a request's own bid bad, an id held already or
    repeated among those joining, the same request twice, an empty or listed prompt."""
    kind = rng.integers(11)
    bids: list[object] = [float(rng.uniform(0, 3)) for _ in queue]
    joined: list[Request] = []
    if kind in (0, 1, 2, 3, 4):  # a bad bid: of a request that joins (even kinds) or stays
        bad = [float("nan"), -1.0, float("inf"), "x", 2][kind]
        if kind % 2:
            bids[int(rng.integers(len(queue)))] = bad
        else:
            joined = [Request(next(ids), 0, [1, 2], bid=1.0)]
            bids.append(bad)
    elif kind == 5:  # its own bid gone bad: validate_requests names it
        joined = [Request(next(ids), 1, [1, 3], bid=1.0)]
        joined[0].bid = float("nan")
        bids.append(1.0)
    elif kind == 6:  # an id the tree holds
        joined = [Request(queue[0].id, 2, [4], bid=1.0)]
        bids.append(1.0)
    elif kind == 7:  # one id twice among those joining
        rid = next(ids)
        joined = [Request(rid, 0, [5], bid=1.0), Request(rid, 1, [6], bid=1.0)]
        bids += [1.0, 1.0]
    elif kind == 8:  # an empty prompt
        joined = [Request(next(ids), 0, [7], bid=1.0)]
        joined[0].tokens = np.zeros(0, dtype=np.int64)
        bids.append(1.0)
    elif kind == 9:  # a prompt as a list: converted, accepted
        joined = [Request(next(ids), 0, [8], bid=1.0)]
        joined[0].tokens = [1, 2, 8]
        bids.append(1.0)
    else:  # the same request twice (compared, not reported)
        return queue + queue[:1], bids + bids[:1], None
    now = queue + joined
    delta = QueueDelta(joined=joined, left=[], rematched=[], length_of={r: 0 for r in now})
    return now, bids, delta if rng.random() < 0.5 else None


@pytest.mark.parametrize("seed", range(8))
def test_a_refused_round_raises_what_the_python_tree_raises_and_changes_nothing(seed):
    rng = np.random.default_rng(seed)
    trees = _trees()
    ids = itertools.count(100)
    queue = [Request(next(ids), k % BIDDERS, [1, 2, k % 3, k], bid=1.0) for k in range(6)]
    bids, lens = [1.0 + k % 3 for k in range(6)], [0] * 6
    for t in trees:
        t.update(queue, bids, lens)
    refused = 0
    for _ in range(40):
        now, now_bids, delta = _bad_round(rng, queue, ids)
        now_lens = [0] * len(now)
        raised = [_outcome(t, lambda t: t.update(now, now_bids, now_lens, delta)) for t in trees]
        assert raised[1] == raised[0]
        if raised[0] is None:  # accepted (a converted prompt, an int bid): the queue moves on
            queue, bids, lens = now, [float(b) for b in now_bids], now_lens
            if delta is not None:  # the next round compares queues, so both trees agree from here
                for t in trees:
                    t.update(queue, bids, lens)
        else:
            refused += 1
        _same(trees, queue, bids, lens)
    assert refused > 20


def test_reported_changes_that_do_not_lead_to_the_queue_are_refused_alike():
    a, b, c = (Request(k, k % 2, [1, k], bid=1.0) for k in range(3))
    trees = _trees()
    for t in trees:
        t.update([a, b], [1.0, 1.0], [0, 0])
    for queue, delta in (
        ([b], QueueDelta(joined=[], left=[c], rematched=[], length_of={b: 0})),  # left, never held
        ([a, b, c], QueueDelta(joined=[], left=[], rematched=[], length_of={})),  # a missed arrival
        ([a, c], QueueDelta(joined=[b], left=[b], rematched=[], length_of={c: 0})),  # the wrong arrival
        ([a, b], QueueDelta(joined=[], left=[], rematched=[c], length_of={c: 1})),  # rematched, not held
    ):
        raised = [_outcome(t, lambda t: t.update(queue, [1.0] * len(queue), [0] * len(queue), delta)) for t in trees]
        assert raised[0] is not None and raised[1] == raised[0]
        _same(trees, [a, b], [1.0, 1.0], [0, 0])


@pytest.mark.parametrize("reported", [False, True])
def test_a_request_id_beyond_int64_is_refused_by_the_compiled_tree(reported):
    tree = CompiledQueueTree(1.0, costed=True, cache_ties=False)
    a = Request(1, 0, [1, 2], bid=1.0)
    tree.update([a], [1.0], [0])
    huge = Request(2, 1, [1, 3], bid=1.0)
    huge.id = 1 << 63  # past the constructor's check, which refuses it too
    delta = QueueDelta(joined=[huge], left=[], rematched=[], length_of={a: 0, huge: 0}) if reported else None
    with pytest.raises(ValueError, match=f"request {1 << 63}: the compiled core holds request ids within int64"):
        tree.update([a, huge], [1.0, 1.0], [0, 0], delta)
    assert tree.order() == [a] and tree.node_stats() == []


@pytest.mark.parametrize("seed", range(6))
def test_a_compiled_round_prices_from_its_order_alone_then_reads_its_lists_alike(seed):
    """The order and the payments of a round over the skeleton, read before anything else of it,
    and then its per-block lists, equal the Python tree's bit for bit."""
    rng = np.random.default_rng(seed)
    auction = RadixTreeAuction()
    ids = itertools.count()
    queue = [Request(next(ids), int(rng.integers(BIDDERS)), [int(t) for t in rng.integers(0, 3, size=4)], bid=1.0)
             for _ in range(12)]
    urgency = [float(rng.uniform(0, 3)) for _ in queue]
    lens = [int(rng.integers(0, 3)) for _ in queue]
    alpha = [float(rng.uniform(0, 2)) for _ in range(BIDDERS)]
    money = [alpha[r.bidder] * u for r, u in zip(queue, urgency)]
    decided = []
    for t in _trees():
        t.update(queue, urgency, lens)
        decided.append(t.factored(queue, money, lens, alpha))
    py, cc = decided
    assert "s" not in vars(cc) and cc.admission == py.admission
    assert {i: p.hex() for i, p in auction.payments(cc).items()} == {i: p.hex() for i, p in auction.payments(py).items()}
    assert "s" not in vars(cc)  # priced without its lists
    for name in ("leaf_owner", "s", "p", "f", "tie", "key", "sorted_blocks", "g", "sum_f", "leaf_order", "completion"):
        assert repr(getattr(cc, name)) == repr(getattr(py, name))
    assert vars(cc.tree) == vars(py.tree)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cc.nope  # noqa: B018


def test_a_prompt_the_tree_reads_outlives_its_request_and_goes_with_the_tree():
    """The compiled tree reads a read-only prompt in place: a node keeps the array of the request
    it was split from after that request has left, and drops it with the tree."""
    trees = _trees()
    a, b = Request(1, 0, [1, 2, 3, 4], bid=1.0), Request(2, 1, [1, 2, 3, 5], bid=1.0)
    kept = [weakref.ref(a.tokens), weakref.ref(b.tokens)]
    for t in trees:
        t.update([a, b], [1.0, 1.0], [0, 0])
    c = Request(3, 0, [1, 2, 9], bid=1.0)
    for t in trees:
        t.update([b, c], [1.0, 1.0], [0, 0], QueueDelta(joined=[c], left=[a], rematched=[], length_of={b: 0, c: 0}))
    del a
    gc.collect()
    d = Request(4, 1, [1, 2, 3, 7], bid=2.0)
    for t in trees:
        t.update([b, c, d], [1.0, 1.0, 2.0], [0, 0, 0])
    _same(trees, [b, c, d], [1.0, 1.0, 2.0], [0, 0, 0])
    del trees, t, b
    gc.collect()
    assert [ref() for ref in kept] == [None, None]


class _Emptying:
    """A bid that, as it is converted, empties the lists it was given (the queue the tree is
    reading), so that the requests that join are left with no holder but the tree."""

    def __init__(self, value: float, lists: list[list]) -> None:
        self.value, self.lists = value, lists

    def __float__(self) -> float:
        for items in self.lists:
            items.clear()
        gc.collect()
        return self.value


@pytest.mark.parametrize("reported", [False, True])
def test_a_queue_emptied_by_a_callback_is_read_as_it_was_given(reported):
    """A round's inputs are read as they were when the call began, whatever a callback does to the
    caller's lists meanwhile: the compiled tree holds what the Python tree holds, and reads no
    request freed under it."""
    trees = _trees()
    held = Request(1, 0, [1, 2, 3], bid=1.0)
    for t in trees:
        t.update([held], [1.0], [0])
    for t in trees:
        queue = [held] + [Request(k, k % BIDDERS, [1, 2, k], bid=1.0) for k in range(2, 7)]
        joined = queue[1:]
        bids: list[object] = [1.0, _Emptying(2.5, [queue, joined])] + [float(k) for k in range(4)]
        delta = QueueDelta(joined=joined, left=[], rematched=[], length_of={r: 0 for r in queue})
        t.update(queue, bids, [0] * 6, delta if reported else None)
        del queue, joined, bids, delta
        gc.collect()
    py, cc = trees
    assert [(r.id, r.bidder) for r in cc.order()] == [(r.id, r.bidder) for r in py.order()]
    assert len(py.order()) == 6 and cc.node_stats() == py.node_stats()


class _Tokens(np.ndarray):
    """An ndarray subclass, which the compiled tree reads through the buffer protocol."""


def _every_kind_of_prompt() -> list[np.ndarray]:
    """Int64 prompts of every layout the compiled tree reads in place or converts: read-only and
    writable, contiguous and strided, one token at an odd stride, byte-swapped, a subclass."""
    base = np.arange(24, dtype=np.int64) % 5
    frozen = base.copy()
    frozen.flags.writeable = False
    return [frozen, base.copy(), base[::2], frozen[1::3], np.arange(9, dtype=np.int64)[4:5:3],
            base.astype(">i8"), base.copy().view(_Tokens), np.arange(12, dtype=np.int64).reshape(6, 2)[:, 1],
            np.array([7], dtype=np.int64)]


@pytest.mark.parametrize("reported", [False, True])
def test_every_kind_of_int64_prompt_is_placed_alike(reported):
    """Each kind of prompt joins both trees (reported or compared) to the same tree; a writable one
    changed in place is placed again as the Python tree places it."""
    trees = _trees()
    queue: list[Request] = []
    for k, tokens in enumerate(_every_kind_of_prompt()):
        request = Request(k, k % BIDDERS, [1], bid=1.0)
        request.tokens = tokens
        delta = QueueDelta(joined=[request], left=[], rematched=[], length_of={r: 0 for r in queue + [request]})
        queue.append(request)
        for t in trees:
            t.update(queue, [1.0] * len(queue), [0] * len(queue), delta if reported else None)
        _same(trees, queue, [1.0] * len(queue), [0] * len(queue))
    queue[1].tokens[3:] = 4
    for t in trees:
        t.update(queue, [1.0] * len(queue), [0] * len(queue))
    _same(trees, queue, [1.0] * len(queue), [0] * len(queue))

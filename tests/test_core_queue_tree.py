"""The queue's tree built from scratch by the compiled core against `build_queue_tree` on the
Python core (a fresh `TokenMemo`'s stable sort), and `completion_times` over it.

Random queues with deep shared prefixes, equal prompts held by distinct arrays, prompts that are
prefixes of others, tokens whose byte order is not their numeric order, and cached lengths of every
kind (none, inside an edge, at a node, the whole prompt, beyond it), under both cost models: every
list of the tree, and the completion times of random orders, must be the same bit for bit (floats
by their hex form). Inputs the compiled builder does not take go to the Python one on either core.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from auction_gym import Request, core
from auction_gym.mechanism import StrictPriorityAuction
from auction_gym.mechanism.queue_tree import (
    QueueTree,
    TokenMemo,
    build_queue_tree,
    completion_times,
    weighted_cost,
    weighted_costs,
)

pytestmark = pytest.mark.skipif(core.compiled_module() is None,
                                reason="the compiled core (auction_gym._core) is not built")

LISTS = ("parent", "depth", "children", "attached", "edge_work", "req_node", "req_work")
HEADS = ([7, 7, 7, 7, 7, 7], [1, 256, 1, 256, 1], [255, 2**63 - 1, 2**40], [5])
"""Shared heads: 256 sorts before 1, and 2**63 - 1 after 2**40, by their (little-endian) bytes."""


def _bits(x: object) -> object:
    """`x` with every float as its hex form (exact, sign of zero included), lists kept."""
    if isinstance(x, float):
        return x.hex()
    if isinstance(x, list):
        return [_bits(v) for v in x]
    return x


def _lists(tree: QueueTree) -> dict[str, object]:
    return {name: _bits(getattr(tree, name)) for name in LISTS}


def _queue(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Cuts of shared heads plus short tails, read-only as `Request.tokens` are; some prompts
    repeat an earlier one's tokens in an array of their own, some are an earlier one's prefix."""
    tokens: list[np.ndarray] = []
    for _ in range(n):
        kind = rng.integers(4)
        if kind == 0 and tokens:
            t = np.array(tokens[rng.integers(len(tokens))])  # equal prompt, distinct array
        elif kind == 1 and tokens:
            earlier = tokens[rng.integers(len(tokens))]
            t = np.array(earlier[: rng.integers(1, len(earlier) + 1)])  # a prefix of another
        else:
            head = HEADS[rng.integers(len(HEADS))]
            tail = [int(v) for v in rng.integers(0, 3, size=rng.integers(0, 4))]
            t = np.array(head[: rng.integers(0, len(head) + 1)] + tail or [1], dtype=np.int64)
        t.flags.writeable = False
        tokens.append(t)
    return tokens


def _cached(rng: np.random.Generator, tokens: list[np.ndarray]) -> list[int]:
    """Per prompt: nothing, part of it, all of it, or more than its length cached."""
    return [int(rng.choice([0, rng.integers(0, len(t) + 1), len(t), len(t) + 3])) for t in tokens]


def _python_tree(tokens: list, prefix_lens: list[int] | None) -> QueueTree:
    with core.use("python"):
        return build_queue_tree(tokens, prefix_lens)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("costed", [True, False])
def test_compiled_tree_is_the_python_tree(seed, costed):
    rng = np.random.default_rng(seed)
    tokens = _queue(rng, int(rng.choice([1, 2, 3, 8, 30, 200])))
    lens = _cached(rng, tokens) if costed else None
    with core.use("compiled"):
        tree = build_queue_tree(tokens, lens)
    assert (tree.compiled is not None) == (len(tokens) > 1)  # a lone request needs no sort
    reference = _python_tree(tokens, lens)
    assert reference.compiled is None
    assert _lists(tree) == _lists(reference)
    for work in (1.0, 0.0, 0.3):
        order = [int(r) for r in rng.permutation(len(tokens))]
        assert _bits(completion_times(tree, order, work)) == _bits(completion_times(reference, order, work))
        weights = [float(w) for w in rng.choice([0.0, 1e-300, 0.1, 3.0, 1e12], size=len(tokens))]
        assert tree.compiled is None or tree.compiled.weighted_cost(order, work, weights) is not None
        assert _bits(weighted_cost(tree, order, work, weights)) == _bits(weighted_cost(reference, order, work, weights))


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("costed", [True, False])
def test_weighted_costs_of_orders_of_requests_are_the_python_ones(seed, costed):
    """Many orders of one queue, named by its requests, costed in one compiled call: each cost that
    of the Python tree with the requests' places (by identity) in the queue."""
    rng = np.random.default_rng(seed)
    tokens = _queue(rng, int(rng.choice([2, 3, 8, 30, 200])))
    queue = [Request(id=i, bidder=0, tokens=t) for i, t in enumerate(tokens)]
    lens = _cached(rng, tokens) if costed else None
    with core.use("compiled"):
        tree = build_queue_tree(tokens, lens)
    reference = _python_tree(tokens, lens)
    orders = [[queue[int(r)] for r in rng.permutation(len(queue))] for _ in range(int(rng.integers(0, 8)))]
    weights = [float(w) for w in rng.choice([0.0, 1e-300, 0.1, 3.0, 1e12], size=len(queue))]
    work = float(rng.choice([1.0, 0.0, 0.3]))
    costs = tree.compiled.weighted_costs(queue, orders, work, weights)
    assert costs is not None and len(costs) == len(orders)
    assert _bits(costs) == _bits(weighted_costs(reference, queue, orders, work, weights))
    position = {r: i for i, r in enumerate(queue)}
    assert _bits(costs) == _bits([weighted_cost(reference, [position[r] for r in o], work, weights) for o in orders])


def test_weighted_costs_it_declines_are_the_python_ones():
    """An order holding a request not in the queue raises Python's KeyError; requests that are not
    plain Requests, orders that are not lists and weights not floats are costed in Python."""
    tree, reference = _both_trees(5, 9)
    queue = [Request(id=i, bidder=0, tokens=np.array([i % 3 + 1], dtype=np.int64)) for i in range(9)]
    order = queue[::-1]
    with pytest.raises(KeyError):
        weighted_costs(tree, queue, [order[:-1] + [Request(id=99, bidder=0, tokens=[1])]], 1.0, [1.0] * 9)
    for q, orders, weights in ((queue, [tuple(order)], [1.0] * 9), (queue, [order], [1] * 9),
                               (list(range(9)), [list(range(9))[::-1]], [1.0] * 9)):
        assert tree.compiled.weighted_costs(q, orders, 1.0, weights) is None
        assert _bits(weighted_costs(tree, q, orders, 1.0, weights)) == _bits(weighted_costs(reference, q, orders, 1.0, weights))


def test_weights_it_declines_are_added_in_python():
    """Weights other than a list of floats, one per request, are multiplied and added by Python's
    rules (an int weight, a tuple, a list too short for the queue): the same cost on either path."""
    tree, reference = _both_trees(5, 9)
    order = list(range(9))[::-1]
    for weights in ([1] * 9, tuple([0.5] * 9), [0.25] * 4):
        assert tree.compiled.weighted_cost(order, 1.0, weights) is None
        assert _bits(weighted_cost(tree, order, 1.0, weights)) == _bits(weighted_cost(reference, order, 1.0, weights))


def test_equal_prompts_are_attached_in_queue_order():
    """A stable sort: arrays with the same tokens keep their queue order, as sorted() gives."""
    tokens = [np.array(t, dtype=np.int64) for t in ([3, 4], [1, 2], [3, 4], [1, 2], [3, 4])]
    with core.use("compiled"):
        tree = build_queue_tree(tokens, [0, 1, 2, 0, 2])
    assert tree.compiled is not None
    assert sorted(tree.attached, key=len)[-2:] == [[1, 3], [0, 2, 4]]
    assert _lists(tree) == _lists(_python_tree(tokens, [0, 1, 2, 0, 2]))


@pytest.mark.parametrize("make", [
    lambda a: a[::2],  # strided
    lambda a: np.array(a),  # writeable
])
def test_arrays_read_in_place_or_copied(make):
    rng = np.random.default_rng(5)
    tokens = [make(np.repeat(t, 2)) for t in _queue(rng, 12)]
    lens = _cached(rng, tokens)
    with core.use("compiled"):
        tree = build_queue_tree(tokens, lens)
    assert tree.compiled is not None
    assert _lists(tree) == _lists(_python_tree(tokens, lens))


def _outcome(which: str, tokens: list, lens: list) -> tuple[bool, object]:
    """(built by the compiled core, the lists) of the tree on core `which`, or the error raised."""
    with core.use(which):
        try:
            tree = build_queue_tree(tokens, lens)
        except (AttributeError, IndexError, ValueError) as e:
            return False, type(e)
    return tree.compiled is not None, _lists(tree)


@pytest.mark.parametrize("tokens,lens", [
    ([[1, 2], [1, 3]], [0, 1]),  # prompts that are lists (which the Python builder refuses)
    ([np.array([1, 2], dtype=np.int32), np.array([1, 3], dtype=np.int32)], [0, 1]),
    ([np.array([1, 2]), np.array([1, 3])], [np.int64(1), 0]),  # a length not an int
    ([np.array([1, 2]), np.array([1, 3])], [-1, 0]),
    ([np.array([1, 2]), np.array([1, 3]), np.array([1])], [1, 1]),  # a length short
    ([np.array([1, 2]), np.array([], dtype=np.int64)], [0, 0]),  # an empty prompt
])
def test_inputs_it_declines_go_to_the_python_builder(tokens, lens):
    compiled = _outcome("compiled", tokens, lens)
    assert compiled == (False, _outcome("python", tokens, lens)[1])


def _both_trees(seed: int, n: int) -> tuple[QueueTree, QueueTree]:
    """A random queue of `n` with cached lengths: its compiled tree and the Python builder's."""
    rng = np.random.default_rng(seed)
    tokens = _queue(rng, n)
    lens = _cached(rng, tokens)
    with core.use("compiled"):
        tree = build_queue_tree(tokens, lens)
    return tree, _python_tree(tokens, lens)


def test_an_order_it_declines_is_walked_in_python():
    tree, reference = _both_trees(3, 10)
    order = np.random.default_rng(3).permutation(10)  # numpy ints
    assert tree.compiled.completion_times(order, 1.0) is None
    assert _bits(completion_times(tree, order, 1.0)) == _bits(completion_times(reference, order, 1.0))
    with pytest.raises(IndexError):
        completion_times(tree, [0, 1, 99], 1.0)


def test_a_request_work_that_is_not_a_float_is_walked_in_python():
    """Python adds a request_work that is not a float by its own type's rules (a numpy float32
    rounds each sum to float32, a Decimal raises): the compiled walk, which makes it a double,
    leaves it to Python."""
    tree, reference = _both_trees(4, 8)
    order = list(range(8))
    work = np.float32(0.1)
    assert completion_times(tree, order, work) == completion_times(reference, order, work)
    assert {type(c) for c in completion_times(tree, order, work)} == {np.float32}
    with pytest.raises(TypeError):
        completion_times(tree, order, Decimal(1))


def test_a_memo_keeps_the_python_builder():
    """A caller's memo is updated by the Python builder on either core (its `held` ids)."""
    tokens = _queue(np.random.default_rng(1), 6)
    memo = TokenMemo()
    with core.use("compiled"):
        tree = build_queue_tree(tokens, None, memo)
    assert tree.compiled is None
    assert all(id(t) in memo.held for t in tokens)


@pytest.mark.parametrize("seed", range(6))
def test_strict_priority_with_each_cores_memo_gives_the_same_rounds(seed):
    """Strict priority keeps its prompts' order from round to round with the Python memo
    (`TokenMemo`) on the Python core and the compiled one (`PromptMemo`) on the compiled core; the
    Python memo may attach equal prompts in another order, which neither the completion times nor
    the payments read."""
    rng = np.random.default_rng(seed)
    pool = [Request(i, int(rng.integers(3)), t, bid=float(rng.choice([0.0, 1.0, 2.5])))
            for i, t in enumerate(_queue(rng, 60))]
    auctions = {}
    for which in core.CORES:
        with core.use(which):  # the auction keeps the core it was built on
            auctions[which] = StrictPriorityAuction()
    for _ in range(8):  # rounds that keep part of the queue, so the memo has ranks to keep
        picks = sorted(rng.choice(len(pool), size=int(rng.integers(2, 25)), replace=False))
        queue = [pool[k] for k in picks]
        lens = _cached(rng, [r.tokens for r in queue])
        seen = {}
        for which, auction in auctions.items():
            with core.use(which):
                alloc = auction.allocate(queue, prefix_lens=lens)
                seen[which] = (alloc.order, _bits(alloc.completion), _bits(auction.payments(alloc)))
                assert (alloc.tree.compiled is not None) == (which == "compiled")
        assert seen["python"] == seen["compiled"]


@pytest.mark.parametrize("seed", range(12))
def test_a_kept_prompt_memo_builds_the_fresh_tree(seed):
    """The compiled builder with its `PromptMemo` kept over a random sequence of queues (requests
    joining, leaving, staying; equal prompts in distinct arrays, one array twice, a writeable or
    strided array now and then, a memo's array made writeable and changed between rounds) builds
    the lists a fresh sort builds, and the Python builder's, bit for bit."""
    rng = np.random.default_rng([seed, 31])
    pool = _queue(rng, 80)
    for k in rng.choice(len(pool), size=6, replace=False):
        pool[k] = np.array(pool[k]) if k % 2 else np.repeat(pool[k], 2)[::2]
    with core.use("compiled"):
        memo = core.compiled_module().PromptMemo()
    queue: list[np.ndarray] = []
    for _ in range(30):
        queue = [t for t in queue if rng.random() < 0.8]
        queue += [pool[k] for k in rng.integers(len(pool), size=int(rng.integers(0, 12)))]
        if rng.random() < 0.1 and queue:  # a remembered array changed where a memo could miss it
            changed = queue[int(rng.integers(len(queue)))]
            if changed.base is None and not changed.flags.writeable:
                changed.flags.writeable = True
                changed[-1] += 1
        order = [int(i) for i in rng.permutation(len(queue))]
        queue = [queue[i] for i in order]
        if len(queue) < 2:
            continue
        lens = _cached(rng, queue) if rng.random() < 0.8 else None
        with core.use("compiled"):
            kept, fresh = build_queue_tree(queue, lens, memo), build_queue_tree(queue, lens)
        assert kept.compiled is not None
        assert _lists(kept) == _lists(fresh) == _lists(_python_tree(queue, lens))

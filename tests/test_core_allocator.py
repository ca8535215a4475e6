"""The compiled queue tree (mechanism/compiled_tree.py) against the Python one, round by round.

Both trees are driven by the same random rounds: requests join and leave, bids change (to 0 and to
values that tie), cached prefixes change, the changes are reported (`QueueDelta`) or found by
comparing queues, under both tie-break rules and both cost models. After every round the order,
every node's stats, the round over the skeleton at random multipliers (0 included: bidders out of
budget) and its VCG payments must be the same bit for bit (floats compared by their hex form, so
-0.0 and the last bit count). The from-scratch oracle tests of the compiled tree are
tests/test_incremental_tree.py's, which run on both cores."""

from __future__ import annotations

import itertools
from dataclasses import fields

import numpy as np
import pytest

from auction_gym import Request, core
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.mechanism.compiled_tree import CompiledQueueTree
from auction_gym.mechanism.factored import FactoredAllocation
from auction_gym.mechanism.incremental_tree import IncrementalQueueTree
from auction_gym.mechanism.smith import TIE_BREAKS
from auction_gym.policy import QueueDelta

pytestmark = pytest.mark.skipif(core.compiled_module() is None,
                                reason="the compiled core (auction_gym._core) is not built")

MODELS = [("tokens", 1.0), ("tokens", 0.0), ("tokens", 0.3), ("unit", 1.0)]
BIDDERS = 4
HEADS = ([7, 7, 7, 7, 7, 7], [1, 2, 1, 2, 1], [3, 3, 4], [5])


def _bits(x: object) -> object:
    """`x` with every float as its hex form (exact, sign of zero included), lists and tuples kept."""
    if isinstance(x, float):
        return x.hex()
    if isinstance(x, (list, tuple)):
        return type(x)(map(_bits, x))
    if isinstance(x, dict):
        return {k: _bits(v) for k, v in x.items()}
    return x


def _allocation_bits(a: FactoredAllocation) -> dict[str, object]:
    out = {f.name: _bits(getattr(a, f.name)) for f in fields(a) if f.name not in ("tree", "admission", "compiled")}
    out["tree"] = _bits(vars(a.tree))
    out["admission"] = [r.id for r in a.admission]
    return out


def _prompt(rng: np.random.Generator) -> list[int]:
    """A cut of a shared head plus a short tail: deep sharing, prompts that end at a node or inside
    an edge, and duplicates."""
    head = HEADS[rng.integers(len(HEADS))]
    return head[: rng.integers(0, len(head) + 1)] + [int(t) for t in rng.integers(0, 3, size=rng.integers(0, 4))] or [1]


def _value(rng: np.random.Generator) -> float:
    """A bid or urgency: often 0 or a value many requests share (keys that tie), else any."""
    return float(rng.choice([0.0, 1.0, 2.5])) if rng.random() < 0.5 else float(rng.uniform(0, 10))


def _round(rng, queue: list[Request], lens: dict[Request, int], base: dict[Request, float], ids) -> QueueDelta:
    """One round's changes to the queue, its cached lengths and base bids; returns them as reported."""
    before = dict(lens)
    for _ in range(rng.integers(0, 5)):
        r = Request(next(ids), int(rng.integers(BIDDERS)), _prompt(rng), bid=1.0)
        queue.append(r)
        base[r], lens[r] = _value(rng), 0
    for _ in range(rng.integers(0, 4)):
        if len(queue) > 1:
            r = queue.pop(int(rng.integers(len(queue))))
            del lens[r], base[r]
    rematched = []
    for r in queue:
        if rng.random() < 0.15:
            lens[r] = int(rng.integers(0, len(r.tokens) + 1))
            rematched.append(r)
        if rng.random() < 0.15:
            base[r] = _value(rng)
    return QueueDelta(
        joined=[r for r in queue if r not in before], left=[r for r in before if r not in lens],
        rematched=[r for r in rematched if r in before], length_of=dict(lens),
    )


def _alpha(rng: np.random.Generator) -> list[float]:
    return [0.0 if rng.random() < 0.25 else _value(rng) for _ in range(BIDDERS)]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("tie_break", TIE_BREAKS)
@pytest.mark.parametrize("seed", range(12))
def test_the_compiled_tree_decides_every_round_as_the_python_one(model, tie_break, seed):
    rng = np.random.default_rng(seed)
    auction = RadixTreeAuction(*model, tie_break=tie_break)
    costed = model[0] == "tokens"
    trees = [IncrementalQueueTree(auction.request_work, costed, auction.cache_ties),
             CompiledQueueTree(auction.request_work, costed, auction.cache_ties)]
    # Ids near 2^62 in some runs: with cache ties, tie values then need the full 128 bits.
    ids = itertools.count((1 << 62) - 50 if seed % 2 else 0)
    queue: list[Request] = []
    lens: dict[Request, int] = {}
    base: dict[Request, float] = {}
    following = False
    for _ in range(60):
        delta = _round(rng, queue, lens, base, ids)
        if not queue:  # a round has a queue
            following = False
            continue
        bids = [base[r] for r in queue]
        prefix_lens = [lens[r] for r in queue] if costed else None
        reported = delta if following and rng.random() < 0.7 else None
        for tree in trees:
            tree.update(queue, bids, prefix_lens, reported)
        following = True
        py, cc = trees
        assert [r.id for r in cc.order()] == [r.id for r in py.order()]
        assert _bits(cc.node_stats()) == _bits(py.node_stats())
        alpha = _alpha(rng)
        money = [alpha[r.bidder] * base[r] for r in queue]
        decided = [tree.factored(queue, money, prefix_lens, alpha) for tree in trees]
        assert _allocation_bits(decided[1]) == _allocation_bits(decided[0])
        assert _bits(auction.payments(decided[1])) == _bits(auction.payments(decided[0]))


def test_tie_values_beyond_64_bits_cross_exactly():
    """A block's tie value under cache ties, id - cached x 2^64, reaches Python as the same int."""
    tree = CompiledQueueTree(1.0, costed=True, cache_ties=True)
    a, b = Request((1 << 62) + 3, 0, [1, 2, 3], bid=1.0), Request(-5, 1, [1, 2, 4], bid=1.0)
    tree.update([a, b], [1.0, 1.0], [3, 2])
    alloc = tree.factored([a, b], [1.0, 1.0], [3, 2], [1.0, 1.0])
    assert sorted(alloc.tie[alloc.tree.n_nodes:]) == [a.id - 3 * (1 << 64), b.id - 2 * (1 << 64)]
    assert [r.id for r in alloc.admission] == [a.id, b.id]  # equal keys: the longer cached prefix first

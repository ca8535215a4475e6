"""Property tests of the radix-tree auction on queues too large for brute force (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auction_gym import Request
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.mechanism.smith import block_key, block_keys


@st.composite
def queues(draw):
    """Up to 25 requests over a 3-token alphabet (deep sharing, duplicates, inner-node ends)."""
    n = draw(st.integers(1, 25))
    reqs = []
    for k in range(n):
        tokens = draw(st.lists(st.integers(0, 2), min_size=1, max_size=8))
        bid = draw(st.sampled_from([0.0, 1.0, 2.5]) | st.floats(0, 100))
        reqs.append(Request(k * 3 + 1, draw(st.integers(0, 4)), tokens, bid=bid))
    cached = draw(st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=6), max_size=3))
    return reqs, cached


@settings(max_examples=150, deadline=None)
@given(queues(), st.sampled_from([("unit", 1), ("tokens", 1), ("tokens", 0), ("tokens", 0.3)]))
def test_incremental_payments_and_decomposed_cost(instance, model):
    reqs, cached = instance
    auction = RadixTreeAuction(*model)
    alloc = auction.allocate(reqs, cached)
    outcome = auction.run(reqs, cached)
    scale = max(1.0, -outcome.welfare)
    assert sorted(outcome.order) == sorted(r.id for r in reqs)
    # The tree decomposition's optimum equals the cost measured on the order it produces.
    assert alloc.f[0] == pytest.approx(-outcome.welfare, rel=1e-9, abs=1e-9 * scale)
    for i in {r.bidder for r in reqs}:
        others = [r for r in reqs if r.bidder != i]
        mine = sum(r.bid * outcome.completion[r.id] for r in reqs if r.bidder == i)
        without = auction.allocate(others, cached).cost if others else 0.0
        assert outcome.payments[i] >= 0
        assert outcome.payments[i] == pytest.approx(
            -outcome.welfare - mine - without, rel=1e-9, abs=1e-9 * scale
        )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6) | st.sampled_from([0.0, 1.0]), st.floats(0, 1e6) | st.just(0.0),
                          st.integers(0, 10**6)), max_size=30))
def test_block_keys_are_block_key_of_each_block(blocks):
    """The batch form `_allocate_tree` uses (in C when no work is zero) gives `block_key`'s keys
    exactly, zero-work blocks included."""
    s, p, tie = (list(column) for column in zip(*blocks)) if blocks else ([], [], [])
    keys = block_keys(s, p, tie)
    assert keys == [block_key(*b) for b in blocks]
    assert [type(k[1]) for k in keys] == [float] * len(blocks)

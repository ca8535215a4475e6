"""A market's rounds decided in urgency units (mechanism/factored.py) against the from-scratch auction.

With bids alpha_i x urgency, the factored round must order the queue as the from-scratch allocation
of the same bids does and charge the same VCG payments, to rounding: values are drawn at random
so that no two blocks' ratios tie exactly (where rounding may break a tie either way)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from workloads import churn_queue

from auction_gym import Request
from auction_gym.market import Market, MarketConfig
from auction_gym.market.config import DEFAULT_WORKLOAD
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.mechanism.factored import FactoredAllocation
from auction_gym.mechanism.radix_auction import RadixAllocation

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator

MODELS = [("tokens", 1.0), ("tokens", 0.0), ("unit", 1.0)]


class _Lens:
    """Stands for the engine's waiting prefixes: hands the auction this round's cached lengths."""

    def __init__(self) -> None:
        self.lens: list[int] | None = None
        self.serial = 0  # no refresh counted, and so no changes known: the tree compares queues

    def lengths(self, queue, cache):
        return self.lens

    def delta_since(self, serial):
        return None


def _assert_same_round(got: FactoredAllocation, want: RadixAllocation, auction: RadixTreeAuction,
                       scratch: RadixTreeAuction) -> None:
    assert got.order == want.order
    assert math.isclose(got.cost, want.cost, rel_tol=1e-12, abs_tol=1e-12)
    tol = 1e-9 * max(want.cost, 1.0)
    assert got.completion == pytest.approx(want.completion, rel=1e-12, abs=1e-12)
    paid, due = auction.payments(got), scratch.payments(want)
    assert paid.keys() == due.keys()
    for i in due:
        assert paid[i] == pytest.approx(due[i], abs=tol)


def _prompt(rng: np.random.Generator, bidder: int, shared: float) -> list[int]:
    """A prompt under its bidder's system prompt, or (with probability `shared`) under one that
    all bidders share, so that nodes holding several bidders sit at several depths."""
    head = [9, 9, 9] if rng.random() < shared else [bidder + 1] * 3
    body = [int(t) for t in rng.integers(0, 3, size=rng.integers(0, 6))]
    return head + body


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("seed", range(6))
def test_factored_rounds_equal_the_from_scratch_auction(model, seed):
    """Arrivals, admissions, cache changes and new multipliers (zeros included) between rounds."""
    rng = np.random.default_rng(seed)
    bidders = 4
    auction, scratch = RadixTreeAuction(*model), RadixTreeAuction(*model)
    waiting = _Lens()
    auction.attach_waiting_prefixes(waiting)
    queue: list[Request] = []
    lens: list[int] = []
    ids = itertools.count()
    rounds, zero_rounds, deep_rounds = 0, 0, 0

    def arrive() -> Request:
        bidder = int(rng.integers(bidders))
        return Request(next(ids), bidder, _prompt(rng, bidder, shared=0.3), urgency=float(rng.uniform(0.1, 5)))

    for _ in range(120):
        churn_queue(rng, queue, lens, arrive)
        if not queue:
            continue
        alpha = [0.0 if rng.random() < 0.25 else float(rng.uniform(0.05, 2)) for _ in range(bidders)]
        waiting.lens = list(lens) if model[0] == "tokens" else None
        decided = auction.decide(queue, None, alpha)
        want = scratch.allocate(queue, prefix_lens=decided.prefix_lens, bids=decided.bids)
        assert decided.bids == [alpha[r.bidder] * r.urgency for r in queue]
        if len(queue) > 1:
            assert isinstance(decided.allocation, FactoredAllocation)
            _assert_same_round(decided.allocation, want, auction, scratch)
            rounds += 1
            zero_rounds += 0.0 in alpha
            deep_rounds += decided.allocation.tree.n_nodes > 2  # a mixed node below a mixed node
        else:
            assert decided.admission_order() == queue
    assert rounds > 60 and zero_rounds > 20 and deep_rounds > 20


def test_a_bidder_bidding_zero_keeps_the_from_scratch_order_among_zero_work_blocks():
    """No overhead and a fully cached prompt: zero-work blocks, which go first, by smallest id."""
    auction, scratch = RadixTreeAuction("tokens", 0.0), RadixTreeAuction("tokens", 0.0)
    waiting = _Lens()
    auction.attach_waiting_prefixes(waiting)
    queue = [Request(7, 0, [1, 1, 2, 5]), Request(3, 0, [1, 1, 2, 6, 6]), Request(5, 0, [1, 1, 3]),
             Request(4, 1, [2, 2]), Request(1, 0, [1, 1, 2, 5, 5]), Request(2, 1, [2, 3, 3])]
    for r in queue:
        r.urgency = 1.0
    waiting.lens = [4, 0, 3, 0, 0, 1]
    got = auction.decide(queue, None, [0.0, 1.5]).allocation
    want = scratch.allocate(queue, prefix_lens=waiting.lens, bids=[0.0 if r.bidder == 0 else 1.5 for r in queue])
    assert isinstance(got, FactoredAllocation)
    assert [queue[k].id for k in got.order] == [queue[k].id for k in want.order]
    _assert_same_round(got, want, auction, scratch)


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_market_prices_every_round_as_the_from_scratch_auction_would(replicas):
    """The default scenario, random multipliers: every round the market admitted from (with two
    replicas, each with its own auction and tree, the round of the replica that admitted)."""
    config = MarketConfig()
    if replicas > 1:  # four times the arrivals, so that each replica's queue holds several requests too
        rate = 4 * DEFAULT_WORKLOAD["rate"]
        config = MarketConfig(replicas=replicas, router="round_robin", workload_kwargs={"rate": rate})
    market = Market(config)
    market.reset(seed=3)
    rng = np.random.default_rng(3)
    factored = 0
    for _ in range(400):
        decided = market.step(rng.uniform(0, 2, size=market.n)).decision
        if decided is not None and isinstance(decided.allocation, FactoredAllocation):
            scratch = RadixTreeAuction(decided.auction.cost_model, decided.auction.request_overhead)
            want = scratch.allocate(decided.requests, prefix_lens=decided.prefix_lens, bids=decided.bids)
            _assert_same_round(decided.allocation, want, decided.auction, scratch)
            factored += 1
    assert factored > 50


@pytest.mark.parametrize("model", MODELS)
def test_a_round_of_one_request_is_the_from_scratch_round(model):
    """A lone request is ordered without an allocation (it delays nobody: it pays 0), which is
    built from scratch when the round is read in full; rounds of one and of two alternate."""
    auction, scratch = RadixTreeAuction(*model), RadixTreeAuction(*model)
    waiting = _Lens()
    auction.attach_waiting_prefixes(waiting)
    queue = [Request(0, 0, [1, 2, 3], urgency=2.0)]
    for k in range(1, 7):
        waiting.lens = [k % 3] * len(queue) if model[0] == "tokens" else None
        decided = auction.decide(queue, None, [0.5, 1.5])
        want = scratch.allocate(decided.requests, prefix_lens=decided.prefix_lens, bids=decided.bids)
        assert decided.admission_order() == [queue[i] for i in want.order]
        assert decided.outcome == scratch.outcome(want)
        queue = queue[1:] if len(queue) == 2 else queue + [Request(k, k % 2, [1, 2, k], urgency=float(k))]


@pytest.mark.parametrize("size", [1, 2])
def test_a_bad_bid_is_refused_in_a_round_of_any_size(size):
    """A request's urgency may be changed after it was made: the round refuses the bid it makes,
    also a round of one request, which builds no allocation."""
    queue = [Request(1, 0, [1, 2]), Request(2, 1, [1, 3])][:size]
    queue[0].urgency = math.nan
    auction, waiting = RadixTreeAuction(), _Lens()
    auction.attach_waiting_prefixes(waiting)
    waiting.lens = [0] * size
    with pytest.raises(ValueError, match="request 1: bid"):
        auction.decide(queue, None, [1.0, 1.0])


@pytest.mark.parametrize("alpha", [[1.0, -0.5], [1.0, math.nan], [math.inf, 1.0]])
def test_bad_multipliers_are_refused(alpha):
    queue = [Request(1, 0, [1, 2]), Request(2, 1, [1, 3])]
    with pytest.raises(ValueError, match="multipliers"):
        RadixTreeAuction().decide(queue, None, alpha)


"""The radix auction's one allocator (mechanism/allocator.py) against the from-scratch oracle.

One auction decides many rounds, with arrivals, admissions and cache changes between them,
following the queue's reported changes as the engine reports them. The multipliers change every
round (a market with pacing bidders), stay the same (fixed multipliers), are absent (an engine
replay: every request bids its own bid), or rounds of both kinds alternate on the one tree. Every
round of two requests or more must order the queue as the from-scratch allocation of the same bids
does and charge its VCG payments (to rounding where bids are alpha x urgency; bit for bit without
multipliers). Values are drawn at random so that no two blocks' ratios tie exactly."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from workloads import churn_queue

from auction_gym import Request
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.mechanism.allocator import OrderedRound
from auction_gym.mechanism.factored import FactoredAllocation
from auction_gym.mechanism.radix_auction import RadixAllocation
from auction_gym.policy import QueueDelta

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator

MODELS = [("tokens", 1.0), ("tokens", 0.0), ("unit", 1.0)]
BIDDERS = 4


class _Refreshes:
    """Stands for the engine's `WaitingPrefixes`: each round is one refresh of the queue, and
    `delta_since` reports what joined and left since an earlier refresh and whose cached prefix was
    matched again, as the engine does; a refresh more than three behind is not kept (None: the
    allocator compares queues)."""

    def __init__(self) -> None:
        self.serial = 0
        self._kept: dict[int, tuple[list[Request], list[int]]] = {}
        self.deltas = 0

    def refresh(self, queue: list[Request], lens: list[int]) -> None:
        self.serial += 1
        self._kept[self.serial] = (list(queue), list(lens))

    def lengths(self, queue, cache) -> list[int]:
        return self._kept[self.serial][1]

    def delta_since(self, serial: int) -> QueueDelta | None:
        if self.serial - serial > 3:
            return None
        self.deltas += 1
        (old, old_lens), (now, lens) = self._kept[serial], self._kept[self.serial]
        was = dict(zip(old, old_lens))
        return QueueDelta(
            joined=[r for r in now if r not in was],
            left=[r for r in old if r not in set(now)],
            rematched=[r for r, c in zip(now, lens) if r in was and was[r] != c],
            length_of=dict(zip(now, lens)),
        )


def _prompt(rng: np.random.Generator, bidder: int) -> list[int]:
    """A prompt under its bidder's system prompt or one all bidders share, so that nodes holding
    several bidders sit at several depths, the root among them."""
    head = [9, 9, 9] if rng.random() < 0.3 else [bidder + 1] * 3
    return head + [int(t) for t in rng.integers(0, 3, size=rng.integers(0, 6))]


def _multipliers(rng: np.random.Generator, regime: str, fixed: list[float]) -> list[float] | None:
    if regime == "none" or (regime == "alternating" and rng.random() < 0.5):
        return None
    if regime == "unchanged":
        return fixed
    return [0.0 if rng.random() < 0.25 else float(rng.uniform(0.05, 2)) for _ in range(BIDDERS)]


def _assert_priced_alike(got, want: RadixAllocation, auction: RadixTreeAuction, scratch: RadixTreeAuction) -> None:
    assert math.isclose(got.cost, want.cost, rel_tol=1e-12, abs_tol=1e-12)
    paid, due = auction.payments(got), scratch.payments(want)
    assert paid.keys() == due.keys()
    for i in due:
        assert paid[i] == pytest.approx(due[i], abs=1e-9 * max(want.cost, 1.0))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("regime", ["changing", "unchanged", "none", "alternating"])
@pytest.mark.parametrize("seed", range(3))
def test_every_round_equals_the_from_scratch_oracle(model, regime, seed):
    rng = np.random.default_rng(seed)
    auction, scratch = RadixTreeAuction(*model), RadixTreeAuction(*model)
    refreshes = _Refreshes()
    auction.attach_waiting_prefixes(refreshes)
    tree = auction._allocator._tree
    fixed = [0.0, 0.7, 1.3, 1.9]  # a bidder out of budget among them
    queue: list[Request] = []
    lens: list[int] = []
    ids = itertools.count()
    kinds = {OrderedRound: 0, FactoredAllocation: 0}

    def arrive() -> Request:
        bidder = int(rng.integers(BIDDERS))
        return Request(next(ids), bidder, _prompt(rng, bidder), bid=float(rng.uniform(0.1, 5)),
                       urgency=float(rng.uniform(0.1, 5)))

    for _ in range(150):
        churn_queue(rng, queue, lens, arrive)
        if len(queue) < 2:
            continue
        refreshes.refresh(queue, lens)
        alpha = _multipliers(rng, regime, fixed)
        decided = auction.decide(queue, None, alpha)
        got = decided.allocation
        want = scratch.allocate(queue, prefix_lens=decided.prefix_lens, bids=decided.bids)
        assert decided.admission_order() == [queue[k] for k in want.order]
        assert auction._allocator._tree is tree  # one tree, whatever the rounds
        kinds[type(got)] += 1
        if alpha is None:  # the requests' own bids: the tree's order, priced from scratch
            assert isinstance(got, OrderedRound) and decided.bids == [r.bid for r in queue]
            assert decided.outcome == scratch.outcome(want)
            # The skeleton decided at every multiplier 1 over the same tree is the same round:
            # the order the tree keeps at the nodes that mix bidders is the money order.
            ones = tree.factored(queue, decided.bids, decided.prefix_lens, [1.0] * BIDDERS)
            assert ones.admission == decided.admission_order() and ones.cost == want.f[0]
            _assert_priced_alike(ones, want, auction, scratch)
        else:
            assert isinstance(got, FactoredAllocation) and decided.bids == [alpha[r.bidder] * r.urgency for r in queue]
            _assert_priced_alike(got, want, auction, scratch)
    assert sum(kinds.values()) > 100
    if regime == "alternating":
        assert min(kinds.values()) > 30
    if model[0] == "tokens":
        assert refreshes.deltas > 50  # most rounds followed the reported changes

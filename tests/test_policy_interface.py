"""The admission policy's declared interface (`auction_gym.policy`), and the older protocol a
third-party policy may still be written to (docs/extending.md), which runs with a DeprecationWarning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import auction_gym.scheduler
from auction_gym import EngineConfig, RadixCache, Request, SimEngine
from auction_gym.market import Market, MarketConfig
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.policy import AdmissionPolicy, PriorityRound, WaitingRound
from auction_gym.pricing import PostedRound
from auction_gym.registry import _ENTRIES, MechanismEntry, get_mechanism, make_scheduler, register_mechanism


class OldOrder:
    """A policy without money written to the older `Scheduler` protocol."""

    name = "old_order"
    sorts_in_place = True

    def __init__(self) -> None:
        self.lent = None

    def attach_waiting_prefixes(self, prefixes):  # never called now: the policy matches itself
        self.lent = prefixes

    def in_batch_deprioritizes(self, waiting: int) -> bool:
        return waiting < 3

    def order(self, queue, cache):
        return sorted(queue, key=lambda r: -r.id)


class OldTiers:
    """A posted-price design written to the older `Auction` protocol: one that reads budgets."""

    name = "old_tiers"
    charges = True
    reads_budgets = True

    def __init__(self) -> None:
        self.remaining: list = []

    def decide(self, queue, cache, multipliers=None, remaining=None):
        self.remaining.append(remaining)
        return PostedRound(list(queue), {r.id: (r.bidder, 1e-9 * r.prompt_len) for r in queue})


@pytest.fixture
def old_policies():
    for entry in (MechanismEntry("old_order", OldOrder, "last id first; no payments"),
                  MechanismEntry("old_tiers", OldTiers, "a bill per request; price x tokens")):
        register_mechanism(entry)
    yield
    for name in ("old_order", "old_tiers"):
        del _ENTRIES[name]


def test_a_policy_written_to_the_older_protocol_runs_with_a_deprecation_warning(old_policies):
    with pytest.warns(DeprecationWarning, match="not an auction_gym.policy.AdmissionPolicy"):
        policy = make_scheduler("old_order")
    assert isinstance(policy, AdmissionPolicy) and not policy.decides and not policy.charges
    assert policy.sorts_in_place and policy.in_batch_deprioritizes(2) and not policy.in_batch_deprioritizes(3)
    queue = [Request(k, 0, [1, k]) for k in range(4)]
    assert [r.id for r in policy.admit(WaitingRound(queue, RadixCache()))[0]] == [3, 2, 1, 0]
    with pytest.warns(DeprecationWarning):
        engine = SimEngine(OldOrder(), EngineConfig())
    engine.run([Request(k, 0, [1, 2, k], output_len=2) for k in range(6)])
    assert engine.metrics().finished == 6


def test_an_older_design_that_reads_budgets_is_given_them_and_charged(old_policies):
    with pytest.warns(DeprecationWarning):
        market = Market(MarketConfig(mechanism="old_tiers", horizon=20))
        market.reset(seed=0)
    design = market.engine.scheduler.policy
    spent = 0.0
    while not market.done:
        spent += market.step(np.ones(market.n)).payments.sum()
    assert spent > 0 and get_mechanism("old_tiers").charges
    assert any(r is not None for r in design.remaining)


def test_declared_defaults_and_no_probe_for_a_new_policy():
    class Newest(AdmissionPolicy):
        name = "newest"

        def order_round(self, round):
            return sorted(round.queue, key=lambda r: -r.arrival)

    policy = Newest()
    assert AdmissionPolicy.adopt(policy) is policy  # no wrapper, no warning
    assert (policy.decides, policy.charges, policy.is_auction, policy.sorts_in_place) == (False,) * 4
    assert not policy.in_batch_deprioritizes(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine = SimEngine(policy, EngineConfig())
        engine.run([Request(k, 0, [1, k], output_len=2, arrival=0.1 * k) for k in range(5)])
    assert engine.metrics().finished == 5


def test_a_decision_is_a_value_priced_without_the_auction_that_decided_it():
    auction = RadixTreeAuction()
    queue = [Request(k, k % 2, [1, 2, k], bid=1.0 + k) for k in range(4)]
    decided = auction.decide(queue, RadixCache())
    assert decided.pricing is not auction and decided.priorities == {} and decided.prices == ()
    later = auction.decide(queue[:2], RadixCache())  # the auction moves on; the first round's price stays
    assert decided.payments(range(2)) == RadixTreeAuction().run(queue).payments
    assert later.admission_order() != decided.admission_order()
    assert PriorityRound(queue, {0: 3}).charges([0], [1], 1.0) == {}


def test_the_renamed_names_warn_once():
    import auction_gym.mechanism.base as base
    import auction_gym.scheduler.base as scheduler_base

    scheduler_base._warned.discard("Scheduler")
    with pytest.warns(DeprecationWarning, match="AdmissionPolicy"):
        assert auction_gym.scheduler.Scheduler is AdmissionPolicy
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert auction_gym.scheduler.Scheduler is AdmissionPolicy  # once
    base._warned.discard("AuctionRound.auction")
    decided = RadixTreeAuction().decide([Request(0, 0, [1])], RadixCache())
    with pytest.warns(DeprecationWarning, match="pricing"):
        assert decided.auction is decided.pricing

"""The market designs the paper sets against the auction: hand-made rounds with known orders and
known charges, refused settings, and whole episodes (every request served once, no budget
overspent, the env checkers silent)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from pettingzoo.test import parallel_api_test
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import auction_gym
from auction_gym import RadixCache, Request, make_scheduler
from auction_gym.market import Market, MarketConfig
from auction_gym.pricing.tiers import best_tier
from auction_gym.registry import get_mechanism
from auction_gym.scheduler.priority import LOWEST, priority_level

DESIGNS = ("lpm_aging", "dlpm", "sglang_priority", "qos_lpm", "tiers", "tiers_lpm", "congestion")
FAST = {"horizon": 30, "workload_kwargs": {"rate": 40.0}}


def req(i: int, bidder: int, tokens, urgency: float = 1.0, bid: float = 0.0, output_len: int = 1) -> Request:
    return Request(i, bidder, tokens, bid, output_len=output_len, arrival=float(i), value=10.0, urgency=urgency)


def ids(rs) -> list[int]:
    return [r.id for r in rs]


def test_best_tier_weighs_the_wait_saved_against_the_price():
    prices, ahead = (1.0, 2.0, 4.0), [10, 4, 0]  # 10 paying waiting, 4 in standard or priority
    # 100 tokens: a tier's extra cost is 100 x its price step; a second saved is worth the bid
    assert best_tier(0.01, 100, ahead, prices, 1.0) == 0  # 100 + 0.1 vs 200 + 0.04 vs 400
    assert best_tier(20.0, 100, ahead, prices, 1.0) == 1  # 300 vs 280 vs 400
    assert best_tier(60.0, 100, ahead, prices, 1.0) == 2  # 700 vs 440 vs 400
    assert best_tier(15.0, 100, [10, 10, 10], prices, 1.0) == 0  # no wait saved: the cheapest


def test_tiers_order_and_charge_by_the_tier_bought():
    tiers = make_scheduler("tiers", base_price=1.0, ratios=(0.5, 1.0, 2.0), seconds_per_request=1.0)
    # 100 tokens each: flex 50, standard 100, priority 200; cost of tier k = bid x ahead_k + price_k
    q = [req(0, 0, [1] * 100, urgency=1.0),  # ahead (0, 0, 0): flex
         req(1, 1, [2] * 100, urgency=10.0),  # (1, 0, 0): flex 60 < standard 100
         req(2, 2, [3] * 100, urgency=80.0),  # (2, 0, 0): standard 100 < flex 210, priority 200
         req(3, 3, [4] * 100, urgency=1000.0),  # (3, 1, 0): priority 200 < standard 1100
         req(4, 4, [5] * 100, urgency=1000.0)]  # bidder 4 is out of budget: multiplier 0
    round_ = tiers.decide(q, RadixCache(), [1.0, 1.0, 1.0, 1.0, 0.0])
    assert ids(round_.admission_order()) == [3, 2, 0, 1, 4]
    assert round_.charges([3, 2, 0], [1, 0, 1, 1, 0], 1.0) == {3: 200.0, 2: 100.0, 0: 50.0}
    assert round_.charges([4], [0, 0, 0, 0, 1], 1.0) == {}  # served last, pays nothing
    # The next round keeps what was bought; request 5 sees (3, 2, 1) ahead: flex 56 is cheapest.
    q2 = [*q[1:], req(5, 0, [6] * 100, urgency=2.0)]
    again = tiers.decide(q2, RadixCache(), [1.0, 1.0, 1.0, 1.0, 0.0])
    assert ids(again.admission_order()) == [3, 2, 1, 5, 4] and again.bills[5] == (0, 50.0)


def test_tiers_lpm_puts_the_cached_prefix_first_inside_a_tier():
    cache = RadixCache()
    cache.insert([7] * 50)
    q = [req(0, 0, [1] * 60), req(1, 1, [7] * 60), req(2, 2, [2] * 60, urgency=1e9)]
    fcfs = make_scheduler("tiers", base_price=1.0).decide(q, cache, [1.0, 1.0, 1.0])
    lpm = make_scheduler("tiers_lpm", base_price=1.0).decide(q, cache, [1.0, 1.0, 1.0])
    assert ids(fcfs.admission_order()) == [2, 0, 1] and ids(lpm.admission_order()) == [2, 1, 0]


@pytest.mark.parametrize("kwargs", [
    {"ratios": (1.0, 1.0)}, {"ratios": (2.0, 1.0)}, {"ratios": (0.0, 1.0)}, {"ratios": ()}, {"base_price": -1.0},
    {"inside": "lof"}, {"seconds_per_request": 0.0},
])
def test_tiers_refuse_bad_prices(kwargs):
    with pytest.raises(ValueError, match="must"):
        make_scheduler("tiers", **kwargs)


def test_congestion_price_follows_load_and_the_bid_that_covers_it_goes_first():
    design = make_scheduler("congestion", price=1.0, eta=0.5, target=0.5, seconds_per_request=1.0)
    q = [req(0, 0, [1] * 10, urgency=0.1), req(1, 1, [2] * 10, urgency=100.0), req(2, 2, [3] * 10, urgency=100.0)]
    round_ = design.decide(q, RadixCache(), [1.0, 1.0, 1.0])
    # 0: nobody ahead, standard is free; 1: one ahead in standard, saves 1 s x 100 > 10 x 1.0;
    # 2: two ahead in standard, one in priority: saves 1 s x 100 > 10
    assert ids(round_.admission_order()) == [1, 2, 0] and round_.prices == (1.0,)
    assert round_.charges([1, 2, 0], [1, 1, 1], 1.0) == {1: 10.0, 2: 10.0}
    assert design.price == pytest.approx(1.0 * (1 + 0.5 * (2 / 3 - 0.5)))  # 2 of 3 bought: it rises
    design.decide([], RadixCache(), [1.0, 1.0, 1.0])
    assert design.price < 1.0 * (1 + 0.5 * (2 / 3 - 0.5))  # nothing waiting: it falls


@pytest.mark.parametrize("kwargs", [{"eta": 0.0}, {"eta": 1.5}, {"target": 1.0}, {"target": 0.0}, {"price": 0.0},
                                    {"price": 1.0, "floor": 2.0}])
def test_congestion_refuses_a_step_or_target_outside_its_range(kwargs):
    with pytest.raises(ValueError, match="must"):
        make_scheduler("congestion", **kwargs)


def test_priority_levels_are_integers_from_the_bid():
    assert priority_level(1.0) == 0 and priority_level(10.0) == 10 and priority_level(0.02) == -17
    assert priority_level(0.0) == LOWEST and priority_level(1e-300) == LOWEST
    assert all(type(priority_level(b)) is int for b in (1e-9, 0.37, 3.0, 1e9))


def test_sglang_priority_is_fcfs_inside_a_priority_and_qos_lpm_prefers_the_cached_prefix():
    cache = RadixCache()
    cache.insert([7] * 50)
    # bids 1, 1.05 (both level 0), 100 (level 20), 1 with a cached prefix (level 0)
    q = [req(0, 0, [1] * 60, bid=1.0), req(1, 0, [2] * 60, bid=1.05), req(2, 0, [3] * 60, bid=100.0),
         req(3, 0, [7] * 60, bid=1.0)]
    assert ids(make_scheduler("sglang_priority").decide(q, cache).admission_order()) == [2, 0, 1, 3]
    assert ids(make_scheduler("qos_lpm").decide(q, cache).admission_order()) == [2, 3, 0, 1]
    assert make_scheduler("qos_lpm").decide(q, cache).charges([0, 1, 2, 3], [4], 1.0) == {}


def test_lpm_aging_lets_a_cold_request_pass_after_enough_rounds():
    cache = RadixCache()
    cache.insert([7] * 1000)
    cold = req(0, 0, [1] * 10)
    policy = make_scheduler("lpm_aging", tokens_per_pass=300)
    firsts = []
    for rnd in range(5):  # each round a fresh hot request (1000 cached) arrives; the last one left
        hot = req(10 + rnd, 0, [7] * 1001)
        firsts.append(policy.order([cold, hot], cache)[0].id)
    # cold gains 300 a round: 0, 300, 600, 900 < 1000, 1200 > 1000
    assert firsts == [10, 11, 12, 13, 0]
    with pytest.raises(ValueError, match="tokens_per_pass"):
        make_scheduler("lpm_aging", tokens_per_pass=0)


def test_dlpm_shares_by_deficit_and_charges_what_was_admitted():
    cache = RadixCache()
    cache.insert([7] * 100)
    policy = make_scheduler("dlpm", quantum=100)
    # bidder 0 has three cached requests, bidder 1 one cold one
    q = [req(0, 0, [7] * 99), req(1, 0, [7] * 99 + [1]), req(2, 0, [7] * 99 + [2]), req(3, 1, [1] * 99)]
    # LPM alone: 0, 1, 2 (99 cached each), 3. One quantum each: 0 (service 100) and 3; then 1
    # (101, to -1), then 2 after one more quantum
    assert ids(policy.order(q, cache)) == [0, 3, 1, 2]
    policy.order(q[1:], cache)  # request 0 was admitted: bidder 0's quantum is spent
    assert policy.deficit == {0: 0.0, 1: 100.0}
    with pytest.raises(ValueError, match="quantum"):
        make_scheduler("dlpm", quantum=0)


@pytest.mark.parametrize("mechanism", DESIGNS)
def test_an_episode_serves_each_request_once_and_never_overspends(mechanism):
    market = Market(MarketConfig(mechanism=mechanism, horizon=60, warmup=2.0))
    market.reset(3)
    admitted: list[int] = []
    rng = np.random.default_rng(0)
    while not market.done:
        report = market.step(rng.uniform(0, 2, size=market.n))
        admitted += report.admitted
        assert (report.payments >= 0).all()
    assert len(admitted) == len(set(admitted))
    assert (market.spent <= market.budget * (1 + 1e-12)).all()
    assert (market.spent.sum() > 0) == get_mechanism(mechanism).charges


@pytest.mark.parametrize("mechanism", ["tiers", "congestion", "sglang_priority"])
def test_env_checkers_pass_and_pettingzoo_runs(mechanism):
    with pytest.warns(DeprecationWarning, match="out of date"):
        env = gym.make("RadixAuction-v0", mechanism=mechanism, **FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check_env(env.unwrapped)
        sb3_check_env(env)
    parallel_api_test(auction_gym.parallel_env(mechanism=mechanism, **FAST), num_cycles=20)


def test_mechanism_kwargs_reach_the_design_and_bad_ones_are_refused_at_construction():
    market = Market(MarketConfig(mechanism="tiers", mechanism_kwargs={"base_price": 2.0, "ratios": (1.0, 3.0)}))
    market.reset(0)
    assert market.engine.scheduler.prices == (2.0, 6.0)
    with pytest.raises(ValueError, match="mechanism_kwargs for 'tiers'"):
        MarketConfig(mechanism="tiers", mechanism_kwargs={"bogus": 1})
    with pytest.raises(ValueError, match="strictly increasing"):
        MarketConfig(mechanism="tiers", mechanism_kwargs={"ratios": (2.0, 1.0)})

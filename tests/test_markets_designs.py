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


def tier_round(budget_of_3: float):
    """The round of `test_tiers_order_and_charge_by_the_tier_bought`, bidder 3 (urgency 1000, who
    buys priority, bill 200, when its budget covers it) having `budget_of_3` left."""
    tiers = make_scheduler("tiers", base_price=1.0, ratios=(0.5, 1.0, 2.0), seconds_per_request=1.0)
    q = [req(0, 0, [1] * 100, urgency=1.0), req(1, 1, [2] * 100, urgency=10.0), req(2, 2, [3] * 100, urgency=80.0),
         req(3, 3, [4] * 100, urgency=1000.0), req(4, 4, [5] * 100, urgency=1000.0)]
    return tiers.decide(q, RadixCache(), [1.0, 1.0, 1.0, 1.0, 0.0], [1e9, 1e9, 1e9, budget_of_3, 0.0])


def test_a_bidder_that_cannot_pay_priority_buys_the_best_tier_it_can_pay():
    # Request 3 sees (3, 1, 0) ahead: flex 3,000 + 50, standard 1,000 + 100, priority 0 + 200.
    round_ = tier_round(150.0)  # covers standard (100), not priority (200): standard, behind 2 (FCFS)
    assert ids(round_.admission_order()) == [2, 3, 0, 1, 4]
    assert round_.charges([2, 3, 0], [1, 0, 1, 1, 0], 1.0) == {2: 100.0, 3: 100.0, 0: 50.0}
    assert tier_round(200.0).charges([3], [0, 0, 0, 1, 0], 1.0) == {3: 200.0}  # covered: priority


def test_a_bidder_that_can_pay_only_flex_takes_flex():
    round_ = tier_round(60.0)  # covers flex (50) only
    assert ids(round_.admission_order()) == [2, 0, 1, 3, 4]
    assert round_.charges([2, 0, 1, 3], [1, 1, 1, 1, 0], 1.0) == {2: 100.0, 0: 50.0, 1: 50.0, 3: 50.0}


def test_a_bidder_that_can_pay_no_tier_is_served_behind_every_paying_request_for_nothing():
    round_ = tier_round(40.0)  # below flex's 50: unpaid, as bidder 4 (bid 0), in queue order
    assert ids(round_.admission_order()) == [2, 0, 1, 3, 4]
    assert 3 not in round_.bills and round_.charges([3], [0, 0, 0, 1, 0], 1.0) == {}


def test_one_bidders_requests_in_a_round_share_its_budget_in_the_rounds_order():
    """Bidder 0's two urgent requests (2 and 3) both buy priority, bill 200 (its budget left, 300,
    covers each). In the round's order 2 takes 200; the 100 left covers standard, the best
    response below priority (ahead (4, 3): flex 4,050, standard 3,100), so 3 steps down and is
    walked in standard's turn, behind 1 (FCFS): billed 100, 300 in all, whatever is admitted.
    Once 2 is admitted (and charged), the next round's 100 still covers only standard."""
    tiers = make_scheduler("tiers", base_price=1.0, ratios=(0.5, 1.0, 2.0), seconds_per_request=1.0)
    q = [req(0, 1, [1] * 100), req(1, 1, [2] * 100, urgency=80.0),  # flex, standard
         req(2, 0, [3] * 100, urgency=1000.0), req(3, 0, [4] * 100, urgency=1000.0)]
    round_ = tiers.decide(q, RadixCache(), [1.0, 1.0], [300.0, 1e9])
    assert ids(round_.admission_order()) == [2, 1, 3, 0]
    assert round_.bills[2] == (0, 200.0) and round_.bills[3] == (0, 100.0)
    assert round_.charges([2, 1, 3], [2, 1], 1.0) == {0: 300.0, 1: 100.0}
    nxt = tiers.decide([q[0], q[1], q[3]], RadixCache(), [1.0, 1.0], [100.0, 1e9])
    assert ids(nxt.admission_order()) == [1, 3, 0] and nxt.bills[3] == (0, 100.0)
    # Without budgets (a replay) both keep priority.
    replay = make_scheduler("tiers", base_price=1.0, ratios=(0.5, 1.0, 2.0), seconds_per_request=1.0)
    assert ids(replay.decide(q, RadixCache(), [1.0, 1.0]).admission_order()) == [2, 3, 1, 0]


def test_best_tier_within_a_budget_covers_only_the_bills_it_can_pay():
    prices, ahead = (1.0, 2.0, 4.0), [10, 4, 0]
    assert best_tier(60.0, 100, ahead, prices, 1.0, budget=400.0) == 2
    assert best_tier(60.0, 100, ahead, prices, 1.0, budget=399.0) == 1
    assert best_tier(60.0, 100, ahead, prices, 1.0, budget=100.0) == 0
    assert best_tier(60.0, 100, ahead, prices, 1.0, budget=99.0) == -1


@pytest.mark.parametrize("mechanism", ["tiers", "tiers_lpm"])
def test_tier_bills_stay_within_each_bidders_budget_left_over_a_paced_episode(mechanism):
    """Random multipliers over a whole episode whose budgets bind: every round, each bidder's bills
    for what was admitted add up to at most its budget left, so the market's cap never cuts one
    (before the step-down it cut the bills of bidders whose last budget was below their tier's),
    and some request is stepped down to unpaid while its bidder still bids."""
    market = Market(MarketConfig(mechanism=mechanism, horizon=120, warmup=2.0, budget_per_round=3e-5))
    market.reset(4)
    rng = np.random.default_rng(1)
    unpaid_while_bidding = 0
    while not market.done:
        left = market.remaining
        alpha = rng.uniform(0.5, 4.0, size=market.n)
        report = market.step(alpha)
        if report.decision is None:
            continue
        per_bidder = np.bincount([market.engine.records[rid].bidder for rid in report.admitted], minlength=market.n)
        due = report.decision.charges(report.admitted, per_bidder.tolist(), 1.0)
        for i in range(market.n):
            assert due.get(i, 0.0) <= left[i] * (1 + 1e-12)
            assert report.payments[i] == pytest.approx(due.get(i, 0.0), rel=1e-12, abs=0.0)
        unpaid_while_bidding += sum(1 for r in report.decision.order
                                    if r.id not in report.decision.bills and left[r.bidder] > 0)
    assert (market.spent <= market.budget * (1 + 1e-12)).all()
    assert market.spent.sum() > 0.5 * market.budget.sum()  # the budgets bound
    assert unpaid_while_bidding > 0


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

"""The posted-price designs' rounds, which follow the queue's changes, against a from-scratch
reference that rescans the whole queue every round (the designs' earlier code, kept here): the same
orders, bills, prices and tiers, bit for bit, over random queues, budgets and multipliers."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from auction_gym import RadixCache, Request, core, make_scheduler
from auction_gym.market import Market, MarketConfig
from auction_gym.policy import QueueDelta, WaitingRound, round_bids
from auction_gym.pricing import CongestionPricing, ServiceTiers
from auction_gym.pricing.posted_round import PostedRound
from auction_gym.pricing.tiers import TiersLPM, best_tier


class ReferenceTiers:
    """Service tiers decided from scratch each round (the held tiers by request id)."""

    def __init__(self, policy: ServiceTiers) -> None:
        self.prices, self.inside, self.seconds = policy.prices, policy.inside, policy.seconds_per_request
        self._tier: dict[int, int] = {}

    def decide_round(self, round: WaitingRound) -> PostedRound:
        queue, remaining = round.queue, round.remaining
        bids = round_bids(queue, round.multipliers)
        tiers, ahead = self._buy(queue, bids, remaining)
        rank = list(range(len(queue)))
        if self.inside == "lpm":
            negated = [-n for n in round.prefix_lens]
            rank.sort(key=negated.__getitem__)
        paying = [tiers[i] if bids[i] > 0 else -1 for i in range(len(queue))]
        if remaining is not None:
            paying = self._within_budgets(queue, bids, paying, ahead, rank, remaining)
        rank.sort(key=lambda i: -paying[i])
        bills = {queue[i].id: (queue[i].bidder, self.prices[paying[i]] * queue[i].prompt_len)
                 for i in range(len(queue)) if paying[i] >= 0}
        return PostedRound([queue[i] for i in rank], bills, self.prices)

    def _buy(self, queue, bids, remaining):
        held, tiers = self._tier, []
        self._tier = kept = {}
        counts = [0] * len(self.prices)
        for r, b in zip(queue, bids):
            k = held.get(r.id)
            if k is not None and b > 0:
                counts[k] += 1
        for r, b in zip(queue, bids):
            k = held.get(r.id)
            if k is None:
                k = -1
                if b > 0:
                    ahead = [sum(counts[j:]) for j in range(len(counts))]
                    budget = math.inf if remaining is None else remaining[r.bidder]
                    k = best_tier(b, r.prompt_len, ahead, self.prices, self.seconds, budget)
                if k >= 0:
                    counts[k] += 1
                else:
                    k = 0
            kept[r.id] = k
            tiers.append(k)
        return tiers, [sum(counts[j:]) for j in range(len(counts))]

    def _within_budgets(self, queue, bids, paying, ahead, inside, remaining):
        prices, tiers, left = self.prices, list(paying), list(remaining)
        place = [0] * len(queue)
        for position, i in enumerate(inside):
            place[i] = position
        turns: list[list[int]] = [[] for _ in prices]
        for i in inside:
            if tiers[i] >= 0:
                turns[tiers[i]].append(i)
        for k in range(len(prices) - 1, -1, -1):
            for i in sorted(turns[k], key=place.__getitem__):
                r = queue[i]
                bill = prices[k] * r.prompt_len
                if bill <= left[r.bidder]:
                    left[r.bidder] -= bill
                    continue
                j = best_tier(bids[i], r.prompt_len, ahead[:k], prices[:k], self.seconds, left[r.bidder])
                tiers[i] = j
                if j >= 0:
                    turns[j].append(i)
        return tiers


class ReferenceCongestion:
    """Congestion pricing decided from scratch each round (the held choices by request id)."""

    def __init__(self, policy: CongestionPricing) -> None:
        self.price, self.eta, self.target, self.floor = policy.price, policy.eta, policy.target, policy.floor
        self.seconds = policy.seconds_per_request
        self._priority: dict[int, bool] = {}

    def decide_round(self, round: WaitingRound) -> PostedRound:
        price, queue = self.price, round.queue
        bids = round_bids(queue, round.multipliers)
        held, self._priority = self._priority, {}
        paying = sum(1 for r, b in zip(queue, bids) if b > 0 and r.id in held)
        bought = sum(1 for r, b in zip(queue, bids) if b > 0 and held.get(r.id))
        classes = []
        for r, b in zip(queue, bids):
            chosen = held.get(r.id)
            if chosen is None:
                chosen = b > 0 and best_tier(b, r.prompt_len, (paying, bought), (0.0, price), self.seconds) == 1
                paying += b > 0
                bought += chosen
            self._priority[r.id] = chosen
            classes.append(0 if b <= 0 else 2 if chosen else 1)
        rank = sorted(range(len(queue)), key=lambda i: -classes[i])
        bills = {queue[i].id: (queue[i].bidder, price * queue[i].prompt_len)
                 for i in range(len(queue)) if classes[i] == 2}
        utilization = bought / len(queue) if queue else 0.0
        self.price = max(self.floor, price * (1 + self.eta * (utilization - self.target)))
        return PostedRound([queue[i] for i in rank], bills, (price,))


BIDDERS = 4


def _request(rid: int, rng: random.Random, tiny: bool) -> Request:
    urgency = rng.choice([0.0, 1e-30 if tiny else 0.5, rng.uniform(0.01, 3.0), rng.uniform(0.01, 3.0)])
    return Request(rid, rng.randrange(BIDDERS), np.zeros(rng.randint(1, 3000), dtype=np.int64),
                   bid=rng.choice([0.0, rng.uniform(0.01, 3.0)]), urgency=urgency)


def _multipliers(rng: random.Random, tiny: bool) -> list[float] | None:
    if rng.random() < 0.1:
        return None  # a replay: each request bids its own bid
    return [rng.choice([0.0, 1e-300 if tiny else 1.0, rng.uniform(0.0, 2.0), rng.uniform(0.0, 2.0)])
            for _ in range(BIDDERS)]


def _remaining(rng: random.Random, scale: float) -> list[float] | None:
    if rng.random() < 0.15:
        return None
    return [rng.choice([0.0, math.inf, rng.uniform(0.0, scale), rng.uniform(0.0, scale * 20)]) for _ in range(BIDDERS)]


def _rounds(seed: int, rounds: int, scale: float, tiny: bool = False):
    """Random rounds as an engine passes them: arrivals at the queue's end, departures, retractions
    (back at the end, some within one round's changes), changes sometimes not given; every request's
    cached prefix length drawn anew each round."""
    rng = random.Random(seed)
    queue: list[Request] = []
    gone: list[Request] = []
    next_id = 0
    for _ in range(rounds):
        before = list(queue)
        for _ in range(rng.choice([0, 0, 1, 2, 5, 20])):
            if queue and rng.random() < 0.5:
                gone.append(queue.pop(rng.randrange(len(queue))))
        if gone and rng.random() < 0.2:
            queue.append(gone.pop(rng.randrange(len(gone))))  # retracted: at the end
        for _ in range(rng.choice([0, 1, 1, 2, 3, 8])):
            queue.append(_request(next_id, rng, tiny))
            next_id += 1
        then, now = set(before), set(queue)
        joined = [r for r in queue if r not in then]
        if rng.random() < 0.2:
            rng.shuffle(joined)  # changes need not list the new requests in queue order
        delta = QueueDelta(joined, [r for r in before if r not in now], [],
                           {r: rng.randrange(0, r.prompt_len + 1) for r in queue})
        changes = delta if rng.random() < 0.9 else None
        yield WaitingRound(list(queue), None, _multipliers(rng, tiny), _remaining(rng, scale), changes,
                           delta.length_of)


def _same(got: PostedRound, want: PostedRound) -> None:
    assert [r.id for r in got.order] == [r.id for r in want.order]
    assert all(a is b for a, b in zip(got.order, want.order))
    assert got.bills == want.bills
    assert got.prices == want.prices


@pytest.mark.both_cores
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("make", [lambda: ServiceTiers(), lambda: TiersLPM(),
                                  lambda: ServiceTiers(1e-4, (0.2, 1.0, 1.7, 4.0), "lpm", 0.3),
                                  lambda: ServiceTiers(1e306)])  # bills that overflow
@pytest.mark.parametrize("scale", [1e-3, 1.0])
def test_tier_rounds_match_the_rounds_decided_from_scratch(seed, make, scale):
    policy = make()
    reference, stepped = ReferenceTiers(policy), 0
    for round_ in _rounds(seed, 150, scale, tiny=seed % 3 == 0):
        got, want = policy.decide_round(round_), reference.decide_round(round_)
        _same(got, want)
        stepped += round_.remaining is not None and len(want.bills) < sum(
            b > 0 for b in round_bids(round_.queue, round_.multipliers))
    assert stepped > 0 or scale == 1.0  # the small budgets bind in some rounds


@pytest.mark.both_cores
@pytest.mark.parametrize("seed", range(6))
def test_congestion_rounds_match_the_rounds_decided_from_scratch(seed):
    policy = CongestionPricing(price=1e-4, eta=0.3)
    reference = ReferenceCongestion(policy)
    for round_ in _rounds(seed, 150, 1.0, tiny=seed % 3 == 0):
        got, want = policy.decide_round(round_), reference.decide_round(round_)
        _same(got, want)
        assert policy.price == reference.price


@pytest.mark.both_cores
def test_changes_that_do_not_lead_from_the_last_round_are_not_followed():
    """A round whose changes are relative to another queue (a policy shared, or called outside the
    engine in between) is decided by comparing ids, as the reference decides it."""
    rng = random.Random(7)
    requests = [_request(i, rng, False) for i in range(30)]
    policy = ServiceTiers()
    reference = ReferenceTiers(policy)
    multipliers, remaining = [1.0] * BIDDERS, [1e-3] * BIDDERS
    first = WaitingRound(requests[:20], None, multipliers, remaining)
    _same(policy.decide_round(first), reference.decide_round(first))
    wrong = QueueDelta(requests[20:25], requests[:2], [], {})  # leads from a queue it never saw
    second = WaitingRound(requests[5:30], None, multipliers, remaining, wrong)
    _same(policy.decide_round(second), reference.decide_round(second))
    # Changes from another engine's queue (another cache) that look as if they lead on.
    other = WaitingRound([requests[0], *requests[7:30]], object(), multipliers, remaining,
                         QueueDelta([], requests[5:6], [], {}))
    _same(policy.decide_round(other), reference.decide_round(other))
    # Another object under a held id holds what the id held.
    clone = Request(requests[6].id, (requests[6].bidder + 1) % BIDDERS, np.zeros(50, dtype=np.int64), urgency=2.0)
    third = WaitingRound([requests[5], clone, *requests[7:30]], None, multipliers, remaining)
    _same(policy.decide_round(third), reference.decide_round(third))
    # Changes that say a request left that did not wait.
    fourth = WaitingRound([requests[5], clone, *requests[7:29], requests[0]], None, multipliers, remaining,
                          QueueDelta([requests[0]], [requests[1]], [], {}))
    _same(policy.decide_round(fourth), reference.decide_round(fourth))
    # Changes that say a request joined that waited.
    fifth = WaitingRound([requests[5], clone, *requests[7:30], requests[0]], None, multipliers, remaining,
                         QueueDelta([requests[0]], [], [], {}))
    _same(policy.decide_round(fifth), reference.decide_round(fifth))


@pytest.mark.both_cores
@pytest.mark.parametrize("mechanism", ["tiers", "tiers_lpm", "congestion"])
def test_an_engines_rounds_match_the_rounds_decided_from_scratch(mechanism, monkeypatch):
    """Over a paced episode whose budgets bind, every round the engine asks for (with the changes
    it reports, on either core) is the round the reference decides from scratch."""
    cls = type(make_scheduler(mechanism))
    decide, references = cls.decide_round, {}
    followed = []

    def shadowed(self, round_):
        reference = references.setdefault(id(self), (ReferenceCongestion if mechanism == "congestion"
                                                      else ReferenceTiers)(self))
        got = decide(self, round_)
        _same(got, reference.decide_round(round_))
        followed.append(round_.changes is not None)
        return got

    monkeypatch.setattr(cls, "decide_round", shadowed)
    market = Market(MarketConfig(mechanism=mechanism, horizon=60, warmup=2.0, budget_per_round=3e-5))
    market.reset(4)
    rng = np.random.default_rng(1)
    while not market.done:
        market.step(rng.choice([0.0, 0.5, 2.0, 4.0], size=market.n))
    assert sum(followed) > 50 and not all(followed)


@pytest.mark.both_cores
@pytest.mark.parametrize("make", [ServiceTiers, lambda: CongestionPricing(price=1e-4)])
def test_changes_whose_sizes_balance_but_miss_a_request_are_not_followed(make):
    """Changes from a queue the policy never saw whose counts add up to this queue's size, with
    the left one held and the joined one last: one request waits that neither the last round held
    nor the changes name, and one the last round held is gone unnamed. Decided by comparing ids."""
    rng = random.Random(3)
    requests = [_request(i, rng, False) for i in range(25)]
    policy = make()
    reference = (ReferenceCongestion if isinstance(policy, CongestionPricing) else ReferenceTiers)(policy)
    multipliers, remaining = [1.0] * BIDDERS, [1e-3] * BIDDERS
    first = WaitingRound(requests[:20], None, multipliers, remaining)
    _same(policy.decide_round(first), reference.decide_round(first))
    queue = [*requests[1:19], requests[21], requests[20]]  # requests[19] gone, requests[21] new: unnamed
    second = WaitingRound(queue, None, multipliers, remaining, QueueDelta([requests[20]], [requests[0]], [], {}))
    _same(policy.decide_round(second), reference.decide_round(second))


@pytest.mark.both_cores
@pytest.mark.parametrize("mechanism", ["tiers", "tiers_lpm"])
def test_posted_rounds_charge_alike_when_asked_again(mechanism):
    """A posted round declares charges without state (`Decision.stateless_charges`), so the market
    asks it without keeping its first answer: asked again after the round settled, it answers what
    the market charged, before the budget cap."""
    market = Market(MarketConfig(mechanism=mechanism, horizon=80, warmup=2.0, budget_per_round=3e-5))
    market.reset(2)
    charged = 0
    while not market.done:
        report = market.step([1.0] * market.n)
        if report.decision is None:
            continue
        assert report.decision.stateless_charges
        per_bidder = [0] * market.n
        for rid in report.admitted:
            per_bidder[market.engine.records[rid].bidder] += 1
        due = report.decision.charges(report.admitted, per_bidder, 1.0)
        assert due == report.decision.charges(report.admitted, per_bidder, 1.0)
        for i, paid in enumerate(report.payments.tolist()):
            assert paid == due.get(i, 0.0) or i in report.capped
        charged += any(due.values())
    assert charged > 20


def _queue() -> list[Request]:
    return [Request(i, i % 3, np.arange(1, 2 + i, dtype=np.int64), urgency=10.0 ** i) for i in range(5)]


def _decided(design, queue, multipliers, remaining) -> tuple[list[int], dict]:
    got = design.decide_round(WaitingRound(queue, RadixCache(), multipliers, remaining))
    return [r.id for r in got.order], got.bills


@pytest.mark.both_cores
@pytest.mark.parametrize("mechanism", ["tiers", "tiers_lpm"])
@pytest.mark.parametrize("bad", [[math.nan, 1.0, 1.0], [-1.0, 1.0, 1.0], ["a lot", 1.0, 1.0], 1.0])
def test_budgets_left_that_are_not_numbers_ge_0_are_refused(mechanism, bad):
    with pytest.raises(ValueError, match="remaining must be a sequence of numbers >= 0"):
        _decided(make_scheduler(mechanism), _queue(), [1.0, 1.0, 1.0], bad)


@pytest.mark.both_cores
@pytest.mark.parametrize("mechanism", ["tiers", "tiers_lpm", "congestion"])
def test_a_bidder_without_a_multiplier_or_budget_left_is_named_and_the_next_round_is_unchanged(mechanism):
    """A later round whose per-bidder lists miss a bidder whose requests are held: named, and the
    design's next round is the one of a design that never saw it."""
    queue, full = _queue(), [1.0, 1.0, 1.0]
    design, kept = make_scheduler(mechanism), make_scheduler(mechanism)
    assert _decided(design, queue, full, full) == _decided(kept, queue, full, full)
    with pytest.raises(ValueError, match="request 2 is bidder 2's, but the round has 2 multipliers"):
        _decided(design, queue, [1.0, 1.0], None)
    if mechanism != "congestion":  # congestion reads no budgets
        with pytest.raises(ValueError, match="remaining has 2 budgets left for 3 multipliers: one per bidder"):
            _decided(design, queue, full, [1.0, 1.0])
        with pytest.raises(ValueError, match=r"request 2 is bidder 2's, but the round has 2 budgets left \(remaining\)"):
            _decided(design, queue, None, [1.0, 1.0])
    assert _decided(design, queue, full, full) == _decided(kept, queue, full, full)


@pytest.mark.both_cores
@pytest.mark.parametrize("mechanism", ["tiers", "tiers_lpm", "congestion"])
@pytest.mark.parametrize("reported", [False, True])
@pytest.mark.parametrize("market, bad", [(False, math.nan), (False, -1.0), (False, math.inf), (True, math.nan),
                                         (True, -1.0), (True, math.inf), (True, "overflow")])
def test_a_joining_request_whose_bid_is_not_finite_and_ge_0_is_named(mechanism, market, reported, bad):
    """A request whose bid (in a market, its multiplier x urgency) was changed after construction
    to NaN, a negative or inf, or overflows there, is named when it joins, whether the round's
    changes are reported or the queues compared, and the design's next round is the one of a design
    that never saw it."""
    queue = _queue()
    multipliers = [1.0, 1.0, 1.0] if market else None
    design, kept = make_scheduler(mechanism), make_scheduler(mechanism)

    def decided(design, queue, multipliers, joined):
        changes = QueueDelta(joined, [], [], {}) if reported else None
        got = design.decide_round(WaitingRound(queue, RadixCache(), multipliers, None, changes))
        return [r.id for r in got.order], got.bills

    first = queue[:4]
    assert decided(design, first, multipliers, first) == decided(kept, first, multipliers, first)
    late = queue[4]  # bidder 1's, urgency and bid 10^4
    if bad == "overflow":  # a market's bid only: a replay's is the request's own
        bad_multipliers = [1.0, 1e305, 1.0]
    else:
        bad_multipliers = multipliers
        setattr(late, "urgency" if market else "bid", bad)
    with pytest.raises(ValueError, match="request 4: bid must be finite and >= 0"):
        decided(design, queue, bad_multipliers, [late])
    late.urgency = late.bid = 1e4
    assert decided(design, queue, multipliers, [late]) == decided(kept, queue, multipliers, [late])


def _weighted() -> list[Request]:
    """Two bidders' requests, bid = urgency: bidder 0 holds a weight (1e-5) whose product with a
    subnormal multiplier underflows, so its requests are looked at one by one (held.py)."""
    weights = [1.0, 10.0, 100.0, 10.0, 1e-5, 1.0, 100.0, 10.0]
    return [Request(i, i % 2, np.arange(1, 200 + 50 * i, dtype=np.int64), bid=w, urgency=w)
            for i, w in enumerate(weights)]


@pytest.mark.both_cores
@pytest.mark.parametrize("mechanism", ["tiers", "tiers_lpm", "congestion"])
@pytest.mark.parametrize("kind", ["market", "replay", "market to replay", "handed over"])
@pytest.mark.parametrize("value", [1e-9, 1e6, 0.0, math.nan, math.inf, -1.0])
def test_a_held_requests_weight_is_the_one_it_joined_with(mechanism, kind, value):
    """A held request's weight (in a market its urgency, in a replay its bid) changed after it
    joined: every later round (step-down within budgets, the bidders looked at one by one, the
    bills, the requests that join after it, a change of bid kind, the hand-over to Python of a
    round the compiled book declines) is the round of a design on the Python core fed the
    requests unchanged."""
    changed, unchanged = _weighted(), _weighted()
    design = make_scheduler(mechanism)
    with core.use("python"):
        reference = make_scheduler(mechanism)
    market = kind != "replay"
    first = [1.0, 1.0] if market else None
    cache = RadixCache()

    def same(multipliers, remaining, n):
        got = design.decide_round(WaitingRound(changed[:n], cache, multipliers, remaining))
        want = reference.decide_round(WaitingRound(unchanged[:n], cache, multipliers, remaining))
        assert [r.id for r in got.order] == [r.id for r in want.order]
        assert got.bills == want.bills and got.prices == want.prices

    same(first, [1.0, 1.0], 6)
    setattr(changed[2], "urgency" if kind in ("market", "handed over") else "bid", value)
    if kind == "handed over":
        same([1, 1], [1.0, 1.0], 6)  # ints: the compiled book hands what it held to Python
        if core.active() == "compiled":
            assert design._book is None
    later = [[1.0, 1.0], [1e-320, 1.0], [0.0, 1.0]] if kind in ("market", "handed over") else [None]
    same(later[0], [1e-4, 1e-4], 8)  # two join, buying by what the held requests weigh
    for multipliers in later:
        for left in (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, math.inf):
            same(multipliers, [left, left], 8)


@pytest.mark.both_cores
@pytest.mark.parametrize("mechanism", ["tiers", "tiers_lpm", "congestion"])
@pytest.mark.parametrize("kind", ["market", "replay", "market to replay", "replay to market", "handed over"])
@pytest.mark.parametrize("changed_field", ["bidder", "bidder out of range", "fewer tokens", "more tokens"])
def test_a_held_requests_bidder_and_tokens_are_the_ones_it_joined_with(mechanism, kind, changed_field):
    """A held request's bidder or tokens (so its prompt length) changed after it joined: every
    later round (which bidder's budget it is billed from and stepped down within, the bidders looked
    at one by one, its bill, a change of bid kind, the hand-over to Python of a round the compiled
    book declines, its leaving, the check that each bidder read has a multiplier and a budget left)
    is the round of a design on the Python core fed the requests unchanged. Requests 2 (weight 100) and 4 (1e-5, looked at one by one) are bidder 0's."""
    changed, unchanged = _weighted(), _weighted()
    design = make_scheduler(mechanism)
    with core.use("python"):
        reference = make_scheduler(mechanism)
    market = kind in ("market", "market to replay", "handed over")
    cache = RadixCache()

    def same(queue_ids, multipliers, remaining):
        got = design.decide_round(WaitingRound([changed[i] for i in queue_ids], cache, multipliers, remaining))
        want = reference.decide_round(WaitingRound([unchanged[i] for i in queue_ids], cache, multipliers, remaining))
        assert [r.id for r in got.order] == [r.id for r in want.order]
        assert got.bills == want.bills and got.prices == want.prices

    same(range(6), [1.0, 1.0] if market else None, [1.0, 1.0])
    for i in (2, 4):
        if changed_field.startswith("bidder"):
            changed[i].bidder = 1 if changed_field == "bidder" else 7  # 7: no multiplier or budget left
        else:
            changed[i].tokens = np.arange(1, 3 if changed_field == "fewer tokens" else 5000, dtype=np.int64)
    if kind == "handed over":
        same(range(6), [1, 1], [1.0, 1.0])  # ints: the compiled book hands what it held to Python
        if core.active() == "compiled":
            assert design._book is None
    later = [[1.0, 1.0], [1e-320, 1.0], [0.0, 1.0]] if kind in ("market", "handed over", "replay to market") else [None]
    same(range(8), later[0], [1e-4, 1e-4])  # two join, buying by what the held requests hold
    for multipliers in later:
        for left in (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, math.inf):
            same(range(8), multipliers, [left, left])
    same([0, 1, 3, 5, 6, 7], later[-1], [1e-4, 1e-4])  # 2 and 4 leave: their bidder's counts go with them
    same([0, 1, 3, 5, 6, 7], later[0], [1e-4, 1e-4])


@pytest.mark.both_cores
@pytest.mark.parametrize("mechanism", ["tiers", "tiers_lpm", "congestion"])
@pytest.mark.parametrize("to_market", [False, True])
@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf, "overflow"])
def test_a_held_requests_other_weight_is_checked_when_the_bid_kind_changes(mechanism, to_market, bad):
    """The field a held request joined with but was not weighed by (its bid in a market, its
    urgency in a replay) becomes its weight when the bid kind changes: one that is NaN, < 0 or inf
    there, or whose product with its multiplier overflows, is named then, on either core, and the
    round of the kind it joined under goes on as before."""
    if bad == "overflow" and not to_market:
        pytest.skip("a replay's bid is the request's own: no product")
    queue, kept = _weighted(), _weighted()
    design, reference = make_scheduler(mechanism), make_scheduler(mechanism)
    joined_under = None if to_market else [1.0, 1.0]
    if bad != "overflow":
        setattr(queue[2], "urgency" if to_market else "bid", bad)  # read at join, weighed by nothing yet
    for d, q in ((design, queue), (reference, kept)):
        d.decide_round(WaitingRound(q, RadixCache(), joined_under, None))
    switched = ([1e307, 1.0] if bad == "overflow" else [1.0, 1.0]) if to_market else None
    with pytest.raises(ValueError, match="request 2: bid must be finite and >= 0"):
        design.decide_round(WaitingRound(queue, RadixCache(), switched, None))
    got = design.decide_round(WaitingRound(queue, RadixCache(), joined_under, None))
    want = reference.decide_round(WaitingRound(kept, RadixCache(), joined_under, None))
    assert [r.id for r in got.order] == [r.id for r in want.order] and got.bills == want.bills


@pytest.mark.parametrize("ratios", [5, ["a lot"], [1.0, None], [2.0, 1.0]])
def test_tier_ratios_that_are_not_increasing_numbers_are_named(ratios):
    with pytest.raises(ValueError, match="ratios must be numbers, finite, > 0 and strictly increasing"):
        ServiceTiers(ratios=ratios)

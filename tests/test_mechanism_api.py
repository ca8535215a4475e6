"""The auctions' contract: validation, empty rounds, `decide` (the face the engine calls), and the cached argument."""

from __future__ import annotations

import math

import numpy as np
import pytest

from auction_gym import EngineConfig, RadixCache, Request, SimEngine
from auction_gym.mechanism import AuctionOutcome, RadixTreeAuction, StrictPriorityAuction
from auction_gym.policy import AdmissionPolicy, QueueDelta, WaitingRound
from auction_gym.scheduler.base import admission_order, make_scheduler

AUCTIONS = [RadixTreeAuction, StrictPriorityAuction]


def queue() -> list[Request]:
    return [
        Request(0, 0, [1, 2, 3], bid=1.0),
        Request(1, 1, [1, 2, 4], bid=2.0),
        Request(2, 0, [5], bid=0.5),
        Request(3, 2, [1, 2], bid=3.0),
    ]


@pytest.mark.parametrize("cls", AUCTIONS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, -1e-12, "high", None])
def test_invalid_bid_names_the_request(cls, bad):
    reqs = queue()
    reqs[2].bid = bad  # the market rewrites bids after construction
    with pytest.raises(ValueError, match="request 2"):
        cls().run(reqs)


@pytest.mark.parametrize("cls", AUCTIONS)
def test_duplicate_ids_and_empty_tokens_are_rejected(cls):
    reqs = queue() + [Request(1, 3, [9], bid=1.0)]
    with pytest.raises(ValueError, match="request 1.*duplicate"):
        cls().run(reqs)
    reqs = queue()
    reqs[3].tokens = np.array([], dtype=np.int64)
    with pytest.raises(ValueError, match="request 3.*empty"):
        cls().run(reqs)


@pytest.mark.parametrize("cls", AUCTIONS)
def test_constructor_checks(cls):
    with pytest.raises(ValueError, match="cost_model"):
        cls(cost_model="latency")
    with pytest.raises(ValueError, match="request_overhead"):
        cls(cost_model="tokens", request_overhead=-0.5)
    assert cls("tokens", request_overhead=0).request_overhead == 0.0


@pytest.mark.parametrize("cls", AUCTIONS)
def test_empty_queue(cls):
    outcome = cls().run([])
    assert outcome == AuctionOutcome(order=[], payments={}, welfare=0.0, completion={})


@pytest.mark.parametrize("cls", AUCTIONS)
def test_single_bidder_pays_nothing(cls):
    reqs = [Request(k, 7, [k % 2, k], bid=float(k)) for k in range(5)]
    assert cls("tokens").run(reqs).payments == {7: 0.0}


@pytest.mark.parametrize(
    "name,cls", [("radix_vcg", RadixTreeAuction), ("strict_vcg", StrictPriorityAuction)]
)
def test_decide_returns_the_round(name, cls):
    auction = make_scheduler(name, cost_model="tokens", request_overhead=2.0)
    assert isinstance(auction, cls) and isinstance(auction, AdmissionPolicy) and auction.decides and auction.charges
    assert auction.name == name
    cache = RadixCache()
    cache.insert([1, 2])
    reqs = queue()
    decided = auction.decide(reqs, cache)
    admitted = decided.admission_order()
    assert [r.id for r in admitted] == decided.outcome.order
    assert all(any(r is q for q in reqs) for r in admitted)
    assert decided.outcome == auction.run(reqs, cached=[[1, 2]])
    order, again = admission_order(auction, reqs, cache)  # the engine's call
    assert order == admitted and again.allocation is decided.allocation


def test_known_example():
    """Unit model: [1,2] (bid 3) first, then [1,2,4] (2), [1,2,3] (1), and [5] (0.5) last."""
    outcome = RadixTreeAuction(cost_model="unit").run(queue())
    assert outcome.order == [3, 1, 0, 2]
    assert outcome.welfare == -(3 * 1 + 2 * 2 + 1 * 3 + 0.5 * 4)
    # Bidder 2 delays 2 + 1 + 0.5 by one position; bidder 1 delays 1 + 0.5; bidder 0 is last.
    assert outcome.payments == {0: 0.0, 1: 1.5, 2: 3.5}


def test_radix_keeps_prefixes_together_where_strict_does_not():
    reqs = [
        Request(0, 0, [1, 1, 1], bid=5.0),
        Request(1, 1, [2, 2, 2], bid=4.0),
        Request(2, 0, [1, 1, 3], bid=0.0),
    ]
    assert StrictPriorityAuction().run(reqs).order == [0, 1, 2]
    # Block [1,1,*] has average 2.5 < 4: the radix auction serves [2,2,2] first, then the block.
    assert RadixTreeAuction().run(reqs).order == [1, 0, 2]


def test_zero_work_blocks_come_first():
    """Under "tokens" with no overhead, a fully cached request costs nothing and goes first even
    with bid 0; a zero-bid block with work goes last."""
    reqs = [
        Request(0, 0, [1, 2], bid=1.0),
        Request(1, 1, [3], bid=0.0),
        Request(2, 2, [4, 4], bid=0.0),
    ]
    outcome = RadixTreeAuction("tokens", request_overhead=0.0).run(reqs, cached=[[3]])
    assert outcome.order == [1, 0, 2]
    assert outcome.completion == {1: 0.0, 0: 2.0, 2: 4.0}


def test_page_size_cache_is_read_without_changes():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2, 3, 4, 5, 6])
    reqs = [Request(0, 0, [1, 2, 3, 4, 9], bid=1.0), Request(1, 1, [1, 2, 7], bid=1.0)]
    nodes = cache.node_count
    outcome = RadixTreeAuction("tokens", request_overhead=0.0).run(reqs, cached=cache)
    assert cache.node_count == nodes
    # Request 0 has 4 cached tokens, request 1 has 2: one uncached token each.
    assert sorted(outcome.completion.values()) == [1.0, 2.0]


def test_decide_recomputes_when_the_round_changes():
    """`decide` reuses the last allocation only for the same requests, bids and (tokens) cache."""
    queue = [Request(0, 0, [1, 2, 3], 1.0), Request(1, 1, [1, 2, 4], 2.0), Request(2, 2, [5, 6], 0.5)]
    cache = RadixCache()
    for cls in (RadixTreeAuction, StrictPriorityAuction):
        for model in ("unit", "tokens"):
            auction = cls(cost_model=model)
            first = auction.decide(queue, cache).admission_order()
            again = auction.decide(list(queue), cache).admission_order()
            assert [r.id for r in again] == [r.id for r in first]
            queue[2].bid = 9.0
            decided = auction.decide(queue, cache)
            assert decided.admission_order()[0].id == 2
            assert decided.outcome.order == cls(cost_model=model).run(queue, cached=cache).order
            cache.insert([5, 6])
            fresh = cls(cost_model=model).run(queue, cached=cache)
            assert auction.decide(queue, cache).outcome.payments == pytest.approx(fresh.payments)
            queue[2].bid = 0.5
            cache = RadixCache()


@pytest.mark.parametrize("cls", AUCTIONS)
def test_a_round_prices_on_demand(cls):
    """A decided round prices the bidders asked for, as the full outcome does, and stays valid
    while the engine changes the cache."""
    auction = cls(cost_model="tokens")
    cache = RadixCache()
    cache.insert([1, 2])
    reqs = queue()
    expected = cls(cost_model="tokens").run(reqs, cached=[[1, 2]]).payments
    decided = auction.decide(reqs, cache)
    cache.insert([1, 2, 3, 4, 5])  # admission changes the cache; the round's prices must not
    assert decided.payments([1]) == {1: expected[1]}
    assert decided.payments([2, 9]) == {2: expected[2], 9: 0.0}
    assert decided.outcome.payments == expected
    assert decided.payments([1]) == {1: expected[1]}


@pytest.mark.parametrize("cls", AUCTIONS)
@pytest.mark.parametrize("cost_model", ["unit", "tokens"])
def test_decide_returns_the_round_as_one_record(cls, cost_model):
    """`decide` returns what it decided: the queue, bids, cached lengths (under "tokens"), the
    allocation and each bidder's queued count. The engine asking again with the same inputs reuses
    the allocation; other bids make a new one; an empty queue is a round nobody pays in."""
    auction = cls(cost_model=cost_model)
    reqs, cache = queue(), RadixCache()
    cache.insert([1, 2])
    decided = auction.decide(reqs, cache)
    # Priced by a rule of the same class and settings, not by the auction whose state moves on.
    assert decided.pricing is auction.pricing is not auction and type(decided.pricing) is cls
    assert decided.requests == reqs
    assert decided.bids == [r.bid for r in reqs]
    assert (decided.prefix_lens is None) == (cost_model == "unit")
    assert decided.queued == {0: 2, 1: 1, 2: 1}
    assert decided.payments([1, 2]) == {i: decided.outcome.payments[i] for i in (1, 2)}
    assert auction.decide(list(reqs), cache).allocation is decided.allocation
    reqs[0].bid = 7.0
    changed = auction.decide(reqs, cache)
    assert changed.allocation is not decided.allocation and changed.bids[0] == 7.0
    empty = auction.decide([], cache)
    assert empty.admission_order() == [] and empty.allocation is None
    assert empty.payments([0, 1]) == {0: 0.0, 1: 0.0} and empty.outcome == AuctionOutcome()


@pytest.mark.parametrize("cls", AUCTIONS)
def test_multipliers_bid_for_the_requests_without_rewriting_them(cls):
    """With a market's multipliers request r bids multipliers[r.bidder] x urgency in the round;
    its own `bid` is left as reported. Bad multipliers are refused."""
    reqs = [Request(k, k % 3, [1, k], bid=1.0, urgency=0.5 + k) for k in range(4)]
    decided = cls().decide(reqs, RadixCache(), [2.0, 0.0, 1.0])
    assert decided.bids == [[2.0, 0.0, 1.0][r.bidder] * r.urgency for r in reqs]
    assert [r.bid for r in reqs] == [1.0] * 4
    assert decided.outcome == cls().run([Request(r.id, r.bidder, r.tokens, bid=b, urgency=r.urgency)
                                         for r, b in zip(reqs, decided.bids)])
    with pytest.raises(ValueError, match="multipliers"):
        cls().decide(reqs, RadixCache(), [1.0, -1.0, 1.0])


@pytest.mark.parametrize("cost_model,cached", [("unit", None), ("tokens", None), ("tokens", [[7, 8]])])
@pytest.mark.parametrize("bid", [0.0, 0.75, 3.0])
def test_lone_request_allocation_equals_the_general_loop(cost_model, cached, bid):
    """A queue of one skips the per-node loops; every field must be what the loops would give."""
    from dataclasses import fields

    from auction_gym.mechanism.queue_tree import build_queue_tree, cached_prefix_lengths

    auction = RadixTreeAuction(cost_model=cost_model, request_overhead=2.5)
    reqs = [Request(4, 1, [7, 8, 9, 10], bid=bid)]
    tokens = [reqs[0].tokens]
    tree = build_queue_tree(tokens, None if cost_model == "unit" else cached_prefix_lengths(tokens, cached))
    lone = auction._allocate_lone(reqs, [bid], tree, reqs[0].id)
    loop = auction._allocate_tree(reqs, [bid], tree, [reqs[0].id])
    for f in fields(lone):
        assert getattr(lone, f.name) == getattr(loop, f.name), f.name
    assert auction.allocate(reqs, cached).completion == loop.completion
    assert auction.payments(lone) == {1: 0.0}


@pytest.mark.parametrize("cls", AUCTIONS)
def test_checks_still_apply_to_arrays_the_memo_holds(cls):
    """Token checks are skipped for arrays the auction has seen, never the bid or id checks, and a
    request given a new (bad) array is checked again."""
    auction = cls()
    reqs = queue()
    cache = RadixCache()
    auction.decide(reqs, cache)
    reqs[1].bid = math.nan
    with pytest.raises(ValueError, match="request 1: bid"):
        auction.decide(reqs, cache)
    reqs[1].bid = 2.0
    twin = Request(0, 5, [9], bid=1.0)
    with pytest.raises(ValueError, match="duplicate"):
        auction.decide(reqs + [twin], cache)
    reqs[2].tokens = np.zeros(0, dtype=np.int64)
    reqs[2].bid = 0.25  # a new round, so no reuse of the last one
    with pytest.raises(ValueError, match="request 2: empty token sequence"):
        auction.decide(reqs, cache)


@pytest.mark.parametrize("cls", AUCTIONS)
def test_decide_reuses_only_the_same_request_objects(cls):
    """An equal-looking round made of other Request objects (same ids and bids, other tokens) is a
    new round: its costs come from its own tokens."""
    auction = cls(cost_model="tokens")
    reqs, cache = queue(), RadixCache()
    cache.insert([6, 7, 8])  # cached for the new request 3, not for the old one
    first = auction.decide(reqs, cache).outcome
    swapped = reqs[:3] + [Request(3, 2, [6, 7, 8, 9], bid=3.0)]
    fresh = cls(cost_model="tokens").run(swapped, cached=cache)
    assert fresh.completion != first.completion  # so a wrong reuse would show
    again = auction.decide(swapped, cache).outcome
    assert again.completion == fresh.completion
    assert again.order == fresh.order


class _Checked:
    """An auction that decides with `inner` and checks, at every round the engine asks for, that
    its outcome equals a fresh auction's run on the same queue and cache."""

    def __init__(self, inner, fresh) -> None:
        self.inner, self.fresh, self.name, self.rounds = inner, fresh, inner.name, 0

    def decide(self, queue, cache, multipliers=None):
        decided = self.inner.decide(queue, cache, multipliers)
        assert decided.outcome == self.fresh().run(list(queue), cached=cache)
        self.rounds += 1
        return decided


@pytest.mark.parametrize("cls", [RadixTreeAuction, StrictPriorityAuction])
@pytest.mark.parametrize("page_size", [1, 4])
def test_scheduler_face_keeps_cached_lengths_as_a_fresh_read_of_the_cache(cls, page_size):
    """The scheduler face reads cached prefix lengths incrementally (only requests a cache change
    can affect are re-matched); over a whole replay with evictions they equal fresh reads."""
    from auction_gym.workload import AgenticConfig, agentic_workload

    reqs = agentic_workload(AgenticConfig(num_bidders=3, rate=60.0, duration=4.0, system_prompt_len=64,
                                          tool_defs_len=64, context_len=96), seed=1)
    checked = _Checked(cls(cost_model="tokens"), lambda: cls(cost_model="tokens"))
    engine = SimEngine(checked, EngineConfig(kv_capacity_tokens=6000, max_running_requests=8, page_size=page_size))
    engine.run(reqs)
    assert checked.rounds > 50 and all(rec.finished for rec in engine.records.values())


def engine_round(reqs: list[Request], multipliers: list[float]) -> WaitingRound:
    """A market's round as an engine passes it: its multipliers and each request's cached length."""
    return WaitingRound(reqs, RadixCache(), multipliers, None, None, {r: 0 for r in reqs})


@pytest.mark.both_cores
@pytest.mark.parametrize("cls", AUCTIONS)
@pytest.mark.parametrize("cost_model", ["tokens", "unit"])
@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf])
def test_a_round_bid_that_is_not_finite_and_non_negative_names_the_request(cls, cost_model, bad):
    """A market's round bids multiplier x urgency, which no request holds: an urgency changed after
    construction is refused as a changed bid is, in an engine's round and in `decide`, and the
    auction's next round is the one a fresh auction decides."""
    reqs, multipliers = queue(), [1.0, 1.0, 1.0]
    auction = cls(cost_model)
    reqs[1].urgency = bad
    with pytest.raises(ValueError, match="request 1: bid must be finite and >= 0"):
        auction.admit(engine_round(reqs, multipliers))
    with pytest.raises(ValueError, match="request 1: bid must be finite and >= 0"):
        auction.decide(reqs, RadixCache(), multipliers)
    reqs[1].urgency = 2.0
    order, decided = auction.admit(engine_round(reqs, multipliers))
    fresh_order, fresh = cls(cost_model).admit(engine_round(reqs, multipliers))
    assert order == fresh_order and decided.payments([0, 1, 2]) == fresh.payments([0, 1, 2])


@pytest.mark.both_cores
@pytest.mark.parametrize("cls", AUCTIONS)
@pytest.mark.parametrize("cost_model", ["tokens", "unit"])
@pytest.mark.parametrize("reported", [False, True])
def test_a_multiplier_times_urgency_that_overflows_names_the_request(cls, cost_model, reported):
    """A finite multiplier and urgency whose product overflows bid inf, which the VCG payments would
    read as NaN: the request is named, in a round that follows the engine's changes (the radix
    auction's one compiled call on the compiled core) or not, and in `decide`, and the auction's
    next round is the one a fresh auction decides."""
    reqs = queue()
    lens = {r: 0 for r in reqs}

    def round_(multipliers: list[float], first: bool = False) -> WaitingRound:
        changes = QueueDelta(list(reqs) if first else [], [], [], lens) if reported else None
        return WaitingRound(reqs, RadixCache(), multipliers, None, changes, lens)

    auction = cls(cost_model)
    auction.admit(round_([1.0, 1.0, 1.0], first=True))
    huge = [1.0, 1e308, 1.0]  # request 1, bidder 1's, has urgency 2.0
    with pytest.raises(ValueError, match="request 1: bid must be finite and >= 0, got inf"):
        auction.admit(round_(huge))
    with pytest.raises(ValueError, match="request 1: bid must be finite and >= 0, got inf"):
        auction.decide(reqs, RadixCache(), huge)
    order, decided = auction.admit(round_([1.0, 0.5, 1.0]))
    fresh_order, fresh = cls(cost_model).admit(round_([1.0, 0.5, 1.0], first=True))
    assert order == fresh_order and decided.payments([0, 1, 2]) == fresh.payments([0, 1, 2])


@pytest.mark.both_cores
@pytest.mark.parametrize("cls", AUCTIONS)
def test_allocate_checks_the_bids_it_is_given(cls):
    with pytest.raises(ValueError, match="bids has 2 entries for 4 requests"):
        cls().allocate(queue(), bids=[1.0, 2.0])
    for bad in (math.nan, -1.0, math.inf, "high"):
        with pytest.raises(ValueError, match="request 2: bid must be finite and >= 0"):
            cls().allocate(queue(), bids=[1.0, 2.0, bad, 3.0])


@pytest.mark.both_cores
@pytest.mark.parametrize("name", ["radix_vcg", "strict_vcg", "sglang_priority", "qos_lpm", "tiers", "congestion"])
@pytest.mark.parametrize("bad", [2.0, "high", [1.0, "high", 1.0], [1.0, None, 1.0]])
def test_multipliers_that_are_not_numbers_are_named(name, bad):
    with pytest.raises(TypeError, match="multipliers must be a sequence of numbers, one per bidder"):
        admission_order(make_scheduler(name), queue(), RadixCache(), bad)


@pytest.mark.both_cores
@pytest.mark.parametrize("name", ["sglang_priority", "qos_lpm"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, "high"])
def test_a_priority_order_names_a_request_whose_bid_is_not_a_finite_number(name, bad):
    """SGLang's priority is an integer made from the bid: a bid changed after construction to one
    that makes none is named, not a conversion error from inside."""
    reqs = queue()
    reqs[2].bid = bad
    with pytest.raises(ValueError, match="request 2: bid must be finite and >= 0"):
        admission_order(make_scheduler(name), reqs, RadixCache())


@pytest.mark.both_cores
@pytest.mark.parametrize("name", ["sglang_priority", "qos_lpm"])
@pytest.mark.parametrize("market", [False, True])
def test_a_priority_order_names_a_request_whose_bid_is_negative(name, market):
    """A bid changed after construction to a negative one (in a market, an urgency) is named as the
    auctions name it, not read as a bid of 0, which would give it the lowest priority."""
    reqs = queue()
    if market:
        reqs[2].urgency = -1.0
    else:
        reqs[2].bid = -1.0
    with pytest.raises(ValueError, match="request 2: bid must be finite and >= 0, got -1.0"):
        admission_order(make_scheduler(name), reqs, RadixCache(), [1.0, 1.0, 1.0] if market else None)

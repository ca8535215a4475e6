"""The auctions against an independent brute-force reference (docs/design.md section 3).

The reference below does not use the production tree: the range is every permutation in which, for
every token prefix, the requests extending it are contiguous; completion times come from sets of
token prefixes; optima come from enumeration.
"""

from __future__ import annotations

import itertools
import random

import pytest

from auction_gym import RadixCache, Request
from auction_gym.market import MarketConfig
from auction_gym.mechanism import RadixTreeAuction, StrictPriorityAuction

# ("tokens", the "service" overhead): the market's "service" cost model is "tokens" with the engine's
# per-request service time in prefill tokens (MarketConfig.service_overhead, about 2,130), so the
# brute-force checks hold for it too.
COST_MODELS = [("unit", 1.0), ("tokens", 1.0), ("tokens", 0.0), ("tokens", 2.5),
               ("tokens", MarketConfig(cost_model="service").service_overhead())]


# ----------------------------------------------------------------------------- reference


def prefixes(seq) -> list[tuple[int, ...]]:
    return [tuple(seq[:k]) for k in range(1, len(seq) + 1)]


def contiguity_groups(seqs: list[tuple[int, ...]]) -> list[list[int]]:
    """For every prefix of some sequence, the requests that extend it (groups of >= 2 only)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for r, seq in enumerate(seqs):
        for pre in prefixes(seq):
            groups.setdefault(pre, []).append(r)
    return [g for g in groups.values() if len(g) > 1]


def in_range(order: list[int], groups: list[list[int]]) -> bool:
    pos = {r: k for k, r in enumerate(order)}
    return all(max(pos[r] for r in g) - min(pos[r] for r in g) == len(g) - 1 for g in groups)


def ref_completion(order, seqs, cached: set, cost_model: str, overhead: float) -> dict[int, float]:
    """C_k = |U_k minus cached| + k * overhead ("tokens") or k ("unit"), per request index."""
    done, covered = {}, set()
    for k, r in enumerate(order, start=1):
        if cost_model == "unit":
            done[r] = float(k)
        else:
            covered.update(p for p in prefixes(seqs[r]) if p not in cached)
            done[r] = len(covered) + k * overhead
    return done


def ref_cost(order, seqs, bids, cached, cost_model, overhead, only=None) -> float:
    done = ref_completion(order, seqs, cached, cost_model, overhead)
    return sum(bids[r] * done[r] for r in order if only is None or r in only)


def ref_optimum(seqs, bids, cached, cost_model, overhead, constrained=True) -> float:
    """Minimal sum of bid x completion over the range (or over all orders)."""
    groups = contiguity_groups(seqs) if constrained else []
    return min(
        ref_cost(list(perm), seqs, bids, cached, cost_model, overhead)
        for perm in itertools.permutations(range(len(seqs)))
        if in_range(list(perm), groups)
    )


def cached_len(seq, cached: set) -> int:
    """The longest prefix of `seq` that `cached` (a set of prefixes) holds."""
    return max([k for k in range(1, len(seq) + 1) if tuple(seq[:k]) in cached], default=0)


def strict_order(reqs: list[Request], cached: set = frozenset(), cost_model: str = "unit") -> list[int]:
    """By bid; equal bids by longest cached prefix (not under "unit", which reads no cache), then
    arrival, then id."""
    lens = [0 if cost_model == "unit" else cached_len(list(r.tokens), cached) for r in reqs]
    return sorted(range(len(reqs)), key=lambda r: (-reqs[r].bid, -lens[r], reqs[r].arrival, reqs[r].id))


def random_instance(seed: int, max_requests: int = 7):
    """Requests over a random shared-prefix tree (inner-node ends, duplicates, equal bids) and a
    list of cached sequences (possibly empty)."""
    rng = random.Random(seed)
    n, n_bidders = min(max_requests, rng.randint(1, max_requests + 2)), rng.randint(1, 4)
    seqs: list[tuple[int, ...]] = []
    for _ in range(n):
        seq: list[int] = []
        if seqs and rng.random() < 0.75:
            base = rng.choice(seqs)
            seq = list(base[: rng.randint(0, len(base))])
        seq += [rng.randrange(3) for _ in range(rng.randint(0, 3))]
        seqs.append(tuple(seq) or (rng.randrange(3),))
    equal_bids = rng.random() < 0.5
    ids = rng.sample(range(50), n)
    reqs = [
        Request(
            id=ids[r],
            bidder=rng.randrange(n_bidders),
            tokens=list(seqs[r]),
            bid=rng.choice([0.0, 1.0, 2.0, 3.0]) if equal_bids else round(rng.uniform(0, 5), 3),
            arrival=float(rng.randrange(3)),
        )
        for r in range(n)
    ]
    cached = []
    if rng.random() < 0.6:
        for _ in range(rng.randint(1, 3)):
            base = rng.choice(seqs)
            tail = [rng.randrange(3)] * rng.randint(0, 1)
            cached.append(list(base[: rng.randint(1, len(base))]) + tail)
    return reqs, cached


def cached_set(sequences) -> set:
    return {p for seq in sequences for p in prefixes(list(seq))}


def make_cache(sequences) -> RadixCache:
    cache = RadixCache()
    for seq in sequences:
        cache.insert(seq)
    return cache


def check_against_reference(outcome, reqs, cached_seqs, cost_model, overhead, constrained: bool):
    """Welfare is the maximum over the range; payments are VCG for the chosen order."""
    seqs = [tuple(int(t) for t in r.tokens) for r in reqs]
    bids = [r.bid for r in reqs]
    cached = cached_set(cached_seqs)
    index = {r.id: k for k, r in enumerate(reqs)}
    order = [index[i] for i in outcome.order]
    assert sorted(order) == list(range(len(reqs)))
    if constrained:
        assert in_range(order, contiguity_groups(seqs))
    done = ref_completion(order, seqs, cached, cost_model, overhead)
    assert outcome.completion == pytest.approx({reqs[r].id: c for r, c in done.items()})
    best = ref_optimum(seqs, bids, cached, cost_model, overhead, constrained)
    scale = max(1.0, abs(best))
    assert -outcome.welfare == pytest.approx(best, rel=1e-9, abs=1e-9 * scale)
    bidders = sorted({r.bidder for r in reqs})
    assert sorted(outcome.payments) == bidders
    for i in bidders:
        others = [k for k, r in enumerate(reqs) if r.bidder != i]
        without = ref_optimum(
            [seqs[k] for k in others], [bids[k] for k in others], cached, cost_model, overhead,
            constrained,
        ) if others else 0.0
        expected = ref_cost(order, seqs, bids, cached, cost_model, overhead, set(others)) - without
        assert outcome.payments[i] >= 0
        assert outcome.payments[i] == pytest.approx(expected, rel=1e-9, abs=1e-9 * scale), i


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("cost_model,overhead", COST_MODELS)
@pytest.mark.parametrize("seed", range(60))
def test_radix_auction_matches_brute_force(seed, cost_model, overhead):
    reqs, cached_seqs = random_instance(seed)
    auction = RadixTreeAuction(cost_model=cost_model, request_overhead=overhead)
    outcome = auction.run(reqs, cached=cached_seqs)
    check_against_reference(outcome, reqs, cached_seqs, cost_model, overhead, constrained=True)
    if cost_model == "tokens":
        # The same cached set given as a RadixCache, which pricing must leave untouched.
        cache = make_cache(cached_seqs)
        before = (cache.node_count, cache._tick, sorted(map(tuple, cache.sequences())))
        again = auction.run(reqs, cached=cache)
        assert (cache.node_count, cache._tick, sorted(map(tuple, cache.sequences()))) == before
        assert again.order == outcome.order
        assert again.payments == pytest.approx(outcome.payments)


@pytest.mark.parametrize("cost_model,overhead", COST_MODELS)
@pytest.mark.parametrize("seed", range(30))
def test_strict_payments_equal_definition(seed, cost_model, overhead):
    """p_i = others' cost in strict(Q without i) subtracted from others' cost in strict(Q)."""
    reqs, cached_seqs = random_instance(1000 + seed)
    outcome = StrictPriorityAuction(cost_model, overhead).run(reqs, cached=cached_seqs)
    seqs = [tuple(int(t) for t in r.tokens) for r in reqs]
    bids = [r.bid for r in reqs]
    cached = cached_set(cached_seqs)
    order = strict_order(reqs, cached, cost_model)
    assert outcome.order == [reqs[r].id for r in order]
    model = (cached, cost_model, overhead)
    assert -outcome.welfare == pytest.approx(ref_cost(order, seqs, bids, *model))
    for i in {r.bidder for r in reqs}:
        others = [r for r in order if reqs[r].bidder != i]
        expected = ref_cost(order, seqs, bids, *model, set(others)) - ref_cost(
            others, seqs, bids, *model
        )
        assert outcome.payments[i] == pytest.approx(expected, rel=1e-9, abs=1e-9), i


@pytest.mark.parametrize("seed", range(30))
def test_strict_unit_is_vcg_over_all_orders(seed):
    reqs, _ = random_instance(2000 + seed)
    outcome = StrictPriorityAuction("unit").run(reqs)
    check_against_reference(outcome, reqs, [], "unit", 1.0, constrained=False)
    # Closed form: sum over others' requests of bid x (number of i's requests ahead).
    order = [r for r in strict_order(reqs)]
    for i in {r.bidder for r in reqs}:
        closed = sum(
            reqs[r].bid * sum(reqs[x].bidder == i for x in order[:k])
            for k, r in enumerate(order)
            if reqs[r].bidder != i
        )
        assert outcome.payments[i] == pytest.approx(closed, rel=1e-12, abs=1e-12)


def true_utility(outcome, reqs, bidder, urgency) -> float:
    return -sum(urgency[r.id] * outcome.completion[r.id] for r in reqs if r.bidder == bidder) - (
        outcome.payments[bidder]
    )


SCALES = [k / 4 for k in range(17)]  # 0 to 4x, including 0 and 1


@pytest.mark.parametrize(
    "auction",
    [RadixTreeAuction("unit"), RadixTreeAuction("tokens", 1.0), RadixTreeAuction("tokens", 0.0),
     StrictPriorityAuction("unit")],
    ids=repr,
)
@pytest.mark.parametrize("seed", range(25))
def test_truthful_reporting_is_optimal(auction, seed):
    reqs, cached_seqs = random_instance(3000 + seed)
    urgency = {r.id: r.bid for r in reqs}
    truthful = auction.run(reqs, cached=cached_seqs)
    rng = random.Random(seed)
    for i in {r.bidder for r in reqs}:
        honest = true_utility(truthful, reqs, i, urgency)
        misreports = [{r.id: s for r in reqs} for s in SCALES]
        misreports += [{r.id: rng.choice(SCALES) for r in reqs} for _ in range(5)]
        for scale in misreports:
            lie = [
                Request(r.id, r.bidder, r.tokens, bid=r.bid * (scale[r.id] if r.bidder == i else 1),
                        arrival=r.arrival)
                for r in reqs
            ]
            gain = true_utility(auction.run(lie, cached=cached_seqs), reqs, i, urgency) - honest
            assert gain <= 1e-9 * max(1.0, abs(truthful.welfare)), (i, scale)


def average_bid_dfs(reqs: list[Request]) -> list[int]:
    """The paper's order: depth-first, children by average subtree bid (descending), ties by the
    smallest request id in the child, a request ending at a node being a child of its own."""
    root: dict = {"kids": {}, "ends": []}
    for r in reqs:
        node = root
        for t in r.tokens:
            node = node["kids"].setdefault(int(t), {"kids": {}, "ends": []})
        node["ends"].append(r)

    def members(node) -> list[Request]:
        return node["ends"] + [r for kid in node["kids"].values() for r in members(kid)]

    def visit(node, out: list[int]) -> None:
        blocks = [([r], r) for r in node["ends"]] + [(members(k), k) for k in node["kids"].values()]
        blocks.sort(key=lambda b: (-sum(r.bid for r in b[0]) / len(b[0]), min(r.id for r in b[0])))
        for _, block in blocks:
            if isinstance(block, Request):
                out.append(block.id)
            else:
                visit(block, out)

    out: list[int] = []
    visit(root, out)
    return out


@pytest.mark.parametrize("seed", range(80))
def test_unit_order_is_children_by_average_subtree_bid(seed):
    rng = random.Random(seed)
    reqs, _ = random_instance(4000 + seed, max_requests=rng.choice([7, 30]))
    for r in reqs:  # bids on a half-unit grid so equal averages are exactly equal in floats
        r.bid = rng.randrange(5) / 2
    assert RadixTreeAuction("unit").run(reqs).order == average_bid_dfs(reqs)


@pytest.mark.parametrize("cost_model,overhead", COST_MODELS)
@pytest.mark.parametrize("seed", range(8))
def test_incremental_payments_equal_rerunning_the_allocation(seed, cost_model, overhead):
    """Larger, deeper queues than brute force allows: payments vs one allocation per bidder."""
    rng = random.Random(seed)
    reqs = []
    for k in range(150):
        base = reqs[rng.randrange(k)].tokens[: rng.randint(0, 12)].tolist() if k else []
        tokens = base + [rng.randrange(4) for _ in range(rng.randint(0 if base else 1, 6))]
        bid = rng.choice([0.0, 0.5, 1.0, rng.uniform(0, 9)])
        reqs.append(Request(k, rng.randrange(6), tokens, bid=bid))
    cached = [r.tokens[: rng.randint(1, len(r.tokens))] for r in rng.sample(reqs, 20)]
    auction = RadixTreeAuction(cost_model, overhead)
    outcome = auction.run(reqs, cached=cached)
    scale = max(1.0, -outcome.welfare)
    for i in {r.bidder for r in reqs}:
        others = [r for r in reqs if r.bidder != i]
        mine = sum(r.bid * outcome.completion[r.id] for r in reqs if r.bidder == i)
        expected = -outcome.welfare - mine - auction.allocate(others, cached).cost
        assert outcome.payments[i] == pytest.approx(expected, rel=1e-9, abs=1e-9 * scale)


@pytest.mark.parametrize("auction_class", [RadixTreeAuction, StrictPriorityAuction])
@pytest.mark.parametrize("cost_model,overhead", COST_MODELS)
@pytest.mark.parametrize("seed", range(30))
def test_payments_of_some_bidders_equal_those_of_all(auction_class, cost_model, overhead, seed):
    """Pricing only the bidders a round charges gives each the payment the full outcome has; a
    bidder with no request in the round pays 0."""
    reqs, cached_seqs = random_instance(seed)
    auction = auction_class(cost_model=cost_model, request_overhead=overhead)
    alloc = auction.allocate(reqs, make_cache(cached_seqs))
    full = auction.payments(alloc)
    assert sorted(full) == sorted({r.bidder for r in reqs})
    for i in full:
        assert auction.payments(alloc, [i]) == {i: full[i]}
    absent = max(full) + 1
    assert auction.payments(alloc, [absent, *full]) == {absent: 0.0, **full}

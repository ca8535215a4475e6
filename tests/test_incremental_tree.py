"""The incremental queue tree (mechanism/incremental_tree.py) against the from-scratch allocation.

After any sequence of arrivals, admissions, cache changes and bid changes, the tree kept across
rounds must give the order the from-scratch build gives, with the same nodes and the same block
stats (bit for bit, so the Smith order cannot differ on a near-tie)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from workloads import branching_workload

from auction_gym import EngineConfig, RadixCache, Request, SimEngine, core
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.mechanism.allocator import OrderedRound
from auction_gym.mechanism.compiled_tree import CompiledQueueTree, queue_tree
from auction_gym.mechanism.incremental_tree import IncrementalQueueTree
from auction_gym.mechanism.radix_auction import RadixAllocation
from auction_gym.mechanism.smith import TIE_BREAKS
from auction_gym.policy import QueueDelta
from auction_gym.workload import iter_mooncake
from auction_gym.workload.mooncake import SAMPLE_TRACE

SLICE = SAMPLE_TRACE

MODELS = [("tokens", 1.0), ("tokens", 0.0), ("tokens", 0.3), ("unit", 1.0)]




def _scratch_stats(alloc) -> list[tuple]:
    t = alloc.tree
    return sorted(
        (t.depth[v], alloc.s[v], alloc.p[v], alloc.tie[v], sorted(alloc.requests[r].id for r in t.attached[v]))
        for v in range(1, t.n_nodes)
    )


def _order(tree: IncrementalQueueTree, queue: list[Request], bids: list[float], lens: list[int]) -> list[Request]:
    """The queue in the order of `tree` brought to it."""
    tree.update(queue, bids, lens)
    return tree.order()


def _check(tree: IncrementalQueueTree, auction: RadixTreeAuction, queue: list[Request], lens: list[int]) -> None:
    bids = [r.bid for r in queue]
    got = _order(tree, queue, bids, lens)
    alloc = auction.allocate(queue, prefix_lens=lens)
    assert [r.id for r in got] == [queue[k].id for k in alloc.order]
    if len(queue) > 1:
        assert tree.node_stats() == _scratch_stats(alloc)


BASES = ([0, 1, 2, 0, 1, 2, 0], [0, 1, 2, 2, 1], [0, 1, 1, 0], [2, 2, 2, 2, 2, 2])
# A cut of a shared base plus a short tail of its own: deep sharing, splits of deep edges, prompts
# that end inside an edge or at a node, and duplicates.
prompts = st.builds(
    lambda base, cut, tail: (base[:cut] + tail) or [1],
    st.sampled_from(BASES), st.integers(0, 7), st.lists(st.integers(0, 2), max_size=3),
)
events = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), prompts, st.sampled_from([0.0, 1.0, 2.5]) | st.floats(0, 10)),
        st.tuples(st.just("admit"), st.integers(0, 99)),
        st.tuples(st.just("cache"), st.integers(0, 99), st.integers(0, 7)),
        st.tuples(st.just("bid"), st.integers(0, 99), st.sampled_from([0.0, 1.0]) | st.floats(0, 10)),
    ),
    min_size=1, max_size=60,
)


@settings(max_examples=300, deadline=None)
@pytest.mark.both_cores
@given(events, st.sampled_from(MODELS), st.integers(1, 4), st.sampled_from(TIE_BREAKS))
def test_incremental_tree_equals_a_build_from_scratch(steps, model, round_every, tie_break):
    """Several events between rounds: a round sees arrivals, admissions and changes together, under
    either tie-break (bids of 0 and 1 make ties common)."""
    auction = RadixTreeAuction(*model, tie_break=tie_break)
    tree = queue_tree(auction.request_work, costed=model[0] == "tokens", cache_ties=auction.cache_ties)
    queue: list[Request] = []
    lens: list[int] = []
    for k, event in enumerate(steps):
        kind, *args = event
        if kind == "arrive":
            queue.append(Request(k, k % 3, args[0], bid=args[1]))
            lens.append(0)
        elif queue and kind == "admit":
            i = args[0] % len(queue)
            del queue[i], lens[i]
        elif queue and kind == "cache":
            i = args[0] % len(queue)
            lens[i] = min(args[1], len(queue[i].tokens))
        elif queue and kind == "bid":
            queue[args[0] % len(queue)].bid = args[1]
        if queue and k % round_every == 0:
            _check(tree, auction, queue, lens)
    if queue:
        _check(tree, auction, queue, lens)


@pytest.mark.both_cores
def test_a_request_seen_twice_or_a_repeated_id_is_refused():
    tree = queue_tree(1.0, costed=True, cache_ties=False)
    a, b = Request(1, 0, [1, 2], bid=1.0), Request(2, 0, [1, 3], bid=1.0)
    _order(tree, [a, b], [1.0, 1.0], [0, 0])
    with pytest.raises(ValueError, match="duplicate"):
        _order(tree, [a, b, a], [1.0, 1.0, 1.0], [0, 0, 0])
    with pytest.raises(ValueError, match="duplicate"):
        _order(tree, [a, b, Request(2, 1, [4], bid=1.0)], [1.0, 1.0, 1.0], [0, 0, 0])
    with pytest.raises(ValueError, match="bid"):
        _order(tree, [a, b], [1.0, float("nan")], [0, 0])
    assert [r.id for r in _order(tree, [b], [1.0], [0])] == [2]  # still usable after a refusal


@pytest.mark.both_cores
def test_a_replaced_prompt_is_placed_again():
    tree = queue_tree(1.0, costed=True, cache_ties=False)
    a, b = Request(1, 0, [1, 2, 3], bid=1.0), Request(2, 0, [1, 2, 4], bid=2.0)
    c = Request(3, 0, [5, 5, 5, 5, 5], bid=1.5)
    _order(tree, [a, b, c], [1.0, 2.0, 1.5], [0, 0, 0])
    c.tokens = Request(3, 0, [1, 2], bid=1.5).tokens  # now shares a's and b's prefix
    auction = RadixTreeAuction()
    _check(tree, auction, [a, b, c], [0, 0, 0])
    c.tokens = np.array([1, 2, 3, 9], dtype=np.int64)  # writeable: may change in place
    _check(tree, auction, [a, b, c], [0, 0, 0])
    c.tokens[:] = [5, 5, 5, 5]
    _check(tree, auction, [a, b, c], [0, 0, 0])


@pytest.mark.both_cores
@pytest.mark.parametrize("workload", ["mooncake", "retracting"])
def test_a_tree_that_follows_the_engines_changes_holds_what_a_fresh_one_builds(workload, monkeypatch):
    """In an engine the scheduler face's tree follows the changes of each refresh of the queue
    (`WaitingPrefixes.delta_since`) instead of comparing queues; after every round it holds the
    nodes and stats of a tree built from that round's queue alone. The second workload has so
    little memory that requests are retracted, and come back to the queue."""
    followed = []
    for tree_class in (IncrementalQueueTree, CompiledQueueTree):  # the compiled tree follows in one call of its own
        follow = tree_class._follow
        monkeypatch.setattr(tree_class, "_follow", lambda *a, _follow=follow: followed.append(1) or _follow(*a))
    if workload == "mooncake":
        engine = SimEngine("radix_vcg", EngineConfig())
        engine.submit(iter_mooncake(SLICE, time_scale=1.0, limit=300))
    else:
        engine = SimEngine("radix_vcg", EngineConfig(kv_capacity_tokens=400, chunked_prefill_size=8, max_prefill_tokens=64))
        engine.submit([replace(r, output_len=12 * r.output_len, max_new_tokens=None) for r in branching_workload(3, n=150)])
    auction, seen, rounds = engine.scheduler, None, 0
    assert isinstance(auction._allocator._tree, CompiledQueueTree) == (core.active() == "compiled")
    while (it := engine.step()) is not None:
        decided = it.decision
        if decided is None or decided.allocation is seen or len(decided.requests) < 2:
            continue
        seen = decided.allocation
        fresh = IncrementalQueueTree(auction.request_work, costed=True, cache_ties=auction.cache_ties)
        fresh.update(decided.requests, decided.bids, decided.prefix_lens)
        assert auction._allocator._tree.node_stats() == fresh.node_stats()
        rounds += 1
    assert rounds > 50 and len(followed) > 0.9 * rounds
    assert workload == "mooncake" or engine.metrics().retractions > 10


@pytest.mark.both_cores
def test_a_bad_bid_leaves_a_following_tree_as_it_was():
    """A refused round changes nothing: the next one, from the same changes, is exact."""
    tree = queue_tree(1.0, costed=True, cache_ties=True)
    a, b, c = Request(1, 0, [1, 2], bid=1.0), Request(2, 0, [1, 3], bid=1.0), Request(3, 1, [1, 2, 4], bid=2.0)
    tree.update([a, b], [1.0, 1.0], [0, 0])
    delta = QueueDelta(joined=[c], left=[a], rematched=[b], length_of={b: 1, c: 2})
    with pytest.raises(ValueError, match="request 3: bid"):
        tree.update([b, c], [1.0, float("nan")], [1, 2], delta)
    with pytest.raises(ValueError, match="request 2: bid"):
        tree.update([b, c], [-1.0, 2.0], [1, 2], delta)
    tree.update([b, c], [1.0, 2.0], [1, 2], delta)
    assert [r.id for r in tree.order()] == [3, 2]
    _check(tree, RadixTreeAuction(), [b, c], [1, 2])
    with pytest.raises(AssertionError, match="left"):
        tree.update([c], [2.0], [2], QueueDelta(joined=[], left=[a], rematched=[], length_of={c: 2}))
    with pytest.raises(AssertionError, match="do not lead"):  # a missed arrival
        tree.update([b, c, a], [1.0, 2.0, 1.0], [1, 2, 0], QueueDelta(joined=[], left=[], rematched=[], length_of={}))
    with pytest.raises(AssertionError, match="joined"):  # the wrong arrival
        tree.update([b, a], [1.0, 1.0], [1, 0], QueueDelta(joined=[c], left=[c], rematched=[], length_of={a: 0}))


@pytest.mark.both_cores
@pytest.mark.parametrize("time_scale", [1.0, 4.0])
def test_engine_rounds_match_the_from_scratch_auction(time_scale):
    """Every round of an engine replay (`decide` without multipliers: the tree's own order) orders
    the queue as the from-scratch allocation of the same inputs does."""
    engine = SimEngine("radix_vcg", EngineConfig())
    auction = engine.scheduler
    scratch = RadixTreeAuction(auction.cost_model, auction.request_overhead)
    engine.submit(iter_mooncake(SLICE, time_scale=time_scale, limit=300))
    rounds, seen = 0, None
    while (it := engine.step()) is not None:
        decided = it.decision
        if decided is None or decided.allocation is None or decided.allocation is seen:
            continue
        seen = decided.allocation
        alloc = scratch.allocate(decided.requests, prefix_lens=decided.prefix_lens)
        assert decided.admission_order() == [decided.requests[k] for k in alloc.order]
        rounds += 1
    assert rounds > 50


@pytest.mark.both_cores
def test_a_priced_round_reads_the_from_scratch_allocation_and_the_tree_stays():
    """Pricing a round builds its allocation from scratch, once; no switch: later rounds are still
    ordered by the kept tree, and still equal the from-scratch auction."""
    queue = [Request(k, k % 3, [k % 2, 1, k % 4, k], bid=1.0 + k % 5) for k in range(12)]
    cache = RadixCache()
    cache.insert(np.array([0, 1, 0, 0, 7], dtype=np.int64))
    auction = RadixTreeAuction()
    decided = auction.decide(queue, cache)
    assert isinstance(decided.allocation, OrderedRound)
    scratch = RadixTreeAuction().run(queue, cache)
    assert [r.id for r in decided.admission_order()] == scratch.order
    assert decided.payments(range(3)) == scratch.payments
    assert decided.outcome == scratch
    assert isinstance(decided.allocation.full, RadixAllocation)
    tree = auction._allocator._tree
    later = auction.decide(queue[1:], cache)
    assert isinstance(later.allocation, OrderedRound) and auction._allocator._tree is tree
    assert later.outcome == RadixTreeAuction().run(queue[1:], cache)
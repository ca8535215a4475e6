"""Cache-aware schedulers: hand-checked orders, and the incremental matcher against fresh matches."""

from __future__ import annotations

import numpy as np
import pytest
from workloads import branching_workload

from auction_gym import EngineConfig, RadixCache, Request, SimEngine, make_scheduler
from auction_gym.engine.sim_engine import PythonSimEngine
from auction_gym.prefix_matcher import PrefixMatcher

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator


def req(i: int, tokens, arrival: float = 0.0) -> Request:
    return Request(i, 0, tokens, 1.0, arrival=arrival)


def ids(rs) -> list[int]:
    return [r.id for r in rs]


def test_fcfs_keeps_the_queues_order():
    """SGLang's `fcfs` leaves its waiting list as it is; the engine's queue is in arrival order
    with retracted requests at the end (`tests/test_engine_sglang.py`)."""
    q = [req(3, [1], 0.5), req(1, [2], 0.5), req(2, [3], 0.1)]
    assert ids(make_scheduler("fcfs").order(q, RadixCache())) == [3, 1, 2]


def test_lpm_orders_by_cached_prefix_then_the_queues_order():
    cache = RadixCache()
    cache.insert([1, 2, 3, 4, 5])
    cache.insert([7, 8])
    q = [req(0, [9, 9]), req(3, [1, 2, 9]), req(1, [7, 8, 1]), req(2, [1, 2, 3, 4, 5, 6])]
    # cached prefixes of the whole prompts: 0, 2, 2, 5; the tie 3, 1 keeps the queue's order
    assert ids(make_scheduler("lpm").order(q, cache)) == [2, 3, 1, 0]


def test_lpm_matches_the_whole_prompt():
    """[1,2] cached; A = [1,2] arrives before B = [1,2,3]. SGLang's policy matches whole prompts:
    both match 2 and tie, so A (first in the queue) goes first (counting all but the last token would
    give A 1 and B 2, and put B first)."""
    cache = RadixCache()
    cache.insert([1, 2])
    a, b = req(0, [1, 2]), req(1, [1, 2, 3], arrival=1.0)
    assert ids(make_scheduler("lpm").order([a, b], cache)) == [0, 1]


def test_lpm_above_its_fcfs_cut_leaves_the_queue_as_it_is():
    """SGLang's `lpm` above its cut takes its `fcfs` branch, which does nothing: the list stays as
    the last sort left it, not sorted by arrival."""
    cache = RadixCache()
    cache.insert([5, 5, 5])
    a, b, c = req(0, [1, 1, 1, 1]), req(1, [5, 5, 5, 1], 1.0), req(2, [2, 2, 2, 2], 2.0)
    lpm = make_scheduler("lpm", fcfs_above=2)
    assert ids(lpm.order([a, b], cache)) == [1, 0]
    assert ids(lpm.order([b, a, c], cache)) == [1, 0, 2]
    assert ids(lpm.order([c, a, b], cache)) == [2, 0, 1]


def test_the_engine_keeps_lpms_order_for_the_next_round():
    """SGLang sorts its waiting list in place, so the next round's ties keep this round's order.
    C (longest match) goes first; B (its prefix cached) would come next but the batch's budget is
    spent: the queue left is B, A (LPM's order), not arrival order A, B."""
    engine = PythonSimEngine("lpm", EngineConfig(chunked_prefill_size=None, max_prefill_tokens=64))
    engine.cache.insert(np.arange(40))
    engine.cache.insert(np.arange(100, 110))
    a = req(0, np.arange(500, 600))
    b = req(1, np.concatenate([np.arange(100, 110), np.arange(700, 790)]))
    c = req(2, np.concatenate([np.arange(40), np.arange(800, 860)]))
    engine.submit([a, b, c])
    assert engine.step().admitted == [2]
    assert ids(engine.queue.requests) == [1, 0]


def test_dfs_weight_takes_a_nodes_own_requests_in_the_queues_order():
    """SGLang's `dfs_weight_order` lists a node's requests by their index in its waiting list."""
    cache = RadixCache()
    cache.insert([1, 1, 1])
    q = [req(1, [1, 1, 1, 5], 1.0), req(0, [1, 1, 1, 6], 0.0)]
    assert ids(make_scheduler("dfs_weight").order(q, cache)) == [1, 0]


def test_dfs_weight_groups_by_subtree_weight():
    cache = RadixCache()
    cache.insert([1, 1, 1, 1])
    cache.insert([2, 2, 2, 2])
    q = [
        req(0, [1, 1, 5]),        # hangs under [1,1] (split point)
        req(1, [2, 2, 2, 2, 7]),  # hangs on [2,2,2,2]
        req(2, [2, 2, 2, 2, 8]),
        req(3, [9, 9]),           # nothing cached: root, last
        req(4, [2, 2, 6]),        # hangs on split point [2,2]; its subtree also holds 1 and 2
    ]
    # [2,2] subtree weighs 3 > [1,1] subtree's 1; inside it, the child [2,2|2,2] (weight 2) comes
    # before the requests hanging on [2,2] itself.
    assert ids(make_scheduler("dfs_weight").order(q, cache)) == [1, 2, 4, 0, 3]


def test_orders_are_permutations_for_every_policy():
    rng = np.random.default_rng(0)
    cache = RadixCache()
    for _ in range(20):
        cache.insert(rng.integers(0, 3, 6))
    q = [req(i, rng.integers(0, 3, int(rng.integers(1, 8))), float(rng.integers(0, 3))) for i in range(30)]
    for name in ("fcfs", "lpm", "klpm", "dfs_weight"):
        assert sorted(ids(make_scheduler(name).order(q, cache))) == list(range(30))


def klpm_queue() -> tuple[list[Request], RadixCache]:
    """Oldest first: 0..5; cached prefixes (last token excluded) 0, 1, 0, 3, 2, 4."""
    cache = RadixCache()
    cache.insert([1, 2, 3, 4, 5])
    q = [req(0, [9, 9], 0.0), req(1, [1, 8], 0.1), req(2, [7, 7], 0.2), req(3, [1, 2, 3, 9], 0.3),
         req(4, [1, 2, 8], 0.4), req(5, [1, 2, 3, 4, 9], 0.5)]
    return q, cache


def test_klpm_cycles_one_oldest_then_k_minus_1_longest_matches():
    q, cache = klpm_queue()
    assert ids(make_scheduler("klpm", k=3).order(q, cache)) == [0, 5, 3, 1, 4, 2]
    assert ids(make_scheduler("klpm", k=2).order(q, cache)) == [0, 5, 1, 3, 2, 4]


def test_klpm_ends_are_fcfs_and_lpm():
    q, cache = klpm_queue()
    assert ids(make_scheduler("klpm", k=1).order(q, cache)) == ids(make_scheduler("fcfs").order(q, cache))
    lpm = ids(make_scheduler("lpm").order(q, cache))
    assert ids(make_scheduler("klpm", k=100).order(q, cache)) == [0] + [i for i in lpm if i != 0]


def test_klpm_cycle_continues_over_admissions():
    """After one admission of a k=3 cycle, the next round starts with an LPM pick, not the oldest."""
    q, cache = klpm_queue()
    klpm = make_scheduler("klpm", k=3)
    klpm.order(q, cache)
    rest = q[1:]  # the oldest was admitted
    assert ids(klpm.order(rest, cache)) == [5, 3, 1, 4, 2]
    rest = [r for r in rest if r.id not in (5, 3)]  # two LPM picks admitted: the oldest's turn
    assert ids(klpm.order(rest, cache)) == [1, 4, 2]
    assert ids(klpm.order(rest, cache)) == [1, 4, 2]  # nothing admitted: the same round again


def test_klpm_rejects_bad_k():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="k must be"):
            make_scheduler("klpm", k=bad)


@pytest.mark.parametrize("split", [False, True])
def test_incremental_matcher_equals_fresh_match(split):
    """Drive an engine under cache pressure and compare, at every round, the matcher's kept
    results with a from-scratch read-only match of every waiting request."""
    reqs = branching_workload(seed=1)
    engine = SimEngine("fcfs", EngineConfig(kv_capacity_tokens=600, max_running_requests=6))
    engine.submit(reqs)
    matcher, rounds = PrefixMatcher(split=split), 0
    while engine.step() is not None:
        if not engine.waiting:
            continue
        got = matcher.update(engine.waiting, engine.cache)
        assert set(got) == {r.id for r in engine.waiting}
        for r in engine.waiting:
            length, node = got[r.id]
            assert length == engine.cache.prefix_len(r.tokens[:-1])
            assert node.alive and node.depth <= length
            if split:
                assert node.depth == length
        rounds += 1
    assert rounds > 50


def test_lpm_fcfs_above_falls_back_like_sglang():
    """SGLang's lpm orders FCFS when len(queue) > 128; `fcfs_above` does the same at its cut."""
    from auction_gym.scheduler.lpm import SGLANG_FCFS_ABOVE

    assert SGLANG_FCFS_ABOVE == 128
    cache = RadixCache()
    cache.insert([1, 2, 3, 4, 5])
    q = [req(0, [9, 9]), req(1, [1, 2, 3, 4, 5, 6]), req(2, [1, 2, 9])]
    lpm = make_scheduler("lpm", fcfs_above=3)
    assert ids(lpm.order(q, cache)) == [1, 2, 0]  # 3 waiting: not above the cut, LPM
    more = q + [req(3, [1, 2, 3, 4, 7])]
    assert ids(lpm.order(more, cache)) == [0, 1, 2, 3]  # 4 > 3: first come, first served
    assert ids(lpm.order(q, cache)) == [1, 2, 0]  # back under the cut, matched afresh
    assert ids(make_scheduler("lpm").order(more, cache)) == [1, 3, 2, 0]  # default: never falls back
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="fcfs_above"):
            make_scheduler("lpm", fcfs_above=bad)


def test_dfs_weight_breaks_equal_weights_by_the_caches_child_order():
    """SGLang 0.5.23's `_dfs_weight_order` stable-sorts `node.children` by weight: equal weights
    keep the cache's child order ([5] was inserted first), not the earliest request's."""
    from auction_gym import Request
    from auction_gym.radix_cache import RadixCache
    from auction_gym.scheduler import make_scheduler

    cache = RadixCache()
    cache.insert([5, 5])
    cache.insert([1, 2])
    early = Request(id=0, bidder=0, tokens=[1, 2], bid=1.0, arrival=0.0)
    late = Request(id=1, bidder=0, tokens=[5, 5, 7], bid=1.0, arrival=1.0)
    assert [r.id for r in make_scheduler("dfs_weight").order([early, late], cache)] == [1, 0]


def test_dfs_weight_hangs_a_request_where_its_whole_prompt_matches():
    """SGLang matches the whole prompt: [1, 2] hangs on the node [1, 2], below [1], so it comes
    before [1, 3], which hangs on [1] (matching all but the last token, both would hang on [1],
    in arrival order)."""
    from auction_gym import Request
    from auction_gym.radix_cache import RadixCache
    from auction_gym.scheduler import make_scheduler

    cache = RadixCache()
    cache.insert([1, 2])
    whole = Request(id=0, bidder=0, tokens=[1, 2], bid=1.0, arrival=1.0)
    other = Request(id=1, bidder=0, tokens=[1, 3], bid=1.0, arrival=0.0)
    assert [r.id for r in make_scheduler("dfs_weight").order([other, whole], cache)] == [0, 1]


@pytest.mark.parametrize("name", ["klpm", "dfs_weight"])
def test_a_policy_that_matches_by_request_id_refuses_an_id_twice(name):
    """Its matcher keeps each waiting request's match by id: a queue with an id twice is named, not
    ordered by whichever request the matcher kept, and the next round is the one a fresh policy orders."""
    cache = RadixCache()
    cache.insert([1, 2, 3])
    queue = [req(0, [1, 2, 3, 4]), req(1, [5, 6]), req(2, [1, 2, 9], arrival=1.0)]
    policy = make_scheduler(name)
    with pytest.raises(ValueError, match="request 1: duplicate request id"):
        policy.order([*queue, req(1, [1, 2, 3, 7])], cache)
    assert ids(policy.order(queue, cache)) == ids(make_scheduler(name).order(queue, cache))

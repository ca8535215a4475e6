"""WaitingPrefixes: what waits is evicted last, in SGLang's order, and the marks follow the queue."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sglang_cache import SGLangLRU, play
from workloads import branching_workload

from auction_gym import EngineConfig, RadixCache, Request, SimEngine
from auction_gym.engine.queue import WaitingQueue
from auction_gym.waiting_prefixes import WaitingPrefixes

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator


def req(i: int, tokens, arrival: float = 0.0) -> Request:
    return Request(i, 0, tokens, 1.0, arrival=arrival)


def evicted_order(cache: RadixCache, probes: dict[str, list[int]]) -> list[str]:
    """Evict one leaf at a time; name each probe when its cached prefix goes."""
    out = []
    while cache.evictable_size:
        cache.evict(1)
        cache.check()
        out += [k for k, p in probes.items() if k not in out and cache.prefix_len(p) == 0]
    return out


def test_waiting_prefix_survives_an_eviction_that_would_take_it():
    cache = RadixCache()
    cache.insert([1, 2, 3, 4])  # the waiting request's prefix, the least recently used leaf
    cache.insert([5, 6])
    WaitingPrefixes().refresh([req(0, [1, 2, 3, 4, 9])], cache)
    assert cache.evict(1) == 2
    assert cache.prefix_len([1, 2, 3, 4]) == 4 and cache.prefix_len([5, 6]) == 0


def test_eviction_order_is_sglangs_worked_by_hand():
    """Leaves A, B, C cached in that order, then X. Queue (first come first): r0 waits on C, r1 on A.
    SGLang's round matches r0 then r1, so A is the newest, then C; B and X were not touched:
    B, X, C, A. Next round r1 has been admitted (left the queue) and only r0 is matched: A keeps
    its round-1 time, older than C's round-2 time, newer than X: X, A, C."""
    probes = {"A": [1, 1], "B": [2, 2], "C": [3, 3], "X": [4, 4]}

    def fresh() -> RadixCache:
        cache = RadixCache()
        for k in "ABCX":
            cache.insert(probes[k])
        return cache

    r0, r1 = req(0, [3, 3, 7], 0.0), req(1, [1, 1, 7], 1.0)
    cache, waiting = fresh(), WaitingPrefixes()
    waiting.refresh([r0, r1], cache)
    assert evicted_order(cache, probes) == ["B", "X", "C", "A"]

    cache, waiting = fresh(), WaitingPrefixes()
    waiting.refresh([r0, r1], cache)
    waiting.refresh([r0], cache)
    assert evicted_order(cache, probes) == ["B", "X", "A", "C"]


def test_split_by_a_waiting_match_keeps_the_prefix_not_the_tail():
    """As SGLang's match does, the waiting request's match splits [1,2,3,4] at [1,2], so eviction
    can take the unmatched tail [3,4] and keep what the request will reuse."""
    cache = RadixCache()
    cache.insert([1, 2, 3, 4])
    WaitingPrefixes().refresh([req(0, [1, 2, 9])], cache)
    assert cache.evict(1) == 2
    assert cache.prefix_len([1, 2, 9]) == 2 and cache.prefix_len([1, 2, 3]) == 2


def test_a_split_by_the_rounds_refresh_is_stamped_at_its_requests_turn():
    """Insert [0], insert [1,1]; waiting [0] then [1]; one round; evict(1). As in SGLang, the match
    of [1] (second in the round) splits [1,1] and stamps both halves at its turn, after [0]'s: evict(1)
    frees [0] and keeps [1,1] (the lower half does not keep the time before the round, which would
    evict it first)."""
    cache = RadixCache()
    cache.insert([0])
    cache.insert([1, 1])
    WaitingPrefixes().refresh([req(0, [0]), req(1, [1])], cache)
    assert cache.evict(1) == 1
    cache.check()
    assert cache.prefix_len([0]) == 0
    assert cache.prefix_len([1, 1]) == 2


def cached(cache: RadixCache) -> set[tuple[int, ...]]:
    return {tuple(s.tolist()) for s in cache.sequences()}


def test_a_waited_on_node_matched_after_the_round_is_the_newest():
    """Insert [1,0,0,1]; [1,1] arrives; insert [1,1] (which splits [1] off); [1,0] arrives; one
    round (its match of [1,0] splits [0,0,1]); match [1,1]; evict(3). SGLang's match of [1,1] after
    the round stamps [1,1] newest, so it keeps [1,1] and evicts the rest of [1,0,0,1]; with [1,1]
    at its waiting rank (0, older than [1,0]'s 1) it would keep [1,0] instead."""
    cache = RadixCache()
    cache.insert([1, 0, 0, 1])
    cache.insert([1, 1])
    WaitingPrefixes().refresh([req(0, [1, 1], 0.0), req(1, [1, 0], 1.0)], cache)
    cache.match_prefix([1, 1])
    assert cache.evict(3) == 3
    cache.check()
    assert cached(cache) == {(1, 1)}


def test_a_waited_on_node_split_by_a_later_request_takes_that_requests_turn():
    """[0,1,0], [0,0], [0,1] wait (ranks 0, 1, 2); insert [0,1,0], then [0,0,1,0,0,1]; one round;
    evict(5). The match of [0,1] (rank 2) splits [1,0], where [0,1,0] (rank 0) waits: SGLang stamps
    the lower [0] at rank 2's turn, so the round's oldest leaf is [1,0,0,1] below [0,0] (rank 1),
    and evict(5) takes it and then [0,0], keeping [0,1,0]. With the lower [0] at rank 0 it would
    keep [0,0] and [0,1] instead."""
    cache = RadixCache()
    cache.insert([0, 1, 0])
    cache.insert([0, 0, 1, 0, 0, 1])
    WaitingPrefixes().refresh([req(0, [0, 1, 0], 0.0), req(1, [0, 0], 1.0), req(2, [0, 1], 2.0)], cache)
    assert cache.evict(5) == 5
    cache.check()
    assert cached(cache) == {(0, 1, 0)}


def test_a_waited_on_parent_takes_the_round_time_of_its_evicted_child():
    """[3] is locked (a running request) and [2] inserted; [1], [3] and [1,1,1] wait (ranks 0, 1,
    2; the match of [1] splits [1,1,1]). evict(3) takes [2] and the [1,1] below [1]. SGLang's round
    stamped [1] at rank 2's turn too (that match passed through it), so once [3] is unlocked,
    evict(1) takes [3] (rank 1) and keeps [1]; at its own rank 0, [1] would go first."""
    cache = RadixCache()
    cache.insert([1, 1, 1])
    cache.insert([3])
    running = cache.match_prefix([3]).last_node
    cache.lock(running)
    cache.insert([2])
    WaitingPrefixes().refresh([req(0, [1], 0.0), req(1, [3], 1.0), req(2, [1, 1, 1], 2.0)], cache)
    assert cache.evict(3) == 3
    assert cached(cache) == {(1,), (3,)}
    cache.unlock(running)
    assert cache.evict(1) == 1
    cache.check()
    assert cached(cache) == {(1,)}


stream_ops = st.lists(
    st.tuples(st.sampled_from(["insert", "match", "lock", "unlock", "evict", "arrive", "admit", "round"]),
              st.lists(st.integers(0, 2), min_size=1, max_size=7), st.integers(0, 8)),
    max_size=50,
)


@given(stream_ops)
@example([("insert", [1, 0, 0, 1], 0), ("arrive", [1, 1], 0), ("insert", [1, 1], 0), ("arrive", [1, 0], 0),
          ("round", [0], 0), ("match", [1, 1], 0), ("evict", [0], 3)])
@example([("arrive", [0, 1, 0], 0), ("arrive", [0, 0], 0), ("arrive", [0, 1], 0), ("insert", [0, 1, 0], 0),
          ("insert", [0, 0, 1, 0, 0, 1], 0), ("round", [0], 0), ("evict", [0], 5)])
@settings(max_examples=400, deadline=None)
def test_eviction_order_with_waiting_rounds_equals_sglangs(program):
    """Random streams of inserts, matches, locks, evictions and admission rounds: the cache with
    `WaitingPrefixes` refreshing the queue (first come, first served) evicts exactly what SGLang's
    stamping does when each round matches every waiting prompt in the queue's order (`SGLangLRU`)."""
    play(RadixCache(), SGLangLRU(), program)


def test_marks_follow_the_queue_under_an_engine():
    """Driving an engine under cache pressure, which refreshes before every order: each waited-on
    node carries the largest rank of the requests ending there, nothing else is marked, and the
    cache keeps its invariants (`RadixCache.check`)."""
    reqs = branching_workload(seed=2)
    engine = SimEngine("lpm", EngineConfig(kv_capacity_tokens=600, max_running_requests=6))
    waiting, order = engine.waiting_prefixes, engine.scheduler.order_round
    rounds = 0

    def checked_order(round_):
        nonlocal rounds
        queue, cache = round_.queue, round_.cache
        expect: dict = {}
        for r in queue:
            length, node = waiting.length_of[r], waiting.start(r, len(r.tokens))  # where the refresh matched
            assert length == cache.prefix_len(r.tokens) == node.depth
            if node is not cache.root:
                expect[node] = max(expect.get(node, -1), waiting._rank[r.id])
        assert {n: n.wait for n in cache.nodes() if n.wait >= 0} == expect
        cache.check()
        rounds += 1
        return order(round_)

    engine.scheduler.order_round = checked_order
    engine.run(reqs)
    assert rounds > 50 and engine.metrics().finished == 150


def test_lengths_are_the_caches_for_the_refreshed_queue_only():
    cache, prefixes = RadixCache(), WaitingPrefixes()
    cache.insert([1, 2, 3, 4])
    queue = [req(0, [1, 2, 3, 4, 9]), req(1, [1, 2, 7]), req(2, [8])]
    assert prefixes.lengths(queue, cache) is None  # nothing refreshed yet
    prefixes.refresh(queue, cache)
    assert prefixes.lengths(queue, cache) == [cache.prefix_len(r.tokens) for r in queue] == [4, 2, 0]
    assert prefixes.lengths(queue[:2], cache) is None  # another queue
    assert prefixes.lengths([queue[0], queue[1], req(2, [8])], cache) is None  # another object, same id
    assert prefixes.lengths(queue, RadixCache()) is None  # another cache
    cache.insert([8, 8])
    assert prefixes.lengths(queue, cache) is None  # the tree changed since the refresh


def test_start_is_where_the_refresh_matched_no_deeper_than_asked():
    cache, prefixes = RadixCache(), WaitingPrefixes()
    cache.insert([1, 2])
    cache.insert([1, 2, 3, 4])
    queue = [req(0, [1, 2, 3, 4]), req(1, [1, 2, 7]), req(2, [8])]
    prefixes.refresh(queue, cache)
    assert prefixes.start(queue[0], 4).depth == 4  # the whole prompt matched
    assert prefixes.start(queue[0], 3).depth == 2  # all but its last token: the node above
    assert prefixes.start(queue[1], 2).depth == 2
    assert prefixes.start(queue[2], 0) is cache.root  # nothing matched
    assert prefixes.start(req(0, [1, 2, 3, 4]), 4) is None  # another object under a refreshed id
    assert prefixes.start(req(3, [1, 2]), 2) is None  # not refreshed
    for r in queue:
        length = len(r.tokens) - 1
        assert cache.match_prefix(r.tokens[:length], start=prefixes.start(r, length)).length == \
            cache.prefix_len(r.tokens[:length])


def test_an_engines_auction_is_given_the_refreshed_lengths_and_changes_with_the_round():
    """Under the engine the auction's round carries every waiting request's cached prefix length
    (the refresh's, which are the cache's) and how the queue changed since the round before; its
    rounds are those of an auction given no changes, which compares queues instead."""
    from auction_gym.mechanism import RadixTreeAuction

    runs = []
    for follow in (True, False):
        auction = RadixTreeAuction()
        decide = auction.decide_round
        seen = []

        def spy(round_):
            assert round_.prefix_lens == [round_.cache.prefix_len(r.tokens) for r in round_.queue]
            seen.append(round_.changes is not None)
            if not follow:
                round_.changes = None
            return decide(round_)

        auction.decide_round = spy
        engine = SimEngine(auction, EngineConfig(kv_capacity_tokens=3_000, max_running_requests=4))
        engine.submit(branching_workload(3, n=120))
        its = []
        while (it := engine.step()) is not None:
            its.append((it.kind, it.end, tuple(it.admitted)))
        runs.append(its)
        assert len(seen) > 50 and all(seen[1:])
    assert runs[0] == runs[1]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 11), max_size=12), st.lists(st.integers(0, 3), min_size=1, max_size=6)),
                min_size=1, max_size=25),
       st.booleans())
def test_delta_since_is_the_difference_between_the_two_refreshed_queues(rounds, with_changes):
    """Each round a new queue (a subset of twelve requests: some stay, some leave and come back)
    is refreshed in a cache that grows. From every earlier refresh still kept, `delta_since`
    gives the requests that joined and left since, and among those waiting at both, every one
    whose cached length changed is reported as matched again. With `with_changes` the queue's
    changes are handed to `refresh` (`WaitingQueue.take_changes`), as the engine does."""
    pool = [req(i, [i % 4, (i * 7) % 5, i % 3, i]) for i in range(12)]
    cache, prefixes, queue = RadixCache(), WaitingPrefixes(), WaitingQueue()
    history: list[tuple[set[Request], dict[Request, int]]] = []  # per refresh: queue, lengths
    for members, inserted in rounds:
        cache.insert(inserted)
        now = [pool[i] for i in sorted(set(members))]
        queue.remove([r for r in queue.requests if r not in now])
        queue.arrive([r for r in now if r not in queue.requests], [1] * len([r for r in now if r not in queue.requests]))
        changes = queue.take_changes()
        prefixes.refresh(queue.requests, cache, changes if with_changes else None)
        lengths = prefixes.lengths(queue.requests, cache)
        assert lengths == [cache.prefix_len(r.tokens) for r in queue.requests]
        history.append((set(queue.requests), dict(zip(queue.requests, lengths))))
        for back, (then, then_lengths) in enumerate(reversed(history)):
            delta = prefixes.delta_since(prefixes.serial - back)
            assert delta is not None
            now_set, now_lengths = history[-1]
            assert set(delta.joined) == now_set - then and len(delta.joined) == len(set(delta.joined))
            assert set(delta.left) == then - now_set and len(delta.left) == len(set(delta.left))
            assert set(delta.rematched) <= now_set & then
            assert {r for r in now_set & then if now_lengths[r] != then_lengths[r]} <= set(delta.rematched)
            assert all(delta.length_of[r] == n for r, n in now_lengths.items())
    assert prefixes.delta_since(prefixes.serial - len(history) - 1) is None  # before the first refresh


def test_delta_since_forgets_what_a_new_cache_or_an_old_refresh_makes_unknown():
    cache, prefixes = RadixCache(), WaitingPrefixes()
    queue = [req(0, [1, 2]), req(1, [3])]
    prefixes.refresh(queue, cache)
    first = prefixes.serial
    prefixes.refresh(queue[:1], RadixCache())  # another cache: matched afresh
    assert prefixes.delta_since(first) is None
    assert prefixes.delta_since(prefixes.serial).joined == []  # nothing since the last refresh
    for _ in range(70):
        prefixes.refresh(queue[:1], cache)
    assert prefixes.delta_since(prefixes.serial - 64) is not None and prefixes.delta_since(prefixes.serial - 65) is None

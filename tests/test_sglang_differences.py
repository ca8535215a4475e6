"""Where the engine's rules differ from SGLang 0.5.23's, each pinned on its minimal case.

Every test asserts what this engine does; its docstring says what SGLang 0.5.23 does instead (read
in `python/sglang/srt/managers/schedule_policy.py` and `mem_cache/radix_cache.py`). The README's
list of differences (section "The simulated engine") names each test. A test here that starts to
fail means a rule moved: toward SGLang (then move the README's bullet into the list of rules
followed) or somewhere else.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from auction_gym import EngineConfig, RadixCache, Request, SimEngine
from auction_gym.engine.in_batch import BatchPrefixes
from auction_gym.scheduler import WaitingPrefixes


def req(i: int, tokens, out: int = 5, cap: int | None = None, arrival: float = 0.0) -> Request:
    return Request(i, 0, np.asarray(tokens), 1.0, output_len=out, arrival=arrival, max_new_tokens=cap)


# 1. A split made while refreshing waiting requests' prefixes.


def test_split_by_the_rounds_refresh_is_stamped_before_the_round():
    """Insert [0], insert [1,1]; waiting [0] then [1]; one round; evict(1).

    SGLang matches [0] then [1] in queue order; the match of [1] stamps the edge [1,1] and splits
    it, and both halves carry that match's time, later than [0]'s: evict(1) frees [0] and keeps
    [1,1]. Here the split made by the refresh (`RadixCache.peek(split=True)`) gives both halves the
    last time before the round, so the unmatched lower [1] is older than every waited-on node:
    evict(1) frees it and keeps [0] and [1]."""
    cache = RadixCache()
    cache.insert([0])
    cache.insert([1, 1])
    WaitingPrefixes().refresh([req(0, [0]), req(1, [1])], cache)
    assert cache.evict(1) == 1
    assert cache.prefix_len([0]) == 1  # SGLang: 0
    assert cache.prefix_len([1, 1]) == 1  # SGLang: 2


# 2. A resumed (retracted) request's reservation.


class Promises(SimEngine):
    """Records, for each prefill batch, (request id, output tokens so far, tokens promised)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.batches: list[list[tuple[int, int, int]]] = []

    def _execute_prefill(self, batch):
        self.batches.append([(a.request.id, a.generated, self._promised) for a in batch])
        return super()._execute_prefill(batch)


def test_a_resumed_request_reserves_its_remaining_cap():
    """Two requests of cap 60 in a pool of 100 (ratio fixed at 0.1, so both go in and then outgrow
    memory): the second is retracted after 41 tokens and resumed later, alone in its batch.

    SGLang admits a resumed request if memory holds max(cap - generated, 0) (clipped), but then
    reserves min(cap, clip) for it (`_select_prefill_admission`'s `max_new_tokens`): 60 here, which
    later admissions of the same round must leave free. Here both the check and the reservation
    are cap - generated: 19."""
    cfg = EngineConfig(kv_capacity_tokens=100, chunked_prefill_size=None,
                       init_new_token_ratio=0.1, min_new_token_ratio=0.1)
    engine = Promises("fcfs", cfg)
    metrics = engine.run([req(0, np.arange(10), out=60, cap=60), req(1, np.arange(100, 110), out=60, cap=60)])
    assert metrics.retractions == 1 and engine.records[1].retractions == 1
    assert engine.batches[:2] == [[(0, 0, 60)], [(1, 0, 60)]]
    assert engine.batches[2] == [(1, 41, 60 - 41)]  # SGLang: (1, 41, 60)


# 3. What in-batch prefix sharing compares against.


def test_in_batch_sharing_compares_all_but_the_last_prompt_token():
    """A = 31 tokens P + [x], B = P + [x, y], nothing cached, arriving together.

    SGLang inserts each checked request's whole prompt into its in-batch tree, so B shares 32
    tokens (P + x) with A and is deprioritized. Here the batch holds what the engine matches,
    tokens[:-1]: A contributes P (31 tokens), B shares 31 < 32 and goes into the same batch."""
    p = list(range(100, 131))
    a, b = req(0, p + [7]), req(1, p + [7, 8])
    sharing = BatchPrefixes(32, 32, 1)
    sharing.add(a.tokens[:-1])
    assert not sharing.holds(b.tokens[:-1], 0)
    engine = SimEngine("lpm", EngineConfig())
    engine.submit([a, b])
    assert engine.step().admitted == [0, 1]


class Reverse:
    """Admits the queue last come, first served (a policy whose order is not the queue's)."""

    name = "reverse"

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        return list(reversed(queue))


def test_in_batch_sharing_compares_with_the_batch_not_the_queue():
    """A then B (first come, first served) share 40 uncached tokens; the policy takes B first.

    SGLang checks each request against the earlier requests of the pre-sort queue (those with at
    most 32 cached tokens, not themselves deprioritized), whether admitted or not: A, first in the
    queue, is never deprioritized, and B is. Here a candidate is compared with the requests already
    taken into the batch, in the policy's order: B is taken, A waits for the next batch."""
    shared = list(range(500, 540))
    a, b = req(0, shared + [1, 2]), req(1, shared + [3, 4])
    engine = SimEngine(Reverse(), EngineConfig())
    engine.submit([a, b])
    assert engine.step().admitted == [1]  # SGLang (deprioritizing B): A ahead of B
    assert engine.step().admitted == [0]


def test_in_batch_sharing_holds_under_fcfs_and_dfs_weight_too():
    """Two requests arriving together that share 40 uncached tokens.

    SGLang computes the in-batch rule only for cache-aware policies, and its dfs-weight sort ignores
    the result: under `fcfs` and `dfs-weight` both go into one batch. Here the rule holds under
    every policy: the second waits for the next batch."""
    shared = list(range(500, 540))
    for name in ("fcfs", "dfs_weight"):
        engine = SimEngine(name, EngineConfig())
        engine.submit([req(0, shared + [1, 2]), req(1, shared + [3, 4])])
        assert engine.step().admitted == [0], name
        assert engine.step().admitted == [1], name

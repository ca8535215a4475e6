"""Where the engine's rules differ from SGLang 0.5.23's, each pinned on its minimal case.

Every test asserts what this engine does; its docstring says what SGLang 0.5.23 does instead (read
in `python/sglang/srt/managers/schedule_policy.py` and `mem_cache/radix_cache.py`). The README's
list of differences (section "The simulated engine") names each test. A test here that starts to
fail means a rule moved: toward SGLang (then move the README's bullet into the list of rules
followed) or somewhere else.
"""

from __future__ import annotations

import numpy as np

from auction_gym import EngineConfig, RadixCache, Request, SimEngine
from auction_gym.scheduler import make_scheduler


def req(i: int, tokens, out: int = 5, cap: int | None = None, arrival: float = 0.0) -> Request:
    return Request(i, 0, np.asarray(tokens), 1.0, output_len=out, arrival=arrival, max_new_tokens=cap)


# 3. LPM's tie order, match depth and FCFS cut.


def test_lpm_breaks_ties_by_arrival_not_the_last_rounds_order():
    """A (arrival 0) and B (arrival 1) wait; B's prefix is cached, so LPM puts B first. Then the
    cache is emptied: both match nothing.

    SGLang sorts its waiting list in place with a stable sort, so a tie keeps the previous round's
    order: B, A. Here ties go by (arrival, id): A, B."""
    cache = RadixCache()
    cache.insert([5, 5, 5])
    a, b = req(0, [1, 1, 1, 1]), req(1, [5, 5, 5, 1], arrival=1.0)
    lpm = make_scheduler("lpm")
    assert [r.id for r in lpm.order([a, b], cache)] == [1, 0]
    cache.evict(3)
    assert cache.total_size == 0
    assert [r.id for r in lpm.order([a, b], cache)] == [0, 1]  # SGLang: [1, 0]


def test_lpm_above_its_fcfs_cut_orders_by_arrival():
    """LPM with the FCFS cut at 2 (SGLang's is 128): A, B wait, B's prefix cached, so B goes
    first; then C arrives and 3 > 2 wait.

    SGLang then takes its `fcfs` branch, which does nothing: the queue stays as the last sort left
    it, new arrivals at the end (B, A, C). Here the queue is sorted first come, first served: A, B, C."""
    cache = RadixCache()
    cache.insert([5, 5, 5])
    a, b, c = req(0, [1, 1, 1, 1]), req(1, [5, 5, 5, 1], arrival=1.0), req(2, [2, 2, 2, 2], arrival=2.0)
    lpm = make_scheduler("lpm", fcfs_above=2)
    assert [r.id for r in lpm.order([a, b], cache)] == [1, 0]
    assert [r.id for r in lpm.order([a, b, c], cache)] == [0, 1, 2]  # SGLang: [1, 0, 2]


def test_lpm_counts_all_but_the_last_prompt_token():
    """[1,2] cached; A = [1,2] (all of it cached) arrives before B = [1,2,3].

    SGLang's policy matches each whole prompt: both match 2 tokens and tie, so A (first in the
    queue) goes first. Here LPM counts what the engine can reuse, all but the last token: A 1, B 2,
    so B goes first."""
    cache = RadixCache()
    cache.insert([1, 2])
    a, b = req(0, [1, 2]), req(1, [1, 2, 3], arrival=1.0)
    assert [r.id for r in make_scheduler("lpm").order([a, b], cache)] == [1, 0]  # SGLang: [0, 1]


# 4. A chunked request's output reservation.


def test_a_chunked_request_reserves_its_output_from_the_first_chunk():
    """A 20,000-token prompt with cap 100, chunks of 8,192.

    SGLang's admission check counts the output, but a chunk reserves no output
    (`max_new_tokens = 0` while `is_chunked`) and no rest of prompt; the last chunk reserves
    min(cap, 4096). Here, from the first chunk on, the rest of the prompt and the output
    reservation stay promised until the request runs."""
    engine = SimEngine("fcfs", EngineConfig(chunked_prefill_size=8192))
    engine.submit([req(0, np.arange(20_000), out=5, cap=100)])
    assert engine.step().admitted == [0]
    assert engine._promised == (20_000 - 8192) + 100  # SGLang: 0 held beyond the chunk
    engine.step()
    assert engine._promised == (20_000 - 2 * 8192) + 100


# 5. An off-by-one in the memory check. (dfs-weight's tie-breaks and match depth, a resumed
# request's reservation and the prefill cap at >= now follow SGLang: tests/test_scheduler.py,
# tests/test_engine_sglang.py.)


def test_memory_check_admits_what_fits_exactly():
    """A pool of 100 tokens; A needs 20 + 20 (prompt + cap), B 30 + 30: together exactly 100.

    SGLang admits a request only if extend + reservation + page_size < what remains (strictly),
    and charges each admitted one a page more: A passes (41 < 100) and leaves 59, B fails (61 < 59
    is false) and waits. Here a request is taken when its need is <= the room: both go in."""
    cfg = EngineConfig(kv_capacity_tokens=100, chunked_prefill_size=None)
    engine = SimEngine("fcfs", cfg)
    engine.submit([req(0, np.arange(20), out=20, cap=20), req(1, np.arange(100, 130), out=30, cap=30)])
    assert engine.step().admitted == [0, 1]  # SGLang: [0]


"""Where the engine's rules differ from SGLang 0.5.23's, each pinned on its minimal case.

Every test asserts what this engine does; its docstring says what SGLang 0.5.23 does instead (read
in `python/sglang/srt/managers/schedule_policy.py` and `mem_cache/radix_cache.py`). The README's
list of differences (section "The simulated engine") names each test. A test here that starts to
fail means a rule moved: toward SGLang (then move the README's bullet into the list of rules
followed) or somewhere else.
"""

from __future__ import annotations

import numpy as np

from auction_gym import EngineConfig, Request, SimEngine


def req(i: int, tokens, out: int = 5, cap: int | None = None, arrival: float = 0.0) -> Request:
    return Request(i, 0, np.asarray(tokens), 1.0, output_len=out, arrival=arrival, max_new_tokens=cap)


# 1. A chunked request's output reservation.


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


# 2. An off-by-one in the memory check. (What now follows SGLang is pinned where the rule lives:
# dfs-weight and LPM in tests/test_scheduler.py; a resumed request's reservation, the prefill cap at
# >= and a retracted request's place in tests/test_engine_sglang.py; in-batch sharing in
# tests/test_in_batch.py; a split by the round's refresh in tests/test_waiting.py.)


def test_memory_check_admits_what_fits_exactly():
    """A pool of 100 tokens; A needs 20 + 20 (prompt + cap), B 30 + 30: together exactly 100.

    SGLang admits a request only if extend + reservation + page_size < what remains (strictly),
    and charges each admitted one a page more: A passes (41 < 100) and leaves 59, B fails (61 < 59
    is false) and waits. Here a request is taken when its need is <= the room: both go in."""
    cfg = EngineConfig(kv_capacity_tokens=100, chunked_prefill_size=None)
    engine = SimEngine("fcfs", cfg)
    engine.submit([req(0, np.arange(20), out=20, cap=20), req(1, np.arange(100, 130), out=30, cap=30)])
    assert engine.step().admitted == [0, 1]  # SGLang: [0]


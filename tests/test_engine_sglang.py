"""SGLang's admission rules in the engine: chunked prefill, output reservation by max_new_tokens with
the adaptive new-token ratio, retraction; and the simulator's multi-step decode equals stepping."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import EngineConfig, Request, SimEngine
from auction_gym.engine.reservation import AdmissionRules
from auction_gym.engine.sim_engine import PythonSimEngine

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator

SGLANG = EngineConfig()


def req(i: int, prompt: int, out: int, cap: int | None = None, arrival: float = 0.0, base: int = 0) -> Request:
    return Request(i, 0, np.arange(base, base + prompt), 1.0, output_len=out, arrival=arrival, max_new_tokens=cap)


def test_a_long_prompt_is_prefilled_in_chunks_that_enter_the_cache():
    engine = SimEngine("fcfs", EngineConfig(chunked_prefill_size=8192))
    engine.submit([req(0, 20_000, 5), req(1, 3000, 5, base=10**6)])
    kinds, sizes = [], []
    for _ in range(3):
        it = engine.step()
        kinds.append((it.kind, it.admitted))
        sizes.append(engine.cache.total_size)
    # 8192 + 8192 + the last 3616, of which request 1 fills the third batch's room (4576 > 3000).
    assert kinds == [("prefill", [0]), ("prefill", []), ("prefill", [1])]
    assert sizes == [8192, 16_384, 23_000]
    rec = engine.records[0]
    assert rec.admit == 0.0 and rec.first_token == engine.now and rec.computed_tokens == 20_000
    whole = SimEngine("fcfs", EngineConfig(chunked_prefill_size=None))
    whole.submit([req(0, 20_000, 5)])
    assert whole.step().admitted == [0] and whole.cache.total_size == 20_000


def test_chunks_attend_to_the_earlier_chunks():
    """Chunking moves no work but the attention to earlier chunks: the three chunks together take
    longer than one prefill of the same prompt by the extra per-iteration base costs only."""
    cm = SGLANG.cost_model
    chunked = SimEngine("fcfs", EngineConfig(chunked_prefill_size=8192))
    chunked.run([req(0, 20_000, 1)])
    whole = SimEngine("fcfs", EngineConfig(chunked_prefill_size=None))
    whole.run([req(0, 20_000, 1)])
    assert chunked.now == pytest.approx(whole.now + 2 * cm.prefill_base, rel=1e-9)


def test_sglang_reservation_admits_by_the_cap_and_the_ratio_where_oracle_waits():
    """A (900 tokens reserved at admission) leaves 100: under "oracle" B (110) waits for A to
    finish; under "sglang" the next round counts only ratio x A's remaining cap, and B goes in."""
    cfg = dict(kv_capacity_tokens=1000, chunked_prefill_size=None)
    a, b = req(0, 100, 800, cap=800), req(1, 100, 10, cap=10, base=5000, arrival=0.001)
    runs = {}
    for mode in ("oracle", "sglang"):
        engine = SimEngine("fcfs", EngineConfig(reservation=mode, **cfg))
        engine.run([a, b])
        runs[mode] = engine.records[1].admit
        assert engine.metrics().retractions == 0
    assert runs["oracle"] > SimEngine("fcfs").cost.decode_time(1, 0) * 700  # after A's decode
    assert runs["sglang"] < 0.1


def test_new_token_ratio_decays_per_decode_step_and_resets_when_idle():
    engine = SimEngine("fcfs", EngineConfig(chunked_prefill_size=None))
    engine.submit([req(0, 10, 101)])
    engine.step()  # prefill
    it = engine.step()  # decode to the end
    decay = (SGLANG.init_new_token_ratio - SGLANG.min_new_token_ratio) / SGLANG.new_token_ratio_decay_steps
    assert it.steps == 100 and engine.new_token_ratio == pytest.approx(SGLANG.init_new_token_ratio - 100 * decay)
    engine.submit([req(1, 10, 1, arrival=engine.now + 1)])
    assert engine.step().kind == "idle" and engine.new_token_ratio == SGLANG.init_new_token_ratio


class Watched(SimEngine):
    """Records each retraction with the ratio it set and what it was set from."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.retractions: list[tuple[list[int], float, float]] = []

    def _make_room(self) -> list[int]:
        gone = super()._make_room()
        if gone:
            g = sum(run.generated(self._steps) for run in self.running)
            caps = sum(run.cap for run in self.running)
            expected = min(1.0, (g + self.config.retract_decode_steps * len(self.running)) / (caps + 1))
            self.retractions.append((gone, self.new_token_ratio, expected))
        return gone


def test_retraction_takes_the_fewest_output_tokens_first_and_everything_finishes():
    """Caps equal to the outputs, so the ratio under-reserves and memory runs out mid-decode: the
    request with the fewest output tokens is retracted, keeps its first token time, resumes by
    recomputing prompt + output so far, and finishes; the ratio is re-estimated from the rest."""
    cfg = EngineConfig(kv_capacity_tokens=1700, chunked_prefill_size=None)
    engine = Watched("fcfs", cfg)
    engine.submit([req(0, 200, 700, base=0), req(1, 200, 700, base=10**5, arrival=0.05)])
    first_tokens, resumed = {}, []
    while (it := engine.step()) is not None:
        for rid in it.admitted:
            first_tokens[rid] = engine.records[rid].first_token
        resumed += it.resumed
        assert engine.used_tokens <= cfg.kv_capacity_tokens
    assert [r[0] for r in engine.retractions] == [[1]] and resumed == [1]
    _, ratio, expected = engine.retractions[0]
    assert ratio == pytest.approx(expected)
    recs = engine.records
    assert recs[1].retractions == 1 and recs[0].retractions == 0 and engine.metrics().retractions == 1
    assert all(recs[i].finished and recs[i].first_token == first_tokens[i] for i in (0, 1))
    assert recs[1].computed_tokens > 200  # its output so far was recomputed
    assert engine.reserved == 0 and engine.cache.protected_size == 0


def test_oracle_reservation_never_retracts_the_same_workload():
    engine = SimEngine("fcfs", EngineConfig(kv_capacity_tokens=1700, chunked_prefill_size=None, reservation="oracle"))
    engine.run([req(0, 200, 700), req(1, 200, 700, base=10**5, arrival=0.05)])
    assert engine.metrics().retractions == 0 and engine.metrics().finished == 2


class OneStep(SimEngine):
    """Decodes one step per iteration, as a real engine does."""

    def _decode_limit(self) -> int:
        return 1


def _workload(seed: int, n: int = 60) -> list[Request]:
    rng = np.random.default_rng(seed)
    heads = [rng.integers(0, 1000, int(rng.integers(50, 400))) for _ in range(4)]
    reqs = []
    for i in range(n):
        out = int(rng.integers(1, 300))
        tokens = np.concatenate([heads[i % 4], rng.integers(0, 1000, int(rng.integers(5, 300)))])
        cap = out + int(rng.integers(0, 2)) * int(rng.integers(0, 500))
        reqs.append(Request(i, i % 3, tokens, float(rng.uniform(0.1, 2)), output_len=out,
                            arrival=float(rng.uniform(0, 3)), max_new_tokens=cap))
    return reqs


@pytest.mark.parametrize("seed,scheduler", [(0, "fcfs"), (1, "lpm"), (5, "radix_vcg"), (14, "fcfs"), (16, "radix_vcg")])
def test_multi_step_decode_equals_one_step_at_a_time(seed, scheduler):
    """Decode up to the next event at once (finish, arrival, memory, the blocked admission fitting
    as the ratio decays) must give the records of stepping one token at a time, retractions and
    chunks included."""
    cfg = EngineConfig(kv_capacity_tokens=3000 + 200 * (seed % 5), chunked_prefill_size=256 if seed % 2 else None,
                       max_running_requests=16)
    fast, slow = SimEngine(scheduler, cfg), OneStep(scheduler, cfg)
    fast.run(_workload(seed))
    slow.run(_workload(seed))

    def records(engine):
        return [(r.admit, r.first_token, r.finish, r.cached_tokens, r.computed_tokens, r.retractions)
                for _, r in sorted(engine.records.items())]

    a, b = records(fast), records(slow)
    assert [x[3:] for x in a] == [x[3:] for x in b]
    np.testing.assert_allclose([x[:3] for x in a], [x[:3] for x in b], rtol=1e-9)
    assert fast.metrics().finished == len(a)


@pytest.mark.parametrize("bad,match", [
    ({"reservation": "guess"}, "reservation"),
    ({"chunked_prefill_size": 0}, "chunked_prefill_size"),
    ({"page_size": 16, "chunked_prefill_size": 8}, "chunked_prefill_size"),
    ({"min_new_token_ratio": 0.8}, "min_new_token_ratio"),
    ({"clip_max_new_tokens": 0}, "clip_max_new_tokens"),
])
def test_bad_admission_rules_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        EngineConfig(**bad)


def test_a_resumed_request_charges_its_round_the_whole_clipped_cap():
    """SGLang's `add_one_req` checks a resumed request with its remaining cap but charges the
    round min(max_new_tokens, clip): 100 here, not 100 - 30 generated."""
    eng = PythonSimEngine("fcfs", EngineConfig(kv_capacity_tokens=10_000))
    r = Request(id=0, bidder=0, tokens=list(range(10)), bid=1.0, output_len=50, max_new_tokens=100)
    resumed = np.concatenate([r.tokens, np.arange(10**6, 10**6 + 30)])
    eng.queue.put_back(r, resumed, 1 + 70)
    batch, decision, _ = eng._schedule_prefill(None, None)
    assert [adm.request.id for adm in batch] == [0] and decision is None  # FCFS decides no priced round
    assert eng._promised == 100


def test_without_chunking_a_later_request_that_reaches_the_prefill_cap_waits():
    """SGLang's `_select_prefill_admission`: without chunking a later request is refused when its
    paged extend is >= the input budget left (10 >= 20 - 10), not only when it exceeds it."""
    eng = PythonSimEngine("fcfs", EngineConfig(max_prefill_tokens=20, chunked_prefill_size=None))
    reqs = [Request(id=i, bidder=0, tokens=list(range(100 * i, 100 * i + 10)), bid=1.0, output_len=1,
                    max_new_tokens=1) for i in range(2)]
    eng.queue.arrive(reqs, [2, 2])
    batch, _, _ = eng._schedule_prefill(None, None)
    assert [adm.request.id for adm in batch] == [0]


def test_a_retracted_request_waits_behind_a_later_arrival_under_fcfs():
    """A and B (arrival 0) run in a pool of 90 tokens; C (10 tokens) arrives at 0.01 and does not
    fit. When decode runs out of memory B is retracted; as in SGLang (`_add_request_to_queue`
    appends it) it waits at the queue's end, so FCFS admits C before resuming B (not in B's arrival place, ahead
    of C)."""
    engine = PythonSimEngine("fcfs", EngineConfig(kv_capacity_tokens=90, chunked_prefill_size=None))
    engine.submit([req(0, 10, 40, 40), req(1, 10, 40, 40, base=1000), req(2, 10, 5, 5, arrival=0.01, base=2000)])
    events = []
    while (it := engine.step()) is not None:
        if it.retracted:
            events.append(("retracted", it.retracted, [r.id for r in engine.queue.requests]))
        elif it.kind == "prefill":
            events.append(("prefill", it.admitted, it.resumed))
    assert events == [("prefill", [0], []), ("prefill", [1], []), ("retracted", [1], [2, 1]),
                      ("prefill", [2], []), ("prefill", [], [1])]


def test_a_chunked_request_reserves_its_output_with_its_last_chunk():
    """SGLang's `_select_prefill_admission` budgets a chunk no output (`max_new_tokens = 0` while
    `is_chunked`; its first chunk's check counts the output) and `add_chunked_req` min(cap, 4096)
    with the last chunk. A 20,000-token prompt with cap 1,000 in chunks of 8,192 (pages of 16, a
    budget of 8,200), and B (5 tokens, cap 10): between chunks only the rest of the prompt is
    promised, so B fits the second round's 8 spare tokens (room 1,030 - 16 charged for the chunk;
    had A's output been promised from the first chunk, 14 would be left and B would wait)."""
    engine = PythonSimEngine("fcfs", EngineConfig(kv_capacity_tokens=21_030, page_size=16, chunked_prefill_size=8200))
    engine.submit([req(0, 20_000, 5, cap=1000), req(1, 5, 1, cap=10, base=10**6)])
    assert engine.step().admitted == [0]
    assert engine._promised == 20_000 - 8192
    assert engine.step().admitted == [1]
    assert engine._promised == 20_000 - 2 * 8192
    assert engine.run().finished == 2


@pytest.mark.parametrize("prompt_b,admitted", [(29, [0]), (28, [0, 1])])
def test_memory_check_wants_a_page_more_strictly_and_charges_a_page_per_admission(prompt_b, admitted):
    """SGLang's `add_one_req` takes a request only if extend + reservation + page_size is strictly
    below what remains, and `PrefillBudget.reserve` charges each admitted one a page more. A pool
    of 100 (pages of 1); A needs 20 + 20 and leaves 100 - 40 - 1 = 59; B (cap 29) needs
    prompt + 29 + 1 < 59: a 29-token prompt (exactly 59) waits, a 28-token one goes in."""
    engine = SimEngine("fcfs", EngineConfig(kv_capacity_tokens=100, chunked_prefill_size=None))
    engine.submit([req(0, 20, 20, cap=20), req(1, prompt_b, 29, cap=29, base=1000)])
    assert engine.step().admitted == admitted
    assert engine.run().finished == 2


@pytest.mark.parametrize("page", [1, 16])
def test_output_room_clips_the_cap_so_a_lone_request_passes_the_check(page):
    """SGLang clips max_new_tokens to the pool less the paged prompt, a page and a token
    (`init_req_max_new_tokens`), so a lone request passes the strict check; a request whose true
    output exceeds that is rejected at arrival (SGLang would cut its reply short)."""
    cfg = EngineConfig(kv_capacity_tokens=100, chunked_prefill_size=None, page_size=page)
    room = 100 - (16 if page == 16 else 10) - page - 1
    assert cfg.output_room(10) == room
    engine = SimEngine("fcfs", cfg)
    engine.submit([req(0, 10, room, cap=10**6), req(1, 10, room + 1, base=1000)])
    assert engine.step().admitted == [0]
    assert engine.records[1].rejected == cfg.rejection(10, room + 1)
    assert f"less {100 - 10 - room}" in engine.records[1].rejected
    assert engine.run().finished == 1 and cfg.rejection(10, room) is None


@pytest.mark.parametrize("page", [1, 4])
def test_admission_rules_on_their_boundaries(page):
    """`AdmissionRules`, the arithmetic the engine checks admissions with: the memory check is
    strict by a page; a round is charged the last page rounded up and a page more; a chunk ends
    on a page boundary; a resumed request is checked with its remaining cap but charged its whole
    cap (SGLang's `add_one_req`), and "oracle" budgets the true output instead."""
    cfg = EngineConfig(kv_capacity_tokens=4096, page_size=page, clip_max_new_tokens=100)
    rules = AdmissionRules(cfg)
    assert rules.fits(10, 11 + page) and not rules.fits(10, 10 + page)
    assert rules.round_charge(9) == cfg.paged(9) - 9 + page
    assert rules.round_charge(8) == page  # already whole pages
    assert rules.chunk_end(1000, 3, 256) == 259 - 259 % page
    assert rules.chunk_end(200, 3, 256) == 200  # the rest fits: no chunk
    r = req(0, 50, 30, cap=300)
    cap = rules.cap(r)
    assert (cap, rules.output_need(r, 250, cap), rules.round_output(r, 250, cap)) == (300, 50, 100)
    assert rules.chunked_output(r, 0, cap) == 100 and rules.smallest_need(r, 250, cap) == 51
    oracle = AdmissionRules(EngineConfig(kv_capacity_tokens=4096, page_size=page, reservation="oracle"))
    cap = oracle.cap(r)
    assert (oracle.output_need(r, 10, cap), oracle.round_output(r, 10, cap), oracle.chunked_output(r, 10, cap)) == (20, 20, 0)

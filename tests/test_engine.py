"""The simulated engine: conservation, memory bound, timing, cache-aware policies, bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from auction_gym import CostModel, EngineConfig, Request, SimEngine, make_scheduler, scheduler_names

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator


def grouped_workload(seed: int = 0, groups: int = 6, per_group: int = 20, prefix: int = 600,
                     spread: float = 0.0) -> list[Request]:
    """Groups of requests sharing a long prefix, interleaved in arrival order: FCFS alternates
    between groups, a cache-aware policy can keep each group together."""
    rng = np.random.default_rng(seed)
    heads = [rng.integers(0, 32000, prefix) for _ in range(groups)]
    reqs = []
    for i in range(groups * per_group):
        tail = rng.integers(0, 32000, int(rng.integers(20, 200)))
        reqs.append(Request(
            i, i % 3, np.concatenate([heads[i % groups], tail]), float(rng.uniform(0.1, 2.0)),
            output_len=int(rng.integers(1, 60)), arrival=float(i) * spread,
        ))
    return reqs


def step_checked(engine: SimEngine) -> list:
    """Run to the end, checking the memory bound and the clock after every iteration."""
    its = []
    while (it := engine.step()) is not None:
        assert it.end >= it.start
        assert engine.used_tokens <= engine.config.kv_capacity_tokens
        assert len(engine.running) <= engine.config.max_running_requests
        its.append(it)
    return its


@pytest.mark.parametrize("name", scheduler_names())
def test_conservation_under_every_scheduler(name):
    reqs = grouped_workload(spread=0.01)
    big = Request(999, 0, np.arange(5000), 1.0, output_len=10, arrival=0.5)
    eng = SimEngine(name, EngineConfig(kv_capacity_tokens=4000, max_prefill_tokens=2048))
    eng.submit(reqs + [big])
    its = step_checked(eng)
    recs = eng.records
    assert recs[999].rejected and "kv_capacity_tokens" in recs[999].rejected
    assert any(999 in it.rejected for it in its)
    for r in reqs:
        rec = recs[r.id]
        assert rec.finished and rec.rejected is None
        assert rec.cached_tokens + rec.computed_tokens == r.prompt_len
        assert rec.computed_tokens >= 1
        assert r.arrival <= rec.admit < rec.first_token <= rec.finish
    admitted = [i for it in its for i in it.admitted]
    finished = [i for it in its for i in it.finished]
    assert sorted(admitted) == sorted(finished) == sorted(r.id for r in reqs)
    assert eng.cache.protected_size == 0 and eng.reserved == 0 and not eng.running
    m = eng.metrics()
    assert m.finished == len(reqs) and m.rejected == 1 and m.unfinished == 0


def test_lpm_hits_more_than_fcfs_under_pressure():
    reqs = grouped_workload(seed=1)
    cfg = EngineConfig(kv_capacity_tokens=3000, max_prefill_tokens=1500, max_running_requests=8)
    fcfs = SimEngine("fcfs", cfg).run(reqs)
    lpm = SimEngine("lpm", cfg).run(reqs)
    dfs = SimEngine("dfs_weight", cfg).run(reqs)
    assert lpm.hit_rate > fcfs.hit_rate + 0.1
    assert dfs.hit_rate > fcfs.hit_rate + 0.1
    assert lpm.mean_latency < fcfs.mean_latency


def test_single_request_timeline_matches_cost_model():
    cm = CostModel()
    eng = SimEngine("fcfs", EngineConfig(cost_model=cm))
    r = Request(0, 0, np.arange(1000), 1.0, output_len=50, arrival=2.0)
    eng.run([r])
    rec = eng.records[0]
    prefill = cm.prefill_time(1000, 1000 * 500)
    assert rec.first_token == pytest.approx(2.0 + prefill)
    assert rec.finish == pytest.approx(2.0 + prefill + cm.decode_steps_time(49, 1, 1001))
    stepwise = sum(cm.decode_time(1, 1001 + k) for k in range(49))
    assert cm.decode_steps_time(49, 1, 1001) == pytest.approx(stepwise)


def test_second_request_reuses_first_and_arrival_interrupts_decode():
    eng = SimEngine("fcfs", EngineConfig())
    a = Request(0, 0, np.arange(800), 1.0, output_len=200, arrival=0.0)
    b = Request(1, 0, np.concatenate([np.arange(800), [5, 6, 7]]), 1.0, output_len=5, arrival=0.05)
    eng.run([a, b])
    ra, rb = eng.records[0], eng.records[1]
    assert rb.cached_tokens == 800 and rb.computed_tokens == 3
    # b is admitted at the first iteration boundary after it arrives, long before a finishes.
    assert 0.05 <= rb.admit < 0.05 + 0.02 and rb.finish < ra.finish


def test_lazy_and_list_submission_agree():
    reqs = grouped_workload(seed=2, spread=0.02)
    cfg = EngineConfig(kv_capacity_tokens=5000)
    a = SimEngine("lpm", cfg).run(reqs)
    b = SimEngine("lpm", cfg).run(iter(reqs))
    assert a == b


def test_lazy_submission_must_be_sorted():
    reqs = grouped_workload(spread=0.01)[:5]
    with pytest.raises(ValueError, match="sorted by arrival"):
        SimEngine("fcfs").run(iter(reqs[::-1]))


def test_page_size_engine_conserves():
    reqs = grouped_workload(seed=3, spread=0.01)
    eng = SimEngine("lpm", EngineConfig(kv_capacity_tokens=4000, page_size=16))
    eng.submit(reqs)
    step_checked(eng)
    assert all(eng.records[r.id].finished for r in reqs)
    assert eng.reserved == 0 and eng.cache.protected_size == 0


def test_identical_runs_are_deterministic():
    reqs = grouped_workload(seed=4, spread=0.005)
    cfg = EngineConfig(kv_capacity_tokens=3000)
    recs = []
    for _ in range(2):
        eng = SimEngine("dfs_weight", cfg)
        eng.run(reqs)
        recs.append([(r.admit, r.finish, r.cached_tokens) for r in eng.records.values()])
    assert recs[0] == recs[1]


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="empty prompt"):
        Request(0, 0, [], 1.0)
    with pytest.raises(ValueError, match="output_len"):
        Request(0, 0, [1, 2], 1.0, output_len=-3)
    with pytest.raises(ValueError, match="bid"):
        Request(0, 0, [1, 2], -1.0)
    with pytest.raises(ValueError, match="finite"):
        Request(0, 0, [1, 2], math.nan)
    with pytest.raises(ValueError, match=r"unknown scheduler 'sjf'.*fcfs.*lpm"):
        make_scheduler("sjf")
    with pytest.raises(ValueError, match="duplicate"):
        SimEngine().submit([Request(0, 0, [1], 1.0), Request(0, 1, [2], 1.0)])
    with pytest.raises(ValueError, match="kv_capacity_tokens"):
        EngineConfig(kv_capacity_tokens=0)


def test_cost_model_json_round_trip(tmp_path):
    cm = CostModel(prefill_base=0.001, decode_base=0.002, name="test")
    cm.to_json(tmp_path / "c.json")
    assert CostModel.from_json(tmp_path / "c.json") == cm
    (tmp_path / "bad.json").write_text('{"prefill_base": 1, "warp_speed": 2}')
    with pytest.raises(ValueError, match="warp_speed"):
        CostModel.from_json(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="decode_base"):
        CostModel(decode_base=-1.0)


@pytest.mark.parametrize("bad", [None, "tokens", {"decode_base": 0.002}])
def test_engine_config_names_what_a_cost_model_must_be(bad):
    """Not an AttributeError from deep in the check of its coefficients."""
    with pytest.raises(ValueError, match=r"^cost_model must be a CostModel \(auction_gym.CostModel\(...\), or "
                       r"CostModel.from_json\(path\) of a calibration's\), got "):
        EngineConfig(cost_model=bad)


def test_a_later_smaller_request_is_admitted_when_the_first_does_not_fit():
    """The check that any admission is possible must not stop at the first waiting request: with
    memory for C but not B, the auction runs, and C (the higher bid) is admitted while A decodes.
    (The oracle reservation makes the room a plain sum; the check is the same under both.)"""
    config = EngineConfig(kv_capacity_tokens=100, max_prefill_tokens=100, reservation="oracle")
    engine = SimEngine("strict_vcg", config)
    a = Request(0, 0, list(range(10)), bid=1.0, output_len=60)
    b = Request(1, 1, list(range(100, 105)), bid=1.0, output_len=50, arrival=0.1)
    c = Request(2, 2, list(range(200, 203)), bid=5.0, output_len=20, arrival=0.1)
    engine.submit([a, b, c])
    assert engine.step().admitted == [0]
    assert engine.step().kind == "decode" and engine.now >= 0.1  # up to the arrivals
    it = engine.step()
    assert it.queue_len == 2 and it.kind == "prefill" and it.admitted == [2]
    room = config.kv_capacity_tokens - (engine.used_tokens - c.prompt_len - c.output_len)
    assert b.prompt_len + b.output_len > room >= c.prompt_len + c.output_len  # B did not fit, C did
    assert math.isnan(engine.records[0].finish)  # A still runs
    engine.run()
    assert all(rec.finished for rec in engine.records.values())


def three_bidders() -> list[Request]:
    return [Request(i, i % 3, np.arange(10 + i), 1.0, output_len=3) for i in range(6)]


@pytest.mark.parametrize("remaining", [[1.0], [1.0] * 4, [math.nan] * 3, [-1.0] * 3, "abc"])
def test_budgets_left_must_be_one_per_bidder(remaining):
    """A step's `remaining` holds one budget left >= 0 per bidder, as many as the multipliers: a
    short list was read past its end (IndexError) and a NaN or a longer list was taken as given.
    Refused before the policy's state moves, so the step then decides as on a fresh engine."""
    def engine() -> SimEngine:
        eng = SimEngine("tiers", EngineConfig())
        eng.submit(three_bidders())
        return eng

    refused = engine()
    with pytest.raises((ValueError, TypeError), match="remaining"):
        refused.step([1.0] * 3, remaining)
    budgets = [1e-6, math.inf, 0.0]
    assert refused.step([1.0] * 3, budgets).admitted == engine().step([1.0] * 3, budgets).admitted


def test_budgets_left_in_a_replay_cover_every_bidder():
    eng = SimEngine("tiers", EngineConfig())
    eng.submit(three_bidders())
    with pytest.raises(ValueError, match="request 1 is bidder 1's.*1 budgets left"):
        eng.step(None, [1.0])


@pytest.mark.parametrize("bad", ["duplicate", "not a request"])
def test_a_refused_batch_submits_nothing(bad):
    """A batch with a repeated id or a non-request is refused whole: none of it stays submitted, so
    the batch, fixed, can be submitted again."""
    eng = SimEngine("fcfs", EngineConfig())
    batch = three_bidders()
    wrong = batch + ([batch[2]] if bad == "duplicate" else [5])
    with pytest.raises(ValueError if bad == "duplicate" else TypeError, match="duplicate|Request objects"):
        eng.submit(wrong)
    assert not eng.records and eng.arrivals.pending == 0
    assert eng.run(batch).finished == len(batch)


def test_run_until_nan_is_refused_before_submitting():
    """No clock passes NaN: `run(until=nan)` used to return at once, having run nothing."""
    eng = SimEngine("fcfs", EngineConfig())
    with pytest.raises(ValueError, match="until"):
        eng.run(three_bidders(), until=math.nan)
    assert not eng.records

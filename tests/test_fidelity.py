"""End-to-end fidelity (experiments/commands/fidelity.py): errors are zero for the simulator against itself,
grow when its cost model is wrong, and a torch replay yields finite errors and its report files."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from auction_gym.engine import CostModel, EngineConfig, RequestRecord, SimEngine
from experiments.commands.calibration import Sample, predicted
from experiments.commands.fidelity import (
    compare,
    fidelity,
    fit_replay,
    median_ci,
    percentile_ranges,
    realized_load,
    speed_ratio,
    timing_error,
    workload,
)
from experiments.commands.replays import Replay, replay, replay_together, saturation_replay, saturation_throughput

COST = CostModel(1e-3, 1e-5, 1e-8, 2e-3, 1e-4, 1e-7, name="test")
CONFIG = EngineConfig(kv_capacity_tokens=1500, chunked_prefill_size=64, max_running_requests=8, cost_model=COST)


def _requests():
    return workload(groups=2, per_group=4, system_prompt_len=64, question_len=16, output_len=24, rate=200.0, seed=0)


def test_simulator_against_itself_has_zero_error():
    a, b = replay(SimEngine("lpm", CONFIG), _requests()), replay(SimEngine("lpm", CONFIG), _requests())
    err = compare(a, b)
    assert err["requests"] == 8
    for key in ("ttft_median_pct", "ttft_p90_pct", "latency_median_pct", "latency_p90_pct", "throughput_pct",
                "ttft_p50_of_p50_pct", "latency_p50_of_p50_pct", "ttft_p90_of_p90_pct", "latency_p90_of_p90_pct"):
        assert err[key] == 0.0
    n = len(a.prefill_batches)
    assert err["admit_rank_differs"] == 0 and err["prefill_batches_same"] == f"{n}/{n}"


def test_a_slower_cost_model_shows_as_error():
    slow = replace(CONFIG, cost_model=replace(COST, decode_base=2 * COST.decode_base))
    err = compare(replay(SimEngine("lpm", CONFIG), _requests()), replay(SimEngine("lpm", slow), _requests()))
    assert all(math.isfinite(v) for v in err.values() if isinstance(v, float))
    assert err["latency_median_pct"] > 10 and err["throughput_pct"] > 10 and err["latency_p50_of_p50_pct"] > 10


def _finished(ttfts: np.ndarray, latencies: np.ndarray) -> Replay:
    """A replay whose request i arrived at i s and had TTFT ttfts[i] and latency latencies[i] (s)."""
    records = {}
    for i, (ttft, latency) in enumerate(zip(ttfts, latencies)):
        records[i] = RequestRecord(i, 0, float(i), 10, 10, 1.0, 1.0, 1.0, admit=float(i), first_token=i + ttft,
                                   finish=i + latency)
    return Replay(records, list(records), [])


def test_percentile_errors_compare_each_percentile_of_the_two_distributions():
    """Slowing only the slowest fifth of the requests by 2x moves the p90 by 100% and leaves the
    p50 where it was; per request, the median error stays 0."""
    ttft = np.arange(1.0, 101.0)
    slow = np.where(ttft > np.percentile(ttft, 80), 2 * ttft, ttft)
    err = compare(_finished(ttft, 10 * ttft), _finished(slow, 10 * ttft))
    assert err["ttft_p50_of_p50_pct"] == 0.0 and err["ttft_median_pct"] == 0.0
    assert err["ttft_p90_of_p90_pct"] == pytest.approx(100.0, rel=1e-12)
    assert err["latency_p90_of_p90_pct"] == 0.0 and err["latency_p50_of_p50_pct"] == 0.0


def test_percentile_ranges_span_the_comparisons_and_say_none_without_a_second_replay():
    keys = ("ttft_p50_of_p50_pct", "ttft_p90_of_p90_pct", "latency_p50_of_p50_pct", "latency_p90_of_p90_pct")
    cells = [dict.fromkeys(keys, v) for v in (3.0, 1.0, 2.0)]
    spans = percentile_ranges({"sim_vs_torch": cells, "torch_vs_torch": cells[1:]})
    assert set(spans) == set(keys)
    assert all(s == {"sim_vs_torch": (1.0, 3.0), "torch_vs_torch": (1.0, 2.0)} for s in spans.values())
    alone = percentile_ranges({"sim_vs_torch": cells[:1], "torch_vs_torch": []})
    assert alone["ttft_p90_of_p90_pct"] == {"sim_vs_torch": (3.0, 3.0), "torch_vs_torch": None}


def test_fit_replay_recovers_the_times_it_was_fitted_to():
    rng = np.random.default_rng(0)
    truth = [np.array([1e-3, 2e-5, 3e-9]), np.array([2e-3, 1e-4, 5e-8])]
    samples = []
    for kind, coef in zip(("prefill", "decode"), truth):
        for _ in range(30):
            x = (1.0, float(rng.integers(1, 500)), float(rng.integers(1, 100_000)))
            samples.append(Sample(kind, x, float(np.dot(coef, x))))
    real = Replay({}, [], [], samples)
    err = timing_error(real, fit_replay(real, "fit"))
    assert err["iteration_p90_ape_pct"] < 1e-6 and abs(err["total_bias_pct"]) < 1e-6


def test_torch_replay_gives_finite_errors_and_writes_the_report(tmp_path):
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        summary = fidelity(_requests()[:4], "fcfs", CONFIG, repeats=1, out=tmp_path)
    finally:
        torch.set_num_threads(threads)
    (err,), (timing,) = summary["sim_vs_torch"], summary["timing"]
    assert err["requests"] == 4 and math.isfinite(err["ttft_p90_pct"]) and math.isfinite(err["throughput_pct"])
    assert timing["iterations"] > 0 and math.isfinite(timing["total_bias_pct"])
    assert {p.name for p in tmp_path.iterdir()} == {"requests_1.csv", "summary.json", "summary.md"}
    report = (tmp_path / "summary.md").read_text()
    assert "| TTFT median |" in report and f"| TTFT p90 vs p90 | {err['ttft_p90_of_p90_pct']:.1f} | - |" in report
    with (tmp_path / "requests_1.csv").open() as f:
        rows = list(csv.DictReader(f))
    for engine in ("real", "sim"):  # the wait before the first prefill is part of the TTFT
        assert all(0 <= float(r[f"wait_{engine}_s"]) < float(r[f"ttft_{engine}_s"]) for r in rows)


def test_interleaved_replays_equal_separate_ones():
    """replay_together only interleaves in time: each engine's records, admission order and batches
    are those of a replay on its own."""
    slow = replace(CONFIG, cost_model=replace(COST, decode_base=3 * COST.decode_base))
    other = workload(groups=2, per_group=3, system_prompt_len=48, question_len=8, output_len=30, rate=50.0, seed=1)
    together = replay_together([SimEngine("lpm", CONFIG), SimEngine("lpm", slow), SimEngine("fcfs", CONFIG)],
                               [_requests(), _requests(), other])
    alone = [replay(SimEngine("lpm", CONFIG), _requests()), replay(SimEngine("lpm", slow), _requests()),
             replay(SimEngine("fcfs", CONFIG), other)]
    for a, b in zip(together, alone):
        assert a.admit_order == b.admit_order and a.prefill_batches == b.prefill_batches
        assert [(r.first_token, r.finish) for r in a.records.values()] == [
            (r.first_token, r.finish) for r in b.records.values()]
    assert together[0].records[7].finish != together[1].records[7].finish


def test_capacity_ignores_the_arrival_rate_and_scales_with_iteration_costs():
    """Capacity is measured with every request arriving at once, so it does not depend on the draw's
    rate, and an engine whose every iteration costs twice as much serves exactly half as many
    requests per second."""
    def requests(rate):
        return workload(groups=2, per_group=6, system_prompt_len=64, question_len=16, output_len=24, rate=rate,
                        seed=0)

    cap = saturation_throughput(SimEngine("lpm", CONFIG), requests(1.0))
    assert cap == saturation_throughput(SimEngine("lpm", CONFIG), requests(500.0))
    double = CostModel(*(2 * getattr(COST, f) for f in ("prefill_base", "prefill_per_token", "prefill_per_attention",
                                                       "decode_base", "decode_per_request",
                                                       "decode_per_context_token")), name="double")
    assert saturation_throughput(SimEngine("lpm", replace(CONFIG, cost_model=double)), requests(1.0)) == (
        pytest.approx(cap / 2, rel=1e-9))


def test_a_saturation_replay_runs_the_same_iterations_whatever_they_cost():
    """Every request waits from the start, so the schedule does not depend on iteration times:
    an engine twice as slow runs the same batches in the same order, in twice the makespan."""
    requests = workload(groups=2, per_group=6, system_prompt_len=64, question_len=16, output_len=24, rate=3.0, seed=2)
    double = replace(CONFIG, cost_model=CostModel(*(2 * getattr(COST, f) for f in (
        "prefill_base", "prefill_per_token", "prefill_per_attention", "decode_base", "decode_per_request",
        "decode_per_context_token")), name="double"))
    fast, slow = (saturation_replay(SimEngine("lpm", c), requests) for c in (CONFIG, double))
    assert fast.admit_order == slow.admit_order and fast.prefill_batches == slow.prefill_batches
    assert all(r.arrival == 0.0 for r in fast.records.values())
    assert max(r.finish for r in slow.records.values()) == pytest.approx(
        2 * max(r.finish for r in fast.records.values()), rel=1e-9)


def _timed(cost: CostModel, slowdown: float, seed: int, n: int = 40) -> list[Sample]:
    """`n` prefill and `n` decode iterations of random sizes, timed as `cost` charges them times `slowdown`."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n):
        new, batch = float(rng.integers(1, 256)), float(rng.integers(1, 33))
        samples.append(Sample("prefill", (1.0, new, new * float(rng.integers(new, 600))), 0.0))
        samples.append(Sample("decode", (1.0, batch, batch * float(rng.integers(60, 700))), 0.0))
    return [replace(s, t=slowdown * predicted(cost, s)) for s in samples]


def test_realized_load_follows_how_much_slower_the_replays_ran_than_the_capacity_replay():
    """Replays whose iterations took 1.25x what the same iterations took in the capacity replay ran
    at 1/1.25 of the capacity, so a rate of 0.6 x capacity was a load of 0.75 for them; replays at
    the capacity replay's speed ran at the load asked for."""
    capacity = replace(_finished(np.ones(10), np.full(10, 2.0)), samples=_timed(COST, 1.0, seed=0))  # 10 over 11 s
    rps = 10 / 11
    same, slow = Replay({}, [], [], _timed(COST, 1.0, seed=1)), Replay({}, [], [], _timed(COST, 1.25, seed=2))
    assert speed_ratio(slow, COST) == pytest.approx(1.25, rel=1e-12)
    out = realized_load(capacity, [same, slow], rate=0.6 * rps)
    assert out["capacity_realized_rps"] == pytest.approx([rps, rps / 1.25], rel=1e-6)
    assert out["load_realized"] == pytest.approx([0.6, 0.75], rel=1e-6)


def test_a_draw_at_rate_r_is_the_unit_rate_draw_with_arrivals_divided_by_r():
    """What makes --load a pure rescaling of time: the same requests, arrivals scaled by 1/rate."""
    unit = workload(groups=2, per_group=5, system_prompt_len=64, question_len=16, output_len=24, rate=1.0, seed=4)
    fast = workload(groups=2, per_group=5, system_prompt_len=64, question_len=16, output_len=24, rate=12.5, seed=4)
    assert [r.arrival for r in fast] == pytest.approx([r.arrival / 12.5 for r in unit], rel=1e-12)
    assert all(np.array_equal(a.tokens, b.tokens) and a.output_len == b.output_len for a, b in zip(unit, fast))


def test_median_ci_brackets_the_median_and_narrows_with_more_requests():
    rng = np.random.default_rng(0)
    few, many = rng.exponential(10, 30), rng.exponential(10, 3000)
    for values in (few, many):
        lo, hi = median_ci(values)
        assert lo < np.median(values) < hi
    assert np.subtract(*median_ci(many)[::-1]) < np.subtract(*median_ci(few)[::-1]) / 4
    assert median_ci(np.full(50, 7.0)) == (7.0, 7.0)


def test_load_sets_the_rate_from_the_measured_capacity(tmp_path):
    """`fidelity --load 0.5` measures the torch engine's capacity on the cpu clock, replays at half
    of it, and fits the cost model to a replay of another draw interleaved with the scored one
    (here with a speed reference probing every 3 iterations)."""
    torch = pytest.importorskip("torch")
    from experiments.cli import main

    threads = torch.get_num_threads()
    try:
        main(["fidelity", "--load", "0.5", "--groups", "2", "--prompts-per-group", "3", "--system-prompt-len", "64",
              "--question-len", "16", "--output-len", "8", "--repeats", "1", "--kv-capacity", "1500",
              "--speed-reference", "3", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["clock"] == "cpu" and summary["load"] == 0.5 and summary["capacity_rps"] > 0
    assert summary["speed_reference"] == 3
    (load,) = summary["load_realized"]  # one scored replay; the estimate, not the value asked for
    assert 0 < load < math.inf and summary["capacity_realized_rps"] == [pytest.approx(summary["rate"] / load)]
    assert "at the speed each scored replay ran (estimated)" in (tmp_path / "summary.md").read_text()
    assert summary["rate"] == pytest.approx(0.5 * summary["capacity_rps"], rel=1e-12)
    assert CostModel.from_json(tmp_path / "costs.json").name == summary["cost_model"]["name"]


@pytest.mark.parametrize("command", ["fidelity", "calibrate"])
def test_cpu_clock_with_several_threads_or_an_unknown_clock_is_a_usage_error(command, tmp_path, capsys):
    pytest.importorskip("torch")
    from experiments.cli import main

    for argv, message in ((["--threads", "2"], "use --threads 1, or --clock wall"), (["--clock", "tsc"], "unknown --clock")):
        with pytest.raises(SystemExit) as exit_:
            main([command, *argv, "--out", str(tmp_path / "x")])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_fit_replay_keeps_a_base_cost_the_engine_config_accepts():
    """Decode times exactly proportional to the context: the unconstrained fit is the context term
    alone, which EngineConfig rejects; fit_replay keeps a positive base cost instead."""
    rng = np.random.default_rng(1)
    samples = [Sample("prefill", (1.0, float(n), float(n * n)), 1e-3 + 1e-5 * n) for n in rng.integers(1, 300, 20)]
    for batch in rng.integers(1, 9, 40):
        context = float(batch * rng.integers(50, 70))
        samples.append(Sample("decode", (1.0, float(batch), context), 1e-6 * context))
    cost = fit_replay(Replay({}, [], [], samples), "fit")
    assert cost.decode_base > 0
    EngineConfig(cost_model=cost)

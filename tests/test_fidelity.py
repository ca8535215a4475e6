"""End-to-end fidelity (experiments/commands/fidelity.py): errors are zero for the simulator against itself,
grow when its cost model is wrong, and a torch replay yields finite errors and its report files."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from auction_gym.engine import CostModel, EngineConfig, SimEngine
from experiments.commands.calibrate import Sample
from experiments.commands.fidelity import Replay, compare, fidelity, fit_replay, replay, timing_error, workload

COST = CostModel(1e-3, 1e-5, 1e-8, 2e-3, 1e-4, 1e-7, name="test")
CONFIG = EngineConfig(kv_capacity_tokens=1500, chunked_prefill_size=64, max_running_requests=8, cost_model=COST)


def _requests():
    return workload(groups=2, per_group=4, system_prompt_len=64, question_len=16, output_len=24, rate=200.0, seed=0)


def test_simulator_against_itself_has_zero_error():
    a, b = replay(SimEngine("lpm", CONFIG), _requests()), replay(SimEngine("lpm", CONFIG), _requests())
    err = compare(a, b)
    assert err["requests"] == 8
    for key in ("ttft_median_pct", "ttft_p90_pct", "latency_median_pct", "latency_p90_pct", "throughput_pct"):
        assert err[key] == 0.0
    n = len(a.prefill_batches)
    assert err["admit_rank_differs"] == 0 and err["prefill_batches_same"] == f"{n}/{n}"


def test_a_slower_cost_model_shows_as_error():
    slow = replace(CONFIG, cost_model=replace(COST, decode_base=2 * COST.decode_base))
    err = compare(replay(SimEngine("lpm", CONFIG), _requests()), replay(SimEngine("lpm", slow), _requests()))
    assert all(math.isfinite(v) for v in err.values() if isinstance(v, float))
    assert err["latency_median_pct"] > 10 and err["throughput_pct"] > 10


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
    assert "| TTFT median |" in (tmp_path / "summary.md").read_text()

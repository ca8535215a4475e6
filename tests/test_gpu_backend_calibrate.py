"""Calibration of the simulated engine's cost model from the torch engine (experiments/commands/calibrate.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from auction_gym.engine import CostModel, EngineConfig, SimEngine
from experiments.commands.calibrate import main
from experiments.commands.calibration import Sample, ape, calibrate, fit, nnls


def test_nnls_is_exact_and_non_negative():
    rng = np.random.default_rng(0)
    a = rng.random((40, 3))
    x = np.array([2.0, 0.0, 0.5])
    np.testing.assert_allclose(nnls(a, a @ x), x, atol=1e-10)
    # Unconstrained least squares would make the second coefficient negative.
    b = a @ np.array([1.0, -1.0, 1.0])
    sol = nnls(a, b)
    assert (sol >= 0).all() and sol[1] == 0
    best = np.linalg.lstsq(a[:, [0, 2]], b, rcond=None)[0]
    np.testing.assert_allclose(sol[[0, 2]], best, atol=1e-10)


def test_fit_recovers_a_cost_model_from_noiseless_times():
    rng = np.random.default_rng(1)
    truth = CostModel(1e-3, 2e-5, 3e-9, 2e-3, 1e-4, 5e-8, name="truth")
    samples = []
    for n, c, b in zip(rng.integers(1, 4000, 50), rng.integers(0, 8000, 50), rng.integers(1, 33, 50)):
        attention = float(n * (c + n / 2))
        samples.append(Sample("prefill", (1.0, float(n), attention), truth.prefill_time(n, attention)))
        samples.append(Sample("decode", (1.0, float(b), float(b * c)), truth.decode_time(b, b * c)))
    got = fit(samples)
    for field in ("prefill_base", "prefill_per_token", "prefill_per_attention", "decode_base", "decode_per_request",
                  "decode_per_context_token"):
        assert getattr(got, field) == pytest.approx(getattr(truth, field), rel=1e-6), field
    assert ape(samples, got).max() < 1e-6


def test_calibrate_writes_a_cost_model_the_simulator_loads(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path / "costs.json"
        summary = calibrate(out, "tiny", "cpu", repeats=1, max_prefill=256, max_context=512, pool_tokens=20_000)
    finally:
        torch.set_num_threads(threads)
    cost = CostModel.from_json(out)
    assert cost.name.startswith("tiny-float32/cpu")
    assert cost.prefill_time(100, 100 * 50) > 0 and cost.decode_time(4, 1000) > 0
    assert summary["held_out"]["prefill"] >= 1 and summary["held_out"]["decode"] >= 1
    assert np.isfinite(summary["median_ape_pct"]["all"]) and np.isfinite(summary["p90_ape_pct"]["all"])
    assert np.isfinite(summary["decode_linear_median_ape_pct"])
    SimEngine("fcfs", EngineConfig(cost_model=cost))


def test_command_line_writes_json(tmp_path, capsys):
    threads = torch.get_num_threads()
    try:
        main(["--out", str(tmp_path / "c.json"), "--device", "cpu", "--repeats", "1", "--max-prefill", "128",
              "--max-context", "256", "--threads", "1", "--statistic", "median"])
    finally:
        torch.set_num_threads(threads)
    assert CostModel.from_json(tmp_path / "c.json").decode_time(1, 10) > 0
    assert '"median_ape_pct"' in capsys.readouterr().out


@pytest.mark.slow
def test_full_calibration_fits_held_out_points(tmp_path):
    """The default grid on CPU (one to two minutes). The calibration's target is a held-out median
    error <= 10%; on a shared 2-core CPU runs measured 7% to 15%, because other processes'
    interference cannot be fitted, so the bound here is looser."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        summary = calibrate(tmp_path / "costs.json", "tiny", "cpu")
    finally:
        torch.set_num_threads(threads)
    assert summary["median_ape_pct"]["all"] <= 20

"""The cost model's decode knee (auction_gym/engine/cost_model.py) and its fit by `calibrate`
(experiments/commands/calibrate.py): backwards compatible, recovered from synthetic times."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from auction_gym.engine import CostModel, EngineConfig, SimEngine
from experiments.commands.calibration import KNEES, Sample, ape, calibrate, fit, fit_cost_model
from experiments.commands.fidelity import fit_replay, timing_error
from experiments.commands.replays import Replay

KNEED = CostModel(1e-3, 2e-5, 3e-9, 1.2e-3, 1.9e-4, 3.8e-7, name="kneed", decode_knee=4.0,
                  decode_per_request_to_knee=4e-4)


def _linear_decode(cost: CostModel, batch: int, context: int) -> float:
    """The decode time before the knee existed, written out."""
    return cost.decode_base + cost.decode_per_request * batch + cost.decode_per_context_token * context


def _samples(cost: CostModel, rng: np.random.Generator, n: int = 60) -> list[Sample]:
    """Noiseless prefill and decode samples of `cost` over random sizes (batches 1 to 32)."""
    out = []
    for _ in range(n):
        new, cached = int(rng.integers(1, 4000)), int(rng.integers(0, 8000))
        attention = new * (cached + new / 2)
        out.append(Sample("prefill", (1.0, float(new), attention), cost.prefill_time(new, attention)))
        batch = int(rng.integers(1, 33))
        context = batch * int(rng.integers(64, 1500))
        out.append(Sample("decode", (1.0, float(batch), float(context)), cost.decode_time(batch, context)))
    return out


def test_old_json_loads_with_no_knee_and_the_same_times(tmp_path):
    old = {"prefill_base": 0.001, "prefill_per_token": 2e-5, "prefill_per_attention": 3e-9, "decode_base": 0.002,
           "decode_per_request": 1e-4, "decode_per_context_token": 5e-8, "name": "written before the knee"}
    (tmp_path / "old.json").write_text(json.dumps(old))
    cost = CostModel.from_json(tmp_path / "old.json")
    assert cost.decode_knee == 0 and cost.decode_per_request_to_knee == 0
    for batch, context in ((1, 10), (7, 3000), (32, 40_000)):
        assert cost.decode_time(batch, context) == _linear_decode(cost, batch, context)  # bit for bit
    default = CostModel()
    assert default.decode_time(12, 9000) == _linear_decode(default, 12, 9000)


def test_knee_charges_the_first_requests_only():
    linear = replace(KNEED, decode_knee=0.0, decode_per_request_to_knee=0.0)
    for batch in (1, 2, 4, 5, 16):
        extra = KNEED.decode_time(batch, 1000) - linear.decode_time(batch, 1000)
        assert extra == pytest.approx(4e-4 * min(batch, 4), rel=1e-12)


def test_decode_steps_with_a_knee_sum_the_steps():
    stepwise = sum(KNEED.decode_time(6, 6 * 300 + 6 * k) for k in range(40))
    assert KNEED.decode_steps_time(40, 6, 6 * 300) == pytest.approx(stepwise, rel=1e-12)


def test_simulator_with_a_knee_matches_the_linear_model_it_equals():
    """With at most `decode_knee` requests running, min(batch, k) = batch, so the kneed model is the
    linear one with e + g per request; the simulator, which jumps over many decode steps at once,
    must give the same records under both while arrivals change the batch."""
    from auction_gym.request import Request

    requests = [Request(id=i, bidder=0, tokens=np.arange(i * 100, i * 100 + 50), output_len=40 + 10 * i,
                        arrival=0.015 * i) for i in range(4)]
    linear = replace(KNEED, decode_knee=0.0, decode_per_request_to_knee=0.0,
                     decode_per_request=KNEED.decode_per_request + KNEED.decode_per_request_to_knee)
    records = []
    for cost in (KNEED, linear):
        engine = SimEngine("fcfs", EngineConfig(cost_model=cost))
        engine.submit([replace(r) for r in requests])
        while engine.step() is not None:
            pass
        records.append(engine.records)
    assert all(r.finished for r in records[0].values())
    for i in range(4):
        assert records[0][i].finish == pytest.approx(records[1][i].finish, rel=1e-9)
        assert records[0][i].first_token == pytest.approx(records[1][i].first_token, rel=1e-9)
    stepped_alone = records[0][3].finish - records[0][2].finish  # request 3's last 10 steps, alone
    assert stepped_alone > 10 * (KNEED.decode_base + KNEED.decode_per_request_to_knee)


def test_fit_recovers_a_kneed_cost_model_from_noiseless_times():
    samples = _samples(KNEED, np.random.default_rng(2))
    for got in (fit(samples), fit_cost_model(samples, "abs", relative=False, required=(0,))):
        assert got.decode_knee == KNEED.decode_knee
        for field in ("prefill_base", "prefill_per_token", "prefill_per_attention", "decode_base",
                      "decode_per_request", "decode_per_context_token", "decode_per_request_to_knee"):
            assert getattr(got, field) == pytest.approx(getattr(KNEED, field), rel=1e-6), field
        assert ape(samples, got).max() < 1e-6


def test_linear_fit_misses_a_knee_the_kneed_fit_finds():
    samples = _samples(KNEED, np.random.default_rng(3))
    assert ape(samples, fit(samples, knees=())).max() > 5 > 1e-6 > ape(samples, fit(samples)).max()


def test_fit_of_linear_times_adds_no_knee_term():
    linear = replace(KNEED, decode_knee=0.0, decode_per_request_to_knee=0.0)
    got = fit(_samples(linear, np.random.default_rng(4)))
    assert got.decode_knee in (0.0, *KNEES)
    assert got.decode_per_request_to_knee < 1e-9
    assert got.decode_per_request == pytest.approx(linear.decode_per_request, rel=1e-6)


def test_fit_replay_recovers_the_knee_of_a_replay():
    real = Replay({}, [], [], _samples(KNEED, np.random.default_rng(5)))
    cost = fit_replay(real, "fit")
    assert cost.decode_knee == KNEED.decode_knee
    err = timing_error(real, cost)
    assert err["iteration_p90_ape_pct"] < 1e-6 and abs(err["total_bias_pct"]) < 1e-6


@pytest.mark.parametrize("drop", ["prefill", "decode", "both"])
def test_fit_refuses_samples_without_both_kinds(drop):
    """Without prefill samples the fit kept the default model's prefill coefficients, as if fitted
    (and without decode samples, or any, it failed with an IndexError)."""
    samples = [s for s in _samples(CostModel(), np.random.default_rng(0), 10) if drop != "both" and s.kind != drop]
    with pytest.raises(ValueError, match="samples to fit"):
        fit(samples)


@pytest.mark.parametrize("bad", [Sample("decode", (1.0, 3.0, 1500.0), 0.0), Sample("decode", (1.0, 3.0, 1500.0), -1e-3),
                                 Sample("decode", (1.0, 3.0, 1500.0), math.nan), Sample("decode", (1.0, 3.0), 1e-2),
                                 Sample("decodes", (1.0, 3.0, 1500.0), 1e-2)])
def test_fit_refuses_a_sample_it_cannot_fit(bad):
    """A time of 0 or NaN broke the relative fit (LinAlgError), a negative one was fitted, a
    misspelled kind left out unseen."""
    with pytest.raises(ValueError, match="a sample must be"):
        fit(_samples(CostModel(), np.random.default_rng(0), 10) + [bad])


@pytest.mark.parametrize("bad", [dict(repeats=0), dict(holdout=1.0), dict(holdout=math.nan), dict(statistic="mean")])
def test_calibrate_refuses_bad_settings_before_profiling(tmp_path, bad):
    """They failed after the model was built and the grid profiled (a KeyError for the statistic)."""
    with pytest.raises(ValueError, match=next(iter(bad))):
        calibrate(tmp_path / "costs.json", device="no-such-device", **bad)
    assert not (tmp_path / "costs.json").exists()

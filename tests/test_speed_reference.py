"""The speed reference (gpu_backend/speed_reference.py): iteration seconds scaled by the machine's
nominal over current speed, measured by a probe step."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_backend.speed_reference import SpeedReference


def _probe(times: list[float]):
    """A probe returning `times` in turn, then the last one for ever; counts its calls."""
    calls = []

    def probe() -> float:
        calls.append(1)
        return times[min(len(calls), len(times)) - 1]

    return probe, calls


def test_a_steady_machine_is_not_scaled():
    probe, _ = _probe([2e-3])
    ref = SpeedReference(probe, every=3, window=5)
    assert [ref.scale(0.01) for _ in range(10)] == [0.01] * 10


def test_a_machine_at_its_nominal_speed_keeps_every_measured_time_to_the_last_bit():
    # One slow probe of three after the window: the median is still the nominal speed.
    probe, _ = _probe([1e-3] * 3 + [4e-3] + [1e-3])
    ref = SpeedReference(probe, every=1, window=3)
    measured = np.random.default_rng(0).uniform(0.0, 0.1, 1000).tolist()
    assert [ref.scale(seconds) for seconds in measured] == measured


def test_a_machine_twice_as_slow_is_scaled_back_once_the_window_sees_it():
    # Nominal probes 2 ms (the first 5), then the machine slows: probes take 4 ms.
    probe, calls = _probe([2e-3] * 5 + [4e-3])
    ref = SpeedReference(probe, every=2, window=5)
    assert ref.nominal == 2e-3 and len(calls) == 5
    scaled = [ref.scale(0.02) for _ in range(12)]  # 6 new probes, one every second call
    assert len(calls) == 11
    assert scaled[0] == 0.02 and scaled[1] == 0.02  # one slow probe of five: the median holds
    assert scaled[-1] == pytest.approx(0.01)  # all five recent probes slow: halved


def test_a_bad_period_is_refused():
    probe, _ = _probe([1e-3])
    with pytest.raises(ValueError, match="every"):
        SpeedReference(probe, every=0)


def test_torch_engine_clock_advances_by_the_scaled_seconds():
    torch = pytest.importorskip("torch")
    from dataclasses import replace

    from auction_gym.engine import EngineConfig
    from auction_gym.workload import SharedPrefixConfig, shared_prefix_workload
    from gpu_backend import TorchEngine

    class Spy(SpeedReference):
        def scale(self, seconds: float) -> float:
            out = super().scale(seconds)
            self.seen.append((seconds, out))
            return out

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = SharedPrefixConfig(num_groups=1, prompts_per_group=2, system_prompt_len=16, question_len=8,
                                 output_len=4, rate=100.0, num_bidders=1)
        probe, _ = _probe([1e-3] * 3 + [4e-3])  # four times slower after the nominal window
        spy = Spy(probe, every=1, window=3)
        spy.seen = []
        engine = TorchEngine("fcfs", EngineConfig(kv_capacity_tokens=500), reference=spy)
        engine.submit([replace(r, arrival=0.0) for r in shared_prefix_workload(cfg, seed=0)])
        while engine.step() is not None:
            pass
    finally:
        torch.set_num_threads(threads)
    measured, scaled = zip(*spy.seen)
    assert len(spy.seen) >= 3 and engine.now == pytest.approx(sum(scaled), rel=1e-12)
    # The first probe after the window is one slow of three (median nominal); from the second, a quarter.
    assert scaled[0] == measured[0]
    assert scaled[1:] == pytest.approx([m / 4 for m in measured[1:]], rel=1e-12)

"""A yardstick for a machine whose speed drifts: on a shared CPU, an identical decode
step's CPU time drifts by 30-40% over a minute (5-s medians 5.2-8.5 ms; the documentation's "The PyTorch engine
and calibration"), while different steps drift alike (their ratios stay within 10%). So a fixed
probe step, timed every few iterations, measures the machine's current speed, and iteration times
multiplied by nominal / current speed are in the units of the machine at its nominal speed.

    reference = SpeedReference(decode_probe(model, timer), every=10)
    seconds = reference.scale(measured_seconds)   # each iteration, from any engine sharing it

Engines that share one reference (interleaved replays) share its probes and its scale. On CUDA
the probe is timed by the engine's timer (CUDA events) alike; that path has not been run (no GPU).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from .model import Transformer
    from .timer import DeviceTimer


class SpeedReference:
    """Scales iteration seconds by the machine's nominal over current speed.

    Args:
        probe: runs the fixed step and returns its seconds.
        every: iterations (`scale` calls) between probes.
        window: probes in the current speed's median; the nominal one is the median of as many
            probes taken when the reference is made.
    """

    def __init__(self, probe: Callable[[], float], every: int = 10, window: int = 9) -> None:
        if every < 1 or window < 1:
            raise ValueError(f"every and window must be >= 1, got {every} and {window}")
        self.probe, self.every = probe, every
        self.recent: deque[float] = deque((probe() for _ in range(window)), maxlen=window)
        self.nominal = float(np.median(self.recent))
        self.calls = 0

    def scale(self, seconds: float) -> float:
        """`seconds` measured now, in seconds of the machine at its nominal speed."""
        self.calls += 1
        if self.calls % self.every == 0:
            self.recent.append(self.probe())
        # The ratio first: a machine at its nominal speed scales by exactly 1.0, so its seconds are
        # kept to the last bit (seconds * nominal / current rounds twice and may not be).
        return seconds * (self.nominal / float(np.median(self.recent)))


def decode_probe(model: Transformer, timer: DeviceTimer, batch: int = 8, context: int = 512,
                 seed: int = 0) -> Callable[[], float]:
    """A probe for `SpeedReference`: one decode step of `batch` requests of `context` tokens on a
    KV pool of its own, timed by `timer` (seconds)."""
    from .kv_pool import KVPool
    from .torch_engine import run_decode

    cfg = model.cfg
    pool = KVPool(batch * (context + 1), cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, device=model.device,
                  dtype=model.dtype)
    slots = [pool.alloc(context) for _ in range(batch)]
    new = pool.alloc(batch)
    tokens = np.random.default_rng(seed).integers(0, cfg.vocab_size, batch)
    run_decode(model, pool, slots, new, tokens)  # warm-up

    def probe() -> float:
        with timer as t:
            run_decode(model, pool, slots, new, tokens)
        return t.seconds

    return probe

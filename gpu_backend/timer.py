"""Time of device work, on one of two clocks (`CLOCKS`):

- "cpu" (the default): on a CPU device, the CPU time of the calling thread
  (`time.thread_time_ns`), which does not advance while the thread waits for a core that other
  processes hold, so the engine's clock and schedule do not stretch with them (caches and cores
  they share still slow the work itself, by some 10-20% under heavy load on a small CPU). It
  counts only the calling thread, so torch must compute on it alone
  (`torch.set_num_threads(1)`); making or entering such a timer with more threads raises
  RuntimeError. `choose_clock(device, None)`, what `TorchEngine` asks when no clock is named, takes
  it only when torch computes on one thread, and otherwise the wall clock with a one-line warning:
  an engine made in a plain Python process works without changing the process's torch settings.
- "wall": `time.perf_counter`, elapsed time including every wait (what a user of a dedicated
  machine sees).

On CUDA both clocks are CUDA events (the device's own time); the work still queued when the block
starts is waited for first, so it is not counted.

    with timer as t:
        ...                # launch work
    t.seconds              # seconds from entering to leaving, all launched work finished
"""

from __future__ import annotations

import time
import warnings

import torch

CLOCKS = {"cpu": time.thread_time_ns, "wall": time.perf_counter_ns}
"""Each clock's reading on a CPU device, in nanoseconds."""
DEFAULT_CLOCK = "cpu"


def choose_clock(device: str | torch.device, clock: str | None) -> str:
    """`clock` when named (checked when the timer is made); None: DEFAULT_CLOCK where it counts all
    the work (CUDA, or torch on one thread), else "wall" with a one-line warning that names it."""
    if clock is not None:
        return clock
    threads = torch.get_num_threads()
    if torch.device(device).type == "cuda" or threads == 1:
        return DEFAULT_CLOCK
    warnings.warn(f"iteration times on the 'wall' clock (elapsed time, stretched by other processes' load): torch "
                  f"computes on {threads} threads and the 'cpu' clock counts one; torch.set_num_threads(1) or "
                  f"clock='cpu' selects it", stacklevel=3)
    return "wall"


class DeviceTimer:
    """Reusable timer of a device; `seconds` holds the last measured block (see module docstring)."""

    def __init__(self, device: str | torch.device, clock: str = DEFAULT_CLOCK) -> None:
        if clock not in CLOCKS:
            raise ValueError(f"unknown clock {clock!r}; valid: {', '.join(CLOCKS)}")
        self.cuda = torch.device(device).type == "cuda"
        self.clock = clock
        self._read = CLOCKS[clock]
        self.seconds = 0.0
        self._t0 = 0
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
        self.check_threads()

    def check_threads(self) -> None:
        """Raise RuntimeError if the 'cpu' clock would miss work: torch computes on several threads."""
        if not self.cuda and self.clock == "cpu" and torch.get_num_threads() != 1:
            raise RuntimeError(f"the 'cpu' clock counts the calling thread only, but torch computes on "
                               f"{torch.get_num_threads()} threads: call torch.set_num_threads(1), or time "
                               f"with clock='wall'")

    def __enter__(self) -> DeviceTimer:
        if self.cuda:
            torch.cuda.synchronize()
            self._start.record()
            return self
        self.check_threads()  # the thread count may change after the timer is made
        self._t0 = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            self.seconds = self._start.elapsed_time(self._end) / 1e3
        else:
            self.seconds = (self._read() - self._t0) / 1e9

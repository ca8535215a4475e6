"""Wall time of device work: CUDA events on a GPU, `time.perf_counter` elsewhere.

    with timer as t:
        ...                # launch work
    t.seconds              # seconds from entering to leaving, all launched work finished

On CUDA the work still queued when the block starts is waited for first, so it is not counted.
"""

from __future__ import annotations

import time

import torch


class DeviceTimer:
    """Reusable timer of a device; `seconds` holds the last measured block."""

    def __init__(self, device: str | torch.device) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.seconds = 0.0
        self._t0 = 0.0
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)

    def __enter__(self) -> DeviceTimer:
        if self.cuda:
            torch.cuda.synchronize()
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            self.seconds = self._start.elapsed_time(self._end) / 1e3
        else:
            self.seconds = time.perf_counter() - self._t0

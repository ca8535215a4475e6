"""Replays of a workload through serving engines, for `radix-auction fidelity`: what each engine
did (`Replay`), several engines stepped in turn (`replay_together`), the torch engine that records
its iterations as calibration samples (`torch_engine`) and its capacity (`saturation_replay`,
`saturation_throughput`).

torch is imported when a torch engine is first made, not with this module.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from auction_gym.engine import EngineConfig, RequestRecord, ServingEngine, summarize
from auction_gym.engine.sim_engine import prefill_work
from auction_gym.request import Request

from .calibration import Sample

if TYPE_CHECKING:
    from gpu_backend import Transformer
    from gpu_backend.speed_reference import SpeedReference


@dataclass
class Replay:
    """What one engine did with the workload."""

    records: dict[int, RequestRecord]
    admit_order: list[int]
    """Request ids in the order their first prefill began."""
    prefill_batches: list[tuple[int, ...]]
    """Ids admitted or resumed by each prefill iteration that took any, in order."""
    samples: list[Sample] = field(default_factory=list)
    """Each iteration's cost-model features and measured seconds (torch engine only)."""
    wall_s: float = 0.0

    def ranks(self) -> dict[int, int]:
        """Each admitted request's rank in the admission order (0 = first)."""
        return {rid: k for k, rid in enumerate(self.admit_order)}


def replay(engine: ServingEngine, requests: list[Request]) -> Replay:
    """Step `engine` through `requests` to the end; its records, admission order and batches."""
    return replay_together([engine], [requests])[0]


def replay_together(engines: list[ServingEngine], workloads: list[list[Request]]) -> list[Replay]:
    """Replay `workloads[k]` through `engines[k]`, one iteration of each engine in turn until all
    are done, so that whatever slows the machine for a while (other processes' load) slows every
    replay alike. Each replay's `wall_s` counts its own iterations."""
    wall = [0.0] * len(engines)
    order: list[list[int]] = [[] for _ in engines]
    batches: list[list[tuple[int, ...]]] = [[] for _ in engines]
    for engine, requests in zip(engines, workloads):
        engine.submit(requests)
    active = list(range(len(engines)))
    while active:
        for k in list(active):
            start = time.perf_counter()
            it = engines[k].step()
            wall[k] += time.perf_counter() - start
            if it is None:
                active.remove(k)
                continue
            order[k] += it.admitted
            if it.admitted or it.resumed:
                batches[k].append(tuple(it.admitted + it.resumed))
    return [Replay(e.records, o, b, getattr(e, "samples", []), wall_s=w)
            for e, o, b, w in zip(engines, order, batches, wall)]


@functools.cache
def _timed_torch_engine_class() -> type:
    """`TorchEngine` that also records each iteration as a calibration `Sample`: the cost model's
    features, as `SimEngine` computes them, and the measured seconds (defined on first use, so
    this module imports without torch)."""
    from gpu_backend import TorchEngine

    class TimedTorchEngine(TorchEngine):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.samples: list[Sample] = []

        def _execute_prefill(self, batch):
            new, attention = prefill_work(batch)  # the simulator's terms for the same batch
            seconds = super()._execute_prefill(batch)
            self.samples.append(Sample("prefill", (1.0, float(new), float(attention)), seconds))
            return seconds

        def _execute_decode(self):
            x = (1.0, float(len(self.running)), float(self._context))
            steps, seconds = super()._execute_decode()
            self.samples.append(Sample("decode", x, seconds))
            return steps, seconds

    return TimedTorchEngine


def torch_engine(scheduler: str, config: EngineConfig, *, preset: str = "tiny", device: str = "cpu", seed: int = 0,
                 clock: str | None = None, model: Transformer | None = None,
                 reference: SpeedReference | None = None) -> ServingEngine:
    """A torch engine (weights from `seed`, or `model`) that times its iterations on `clock` (a
    `gpu_backend.timer.CLOCKS` name; None: its default), scaled by `reference` if given, and
    records them as `samples`."""
    from gpu_backend.timer import DEFAULT_CLOCK

    return _timed_torch_engine_class()(scheduler, config, preset=preset, device=device, seed=seed,
                                       clock=clock or DEFAULT_CLOCK, model=model, reference=reference)


def saturation_replay(engine: ServingEngine, requests: list[Request]) -> Replay:
    """`engine`'s replay of `requests` all arriving at once, whose throughput is its capacity
    (`saturation_throughput`).

    One replay is enough for the number it measures: every request waits from the start, so a
    scheduler that does not read the clock (lpm: checked) runs the same iterations in every replay,
    and the makespan is the sum of their times, over thousands of iterations (2,221 at `fidelity`'s
    defaults, 16-22 s; the first, a fresh model's warm-up at 10-27 ms, adds under 0.2%). What moves
    it between replays is the machine's speed (median iteration 7.0-10.7 ms over seven replays on
    one shared machine), which more replays would average over a longer stretch but not remove.
    A load set from it holds only while the replays after it run at its speed; `fidelity
    --speed-reference` measures both in the units of the machine's speed at the run's start."""
    return replay(engine, [replace(r, arrival=0.0) for r in requests])


def saturation_throughput(engine: ServingEngine, requests: list[Request]) -> float:
    """`engine`'s capacity on a workload, in requests per second of its clock: the finished
    requests over the makespan of its `saturation_replay` of `requests`."""
    return summarize(list(saturation_replay(engine, requests).records.values())).throughput_rps

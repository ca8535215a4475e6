"""What the engine measured: one record per request, and the aggregates over them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..core import active, compiled_module
from ..request import Request


@dataclass(slots=True)
class RequestRecord:
    """Timeline of one request in engine seconds. Times not reached yet are NaN."""

    id: int
    bidder: int
    arrival: float
    prompt_len: int
    output_len: int
    urgency: float
    value: float
    bid: float
    admit: float = math.nan
    first_token: float = math.nan
    finish: float = math.nan
    cached_tokens: int = 0
    computed_tokens: int = 0
    """Tokens the engine computed for it: its uncached prompt, plus what it recomputed after retractions."""
    retractions: int = 0
    """Times it was sent back to the waiting queue to make room (`EngineConfig.reservation`), or
    for a request of higher priority (SGLang counts a preemption as a retraction)."""
    preemptions: int = 0
    """Of its retractions, those for a request of higher priority (`EngineConfig.priority_preemption`)."""
    rejected: str | None = None

    @classmethod
    def of(cls, r: Request) -> RequestRecord:
        return cls(r.id, r.bidder, r.arrival, r.prompt_len, r.output_len, r.urgency, r.value, r.bid)

    @property
    def finished(self) -> bool:
        return not math.isnan(self.finish)

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def latency(self) -> float:
        return self.finish - self.arrival


@dataclass(frozen=True)
class Metrics:
    """Aggregates over finished requests. Times in s, rates per s of engine time."""

    finished: int
    rejected: int
    unfinished: int
    hit_rate: float
    """Cached prompt tokens / prompt tokens, over finished requests."""
    mean_ttft: float
    p50_ttft: float
    p99_ttft: float
    mean_latency: float
    p50_latency: float
    p99_latency: float
    throughput_rps: float
    """Finished requests per second between the first arrival and the last finish."""
    throughput_tps: float
    """Prompt plus output tokens of finished requests per second, same span."""
    makespan: float
    retractions: int
    """Retractions over all requests."""


def rejections(records: Mapping[int, RequestRecord]) -> dict[int, str]:
    """The engine's reason for each request it rejected, by request id, in id order."""
    return {i: records[i].rejected for i in sorted(records) if records[i].rejected is not None}


def summarize(records: list[RequestRecord]) -> Metrics:
    """The aggregates of `records`; their columns read in one compiled pass on the compiled core
    (`_core.RecordColumns`, for records of exactly `RequestRecord` with plain fields), by
    `_columns` otherwise."""
    columns = None if _compiled_columns is None or active() != "compiled" else _compiled_columns.read(
        records, RequestRecord)
    finished, rejected, retractions, ttft, lat, prompt, cached, output, span = columns or _columns(records)
    nan = math.nan
    if not finished:
        return Metrics(0, rejected, len(records) - rejected, nan, nan, nan, nan, nan, nan, nan, 0.0, 0.0, 0.0,
                       retractions)
    return Metrics(
        finished=finished,
        rejected=rejected,
        unfinished=len(records) - finished - rejected,
        hit_rate=cached / prompt,
        mean_ttft=float(ttft.mean()),
        p50_ttft=float(np.percentile(ttft, 50)),
        p99_ttft=float(np.percentile(ttft, 99)),
        mean_latency=float(lat.mean()),
        p50_latency=float(np.percentile(lat, 50)),
        p99_latency=float(np.percentile(lat, 99)),
        throughput_rps=finished / span if span > 0 else math.inf,
        throughput_tps=(prompt + output) / span if span > 0 else math.inf,
        makespan=span,
        retractions=retractions,
    )


def _columns(records: list[RequestRecord]) -> tuple:
    """What `summarize` reads of `records`: (finished, rejected, retractions, ttft, latency, prompt,
    cached, output, span) of the finished ones (ttft and latency arrays; span None without one)."""
    done = [r for r in records if r.finished]
    rejected = sum(r.rejected is not None for r in records)
    retractions = sum(r.retractions for r in records)
    if not done:
        return 0, rejected, retractions, None, None, 0, 0, 0, None
    return (len(done), rejected, retractions, np.array([r.ttft for r in done]), np.array([r.latency for r in done]),
            sum(r.prompt_len for r in done), sum(r.cached_tokens for r in done), sum(r.output_len for r in done),
            max(r.finish for r in done) - min(r.arrival for r in done))


_compiled_columns = None if compiled_module() is None else compiled_module().RecordColumns()
"""The compiled reader of `summarize`'s columns, where the extension is built."""

"""Requests that have not arrived yet: what the engine's clock lets in, in arrival order."""

from __future__ import annotations

import heapq
import math
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from ..request import Request
from .records import RequestRecord


def check_batch(requests: Sequence[Request], records: Mapping[int, object]) -> None:
    """TypeError unless every entry of a submitted batch is a `Request`, ValueError if an id repeats
    one already submitted (in `records`) or one earlier in the batch: checked whole before any is
    taken, so a refused batch leaves nothing submitted and can be fixed and submitted again."""
    seen: set[int] = set()
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(f"requests must be Request objects, got {type(r).__name__} {r!r}")
        if r.id in records or r.id in seen:
            raise ValueError(f"request {r.id}: duplicate request id")
        seen.add(r.id)


def refuse_streamed(entry: object) -> None:
    """TypeError for an entry of a lazily read workload that is not a `Request`. None too: a stream
    ends where it is exhausted, so a None in it is a workload's mistake, not its end, and the
    requests after it would be lost unseen."""
    raise TypeError(f"a lazily read workload must yield Request objects, got {type(entry).__name__} {entry!r:.80}")


_END = object()
"""What `next` gives for an exhausted stream, which no entry can be."""


class Arrivals:
    """Submitted requests until their arrival time: a heap of those given as a list, and one lazily
    read stream (a long trace is never held in memory whole).

    Args:
        records: the engine's records, request id -> `RequestRecord`; every request gets its
            record here as it is submitted or read from the stream, and a duplicate id is refused
            (ValueError). A dict rather than a callback into the engine, so the engine and its
            arrivals form no reference cycle: a finished episode's engine is freed by reference
            counting, not left to the cyclic garbage collector.
    """

    def __init__(self, records: dict[int, RequestRecord]) -> None:
        self._records = records
        self._pending: list[tuple[float, int, Request]] = []
        self._source: Iterator[Request] | None = None
        self._lookahead: Request | None = None
        self.upstream: Callable[[], float] | None = None
        """When requests not submitted here yet may still arrive (a cluster's router holds them
        until their arrival time): the next such time. None: nothing is held upstream."""

    def submit(self, requests: Request | Iterable[Request]) -> None:
        """A list (any Sequence) is taken at once, in any order, checked whole first (`check_batch`).
        Any other iterable is read lazily as `due` reaches each arrival; it must be sorted by
        arrival. Only its first entry is read here: checking the rest would read the stream whole,
        which its laziness is for not doing, so an entry that is not a Request, a repeated id or an
        arrival out of order raises only when the clock reaches it (from the step that reads it),
        after the requests before it were let in."""
        if isinstance(requests, Request):
            requests = [requests]
        if isinstance(requests, Sequence):
            check_batch(requests, self._records)
            for r in requests:
                self._record(r)
                heapq.heappush(self._pending, (r.arrival, r.id, r))
            return
        if self._source is not None:
            raise RuntimeError("a lazily read workload is already being replayed")
        self._source = iter(requests)
        self._advance_source()

    def next_time(self) -> float:
        """Arrival time of the next request; inf when none is left."""
        t = self._pending[0][0] if self._pending else math.inf
        if self._lookahead is not None:
            t = min(t, self._lookahead.arrival)
        return t

    def next_possible(self) -> float:
        """Earliest time a request may arrive here: the next submitted one, or the next one held
        upstream, which may be routed here (`upstream`)."""
        t = self.next_time()
        return t if self.upstream is None else min(t, self.upstream())

    @property
    def pending(self) -> int:
        """Submitted requests that have not arrived yet (the lazily read stream's next one counts;
        the rest of the stream is unknown)."""
        return len(self._pending) + (self._lookahead is not None)

    def pending_requests(self) -> list[Request]:
        """The requests `pending` counts."""
        out = [entry[2] for entry in self._pending]
        return out + [self._lookahead] if self._lookahead is not None else out

    def due(self, now: float) -> list[Request]:
        """The requests that have arrived by `now`, earliest first, removed from here."""
        # The submitted ones, then the stream's. Called at every engine iteration, most of which
        # let in nothing: two checks then.
        out, pending = [], self._pending
        while pending and pending[0][0] <= now:
            out.append(heapq.heappop(pending)[2])
        while self._lookahead is not None and self._lookahead.arrival <= now:
            out.append(self._lookahead)
            self._advance_source()
        return out

    def _advance_source(self) -> None:
        prev, entry = self._lookahead, next(self._source, _END)
        if not isinstance(entry, Request):
            self._lookahead = self._source = None  # the stream ends, exhausted or refused
            if entry is not _END:
                refuse_streamed(entry)
            return
        self._lookahead = entry
        if prev is not None and self._lookahead.arrival < prev.arrival:
            raise ValueError(
                f"request {self._lookahead.id}: lazily read workloads must be sorted by arrival "
                f"({self._lookahead.arrival} after {prev.arrival})"
            )
        self._record(self._lookahead)

    def _record(self, r: Request) -> None:
        if r.id in self._records:
            raise ValueError(f"request {r.id}: duplicate request id")
        self._records[r.id] = RequestRecord.of(r)

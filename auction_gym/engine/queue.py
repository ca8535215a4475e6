"""The engine's waiting queue: requests in the order they joined it, what a retracted one
recomputes, and the smallest memory any waiting request needs.

The order is SGLang's waiting list's (0.5.23, `Scheduler._add_request_to_queue`): arrivals are
appended first come, first served, and a retracted request is appended at the end, behind
everything that waits when it is retracted (not back in its arrival place); a policy that SGLang
sorts in place (`lpm`, `dfs-weight`) leaves its order for the next round (`reorder`).

Invariants (`check`): `requests` holds each waiting request once; `need` has exactly their ids; every
(need, id) of `need` is on the heap, which also holds stale entries (skipped when they reach the
top, and dropped in bulk when they outnumber the live ones).
"""

from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np

from ..request import Request
from ..scheduler.base import fcfs_key
from .in_batch import prompt_head


class WaitingQueue:
    """Requests waiting for admission, in the order they joined; see the module docstring.

    A request's need is the smallest reservation it could be admitted with (1 token plus its
    output reservation, in tokens); the engine computes it and the queue keeps the least of them,
    so an admission round that nothing could pass is skipped without ordering the queue.
    """

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.need: dict[int, int] = {}
        """Request id -> its smallest possible reservation (tokens)."""
        self._heap: list[tuple[int, int]] = []  # (need, id), with stale entries
        self._resume: dict[int, np.ndarray] = {}  # retracted request id -> prompt + output so far
        self._heads: dict[int, tuple[int, bytes | None]] = {}  # id -> (n, prompt_head(its tokens, n))

    def __len__(self) -> int:
        return len(self.requests)

    def tokens(self, r: Request) -> np.ndarray:
        """What `r`'s prefill computes: its prompt, or after a retraction prompt + output so far."""
        return self._resume.get(r.id, r.tokens)

    def head(self, r: Request, n: int) -> bytes | None:
        """`in_batch.prompt_head` of `r`'s tokens (see `tokens`) at `n`, kept while `r` waits: a
        waiting request's tokens do not change, and the in-batch check asks for it every round."""
        kept = self._heads.get(r.id)
        if kept is None or kept[0] != n:
            kept = self._heads[r.id] = (n, prompt_head(self.tokens(r), n))
        return kept[1]

    def arrive(self, arrived: Sequence[Request], needs: Sequence[int]) -> None:
        """Append new arrivals; each arrived after everything waiting, so FCFS order holds."""
        self.requests.extend(sorted(arrived, key=fcfs_key))
        for r, n in zip(arrived, needs):
            self._set_need(r.id, n)

    def put_back(self, r: Request, tokens: np.ndarray, need: int) -> None:
        """A retracted request waits again, at the end of the queue (as in SGLang), to recompute `tokens`."""
        self._resume[r.id] = tokens
        self.requests.append(r)
        self._set_need(r.id, need)

    def reorder(self, order: Sequence[Request]) -> None:
        """Keep the waiting requests in `order`, a permutation of them (the caller's guarantee, which
        `check` verifies), as SGLang's in-place sort of its waiting list leaves it."""
        self.requests = list(order)

    def remove(self, taken: Sequence[Request]) -> None:
        """Take admitted requests (by identity: Request has no value equality) off the queue."""
        if len(taken) == 1:
            self.requests.remove(taken[0])
        elif taken:
            ids = {r.id for r in taken}
            self.requests = [r for r in self.requests if r.id not in ids]
        for r in taken:
            self._resume.pop(r.id, None)
            self._heads.pop(r.id, None)
            del self.need[r.id]

    def smallest_need(self) -> int:
        """The least need of any waiting request; the queue must not be empty."""
        heap, need = self._heap, self.need
        while need.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0]

    def check(self) -> None:
        """Raise AssertionError if an invariant of the module docstring does not hold."""
        assert len({r.id for r in self.requests}) == len(self.requests), "a request waits twice"
        assert set(self.need) == {r.id for r in self.requests}, "needs and waiting requests differ"
        assert set(self.need.items()) <= {(i, n) for n, i in self._heap}, "a need is missing from the heap"
        assert set(self._resume) <= set(self.need), "resume tokens of a request that does not wait"
        assert set(self._heads) <= set(self.need), "a head kept for a request that does not wait"
        waiting = {r.id: r for r in self.requests}
        for i, (n, h) in self._heads.items():
            assert h == prompt_head(self.tokens(waiting[i]), n), "a kept head differs from the request's tokens"

    def _set_need(self, rid: int, n: int) -> None:
        self.need[rid] = n
        if len(self._heap) > 2 * len(self.need) + 64:  # drop the stale entries now and then
            self._heap = [(v, i) for i, v in self.need.items()]
            heapq.heapify(self._heap)
        else:
            heapq.heappush(self._heap, (n, rid))

"""The engine's waiting queue: requests in the order they joined it, what a retracted one
recomputes, and the smallest memory any waiting request needs.

The order is SGLang's waiting list's (0.5.23, `Scheduler._add_request_to_queue`): arrivals are
appended first come, first served, and a retracted request is appended at the end, behind
everything that waits when it is retracted (not back in its arrival place); a policy that SGLang
sorts in place (`lpm`, `dfs-weight`) leaves its order for the next round (`reorder`).

Each request that joins is numbered in joining order (`joined`): SGLang's `wait_queue_entry_time`,
which orders the running requests a priority preemption picks from (latest entry first within a
priority).

The queue also reports how its membership changed (`take_changes`): the engine hands that to the
waiting requests' prefix refresh every admission round, so nothing downstream compares the whole
queue with the last round's to find the few requests that joined or left.

Invariants (`check`): `requests` holds each waiting request once; `need` has exactly their ids; every
(need, id) of `need` is on the heap, which also holds stale entries (skipped when they reach the
top, and dropped in bulk when they outnumber the live ones); the changes not yet taken are the
difference between `requests` and the queue as it was when they were last taken (`check` verifies
that the requests reported as joined wait and those reported as left do not).
"""

from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np

from ..request import Request, fcfs_key
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
        self.joined: dict[int, int] = {}
        """Request id -> when it joined the queue, as a count of joins (arrivals and put-backs)."""
        self._joins = 0
        # Since changes were last taken: the requests that joined (in the order they did) and those
        # that left, net of each other (a request admitted and retracted in between did neither).
        self._joined: dict[Request, None] = {}
        self._left: set[Request] = set()

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
        arrived_in_order = sorted(arrived, key=fcfs_key)
        self.requests.extend(arrived_in_order)
        for r in arrived_in_order:
            self._join(r)
        for r, n in zip(arrived, needs):
            self._set_need(r.id, n)

    def put_back(self, r: Request, tokens: np.ndarray, need: int) -> None:
        """A retracted request waits again, at the end of the queue (as in SGLang), to recompute `tokens`."""
        self._resume[r.id] = tokens
        self.requests.append(r)
        self._join(r)
        self._set_need(r.id, need)

    def take_changes(self) -> tuple[list[Request], set[Request]]:
        """(joined, left) since the last call (since the queue was made, at the first): the
        requests that wait now and did not then, in the order they joined, and those that waited
        then and do not now. Starts over from the queue as it is."""
        joined, left = list(self._joined), self._left
        self._joined, self._left = {}, set()
        return joined, left

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
            if r in self._joined:
                del self._joined[r]
            else:
                self._left.add(r)
            self._resume.pop(r.id, None)
            self._heads.pop(r.id, None)
            del self.need[r.id]
            del self.joined[r.id]

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
        assert set(self.joined) == set(self.need), "join numbers and waiting requests differ"
        assert set(self.need.items()) <= {(i, n) for n, i in self._heap}, "a need is missing from the heap"
        assert set(self._resume) <= set(self.need), "resume tokens of a request that does not wait"
        assert set(self._heads) <= set(self.need), "a head kept for a request that does not wait"
        assert self._joined.keys() <= set(self.requests), "a request reported as joined does not wait"
        assert not self._left & set(self.requests), "a request reported as left waits"
        waiting = {r.id: r for r in self.requests}
        for i, (n, h) in self._heads.items():
            assert h == prompt_head(self.tokens(waiting[i]), n), "a kept head differs from the request's tokens"

    def _join(self, r: Request) -> None:
        self._joins += 1
        self.joined[r.id] = self._joins
        if r in self._left:  # it waited when changes were last taken: back, not new
            self._left.discard(r)
        else:
            self._joined[r] = None

    def _set_need(self, rid: int, n: int) -> None:
        self.need[rid] = n
        if len(self._heap) > 2 * len(self.need) + 64:  # drop the stale entries now and then
            self._heap = [(v, i) for i, v in self.need.items()]
            heapq.heapify(self._heap)
        else:
            heapq.heappush(self._heap, (n, rid))

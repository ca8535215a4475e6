"""A cluster of serving engines behind a router, on one clock (`ClusterEngine`).

Each replica is a whole engine (its own KV pool, radix cache, waiting queue and scheduler, the
same SGLang rules); the router assigns every request to one replica at its arrival time. The
cluster offers the engine interface the market drives (`submit`, `step`, `run`, `records`,
`waiting`, `now`, `cost`, `metrics`), so a market runs over it unchanged.

Event order. Each replica's clock is where its next iteration starts. `step()` takes the earliest
event: an arrival (routed, then handed to its replica) when no replica with work is earlier, else
one iteration of the earliest replica with work (ties: the lowest index), which it returns with
`Iteration.replica` set. Replicas without work are not stepped at all (a heap holds those with
work), so an idle replica costs nothing. A replica's decode iterations stop at the cluster's next
arrival, not only at its own (`Arrivals.upstream`): any arrival may be routed to it, and with one
replica the events are exactly the single engine's. A router reads a replica's state as of its
latest iteration end, which may lie up to one iteration past the arrival (a replica whose running
slots are all taken decodes up to its next finish without stopping for arrivals).
"""

from __future__ import annotations

import heapq
import math
from typing import Sequence

from ..engine import Iteration, RequestRecord, ServingEngine
from ..engine.arrivals import Arrivals
from ..engine.serving_engine import Replay
from ..request import Request
from .routers import Router


class ClusterEngine(Replay):
    """N serving engines, one router, one clock.

    Args:
        replicas: the engines, freshly built, nothing submitted to them (each with its own
            scheduler: each replica's auction keeps its own tree across rounds).
        router: picks each request's replica (`routers.ROUTERS`).

    Attributes:
        assignment: request id -> index of the replica it was routed to.
        records: every request's record, shared with the replica serving it.
    """

    def __init__(self, replicas: Sequence[ServingEngine], router: Router) -> None:
        if not replicas:
            raise ValueError("a cluster needs at least one replica")
        self.replicas = list(replicas)
        self.router = router
        self.config = self.replicas[0].config
        self.cost = self.replicas[0].cost
        self.records: dict[int, RequestRecord] = {}
        self.assignment: dict[int, int] = {}
        self.arrivals = Arrivals(self.records)
        for engine in self.replicas:
            engine.arrivals.upstream = self.arrivals.next_time
        self._active: list[tuple[float, int]] = []  # (replica clock, index) of replicas with work
        self._in_heap = [False] * len(self.replicas)

    @property
    def now(self) -> float:
        """The cluster's clock: the latest iteration end of any replica (s)."""
        return max(e.now for e in self.replicas)

    @property
    def waiting(self) -> list[Request]:
        """Every replica's waiting requests, replica after replica."""
        return [r for e in self.replicas for r in e.waiting]

    @property
    def running(self) -> list:
        return [run for e in self.replicas for run in e.running]

    def in_system(self) -> list[Request]:
        """Every replica's requests held and unfinished (`ServingEngine.in_system`), replica after
        replica."""
        return [r for e in self.replicas for r in e.in_system()]

    def step(
        self, multipliers: Sequence[float] | None = None, remaining: Sequence[float] | None = None
    ) -> Iteration | None:
        """Route the arrivals that come first, then run one iteration of the earliest replica with
        work, passing it `multipliers` and `remaining` (`ServingEngine.step`; budgets are global, so
        every replica's auction bids with the same); None when nothing is waiting, running or still to arrive
        anywhere."""
        while True:
            arrival = self.arrivals.next_time()
            if self._active and self._active[0][0] < arrival:
                break
            if math.isinf(arrival):
                return None
            self._route(self.arrivals.due(arrival))
        _, k = heapq.heappop(self._active)
        self._in_heap[k] = False
        it = self.replicas[k].step(multipliers, remaining)
        if it is None:
            return self.step(multipliers, remaining)  # it had nothing left after all: the next event
        it.replica = k
        self._push(k)
        return it

    def _route(self, arrived: list[Request]) -> None:
        for r in arrived:
            k = self.router.route(r, self.replicas, r.arrival)
            engine = self.replicas[k]
            engine.submit([r])
            engine.records[r.id] = self.records[r.id]  # one record, read by the cluster and the replica
            self.assignment[r.id] = k
            self._push(k)

    def _push(self, k: int) -> None:
        if not self._in_heap[k]:
            self._in_heap[k] = True
            heapq.heappush(self._active, (self.replicas[k].now, k))

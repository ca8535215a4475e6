"""Fair share with locality: deficit-based longest prefix match (DLPM, arXiv 2501.14312). No payments.

Each bidder (a client) has a deficit counter, in tokens of service. An admission round orders the
queue as deficit round robin over LPM's order would serve it: walk the requests longest cached
prefix first and take each whose bidder's deficit is positive, charging it the request's service
(prompt + output tokens); when no waiting bidder has a positive deficit, every bidder with requests
waiting gets `quantum` more. So a bidder that has been served much waits while the others catch
up, and inside its share the cache's locality still decides.

Deficits are charged for what the engine actually admitted, not for the whole order (the engine
admits as memory allows): a request in the last round's queue and not in this one was admitted,
and its bidder's deficit is charged then. A bidder with nothing waiting has its deficit reset to 0,
as deficit round robin does, so credit is not banked while idle. The paper's D2LPM (across
replicas) is not simulated.
"""

from __future__ import annotations

from .._checks import is_int
from ..policy import AdmissionPolicy, WaitingRound
from ..request import Request

QUANTUM = 4096
"""Tokens of service a bidder's deficit gains per refill."""


def service(r: Request) -> int:
    """The tokens of service a request is charged: its prompt and its output."""
    return r.prompt_len + r.output_len


class DLPM(AdmissionPolicy):
    """Deficit-based longest prefix match per bidder; see the module docstring.

    Args:
        quantum: tokens of deficit each waiting bidder gains per refill (int >= 1).
    """

    name = "dlpm"

    def __init__(self, quantum: int = QUANTUM) -> None:
        if not (is_int(quantum) and quantum >= 1):
            raise ValueError(f"quantum must be an int >= 1, got {quantum!r}")
        self.quantum = int(quantum)
        self.deficit: dict[int, float] = {}
        self._last: dict[int, Request] = {}  # the last round's queue by id

    def order_round(self, round: WaitingRound) -> list[Request]:
        queue = round.queue
        waiting = {r.id: r for r in queue}
        for rid, r in self._last.items():
            if rid not in waiting:  # admitted since the last round
                self.deficit[r.bidder] = self.deficit.get(r.bidder, 0.0) - service(r)
        self._last = waiting
        bidders = {r.bidder for r in queue}
        self.deficit = {b: self.deficit.get(b, 0.0) for b in bidders}
        self._refill(self.deficit)
        negated = [-n for n in round.prefix_lens]
        lpm = [queue[i] for i in sorted(range(len(queue)), key=negated.__getitem__)]
        return self._drr(lpm, dict(self.deficit))

    def _drr(self, lpm: list[Request], deficit: dict[int, float]) -> list[Request]:
        """The order deficit round robin takes `lpm` in, from a copy of the deficits."""
        order: list[Request] = []
        left = lpm
        while left:
            self._refill(deficit, {r.bidder for r in left})
            later = []
            for r in left:
                if deficit[r.bidder] > 0:
                    order.append(r)
                    deficit[r.bidder] -= service(r)
                else:
                    later.append(r)
            left = later
        return order

    def _refill(self, deficit: dict[int, float], bidders: set[int] | None = None) -> None:
        """Unless one of `bidders` (default: all of `deficit`) has a positive deficit, give each of
        them the quanta that make the first of them positive, as that many refills of all would."""
        bidders = deficit.keys() if bidders is None else bidders
        if not bidders or any(deficit[b] > 0 for b in bidders):
            return
        refills = min(int(-deficit[b] // self.quantum) + 1 for b in bidders)
        for b in bidders:
            deficit[b] += refills * self.quantum

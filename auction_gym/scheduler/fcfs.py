"""First come, first served: the queue's own order, blind to the cache.

As SGLang's `fcfs` (0.5.23, `SchedulePolicy.calc_priority`, which leaves its waiting list as it is), the
order is the engine's queue's (`auction_gym.engine.queue`): arrival order, with a retracted request
behind everything that waited when it was retracted. Given a queue of its own, a caller gets it back
as it passed it.
"""

from __future__ import annotations

from ..policy import AdmissionPolicy, WaitingRound
from ..request import Request


class FCFS(AdmissionPolicy):
    name = "fcfs"

    def order_round(self, round: WaitingRound) -> list[Request]:
        return list(round.queue)

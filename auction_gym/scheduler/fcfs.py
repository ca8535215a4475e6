"""First come, first served: the queue's own order, blind to the cache.

As SGLang's `fcfs` (0.5.23, `SchedulePolicy.calc_priority`, which leaves its waiting list as it is), the
order is the engine's queue's (`auction_gym.engine.queue`): arrival order, with a retracted request
behind everything that waited when it was retracted. Given a queue of its own, a caller gets it back
as it passed it.
"""

from __future__ import annotations

from typing import Sequence

from ..radix_cache import RadixCache
from ..request import Request


class FCFS:
    name = "fcfs"

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        return list(queue)

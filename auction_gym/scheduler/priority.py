"""Priority scheduling as SGLang ships it, and with locality as its users propose it. No payments.

`SGLangPriority` ("sglang_priority"): SGLang 0.5.23's `--enable-priority-scheduling` under its
`fcfs` policy (`schedule_policy.py`: the waiting list sorted by priority, then arrival; larger
values first, its default without `--schedule-low-priority-values-first`). SGLang allows priority
only with `fcfs` or `lof`, never with `lpm` (server-argument validation). Each round's decision
carries every waiting request's priority (`PriorityRound.priorities`), which the engine's rules read:
its preemption of a running request by a waiting one whose priority exceeds it by more than the
threshold (`EngineConfig.priority_preemption`) and its `priority` radix eviction
(`EngineConfig.radix_eviction_policy`). With both off (the defaults) this is SGLang with
`--disable-priority-preemption` and the default `lru` eviction.

`QoSLPM` ("qos_lpm"): priority, then the longest cached prefix, then arrival (sgl-project/sglang pull request #30507's
`qos-lpm` order, without its priority-weighted eviction).

A request's priority is an integer made from its bid (`priority_level`): in a market the bid is its
bidder's multiplier x its urgency, so a request's priority is what its bidder says it is worth per
second; in a replay, its own `bid`. Neither design charges: the round it decides
(`PriorityRound`) charges nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from operator import attrgetter
from typing import Sequence

from ..core import active, compiled_module
from ..policy import AdmissionPolicy, PriorityRound, WaitingRound, check_bids, round_bids
from ..request import Request

LEVELS_PER_DECADE = 10
"""Priority levels per factor 10 of bid: SGLang's default preemption threshold of 10 is then a
factor 10 in bid (an urgent request, median urgency 10, over a background one, 0.02)."""
LOWEST = -1000
"""The priority of a bid of 0 (a bidder out of budget): below every positive bid's."""
_request_id = attrgetter("id")


def priority_level(bid: float) -> int:
    """SGLang's integer priority of a request bidding `bid` (>= 0): round(LEVELS_PER_DECADE x
    log10(bid)), LOWEST for a bid of 0, and never below LOWEST. ValueError for a bid that is < 0 or
    NaN, OverflowError for inf."""
    if bid <= 0:
        if bid < 0:  # a bid or urgency changed after construction: not a bid of 0
            raise ValueError(f"bid must be finite and >= 0, got {bid!r}")
        return LOWEST
    level = round(LEVELS_PER_DECADE * math.log10(bid))
    return level if level > LOWEST else LOWEST  # not max(): called for every request of every round


class SGLangPriority(AdmissionPolicy):
    """Priority, then first come, first served; see the module docstring.

    Args:
        max_priority: the highest priority a request may claim (higher levels are cut to it), as an
            API bounds the values it accepts; None: unbounded. Priority is free here, so a bidder's
            best response is to claim it for every request; with a bound, bidders who all do so
            tie, and the order inside the tie (FCFS, or the cache under `qos_lpm`) is all that is left.
    """

    name = "sglang_priority"
    decides = True

    def __init__(self, max_priority: int | None = None) -> None:
        if max_priority is not None and (not isinstance(max_priority, int) or max_priority < LOWEST):
            raise ValueError(f"max_priority must be an int >= {LOWEST} or None, got {max_priority!r}")
        self.max_priority = max_priority
        self._compiled = compiled_module() if active() == "compiled" else None

    def decide_round(self, round: WaitingRound) -> PriorityRound:
        """The round over `queue`: higher priority first, the queue's order (FCFS) inside one."""
        queue = round.queue
        decided = self._compiled_round(round, None)
        if decided is not None:
            return decided
        levels = self._levels(queue, round.multipliers)
        # A stable sort, reversed: equal priorities keep the queue's order.
        order = [queue[i] for i in sorted(range(len(queue)), key=levels.__getitem__, reverse=True)]
        return PriorityRound(order, RoundPriorities(queue, levels))

    def _compiled_round(self, round: WaitingRound, lens: list[int] | None) -> PriorityRound | None:
        """The round the compiled core decides (ordered by priority, then by `lens` longest first
        when given, stably), for inputs it takes as they are; None otherwise (or on the Python core)."""
        if self._compiled is None:
            return None
        got = self._compiled.priority_round(round.queue, round.multipliers, self.max_priority, lens,
                                            LEVELS_PER_DECADE, LOWEST)
        return None if got is None else PriorityRound(got[0], RoundPriorities(round.queue, got[1]))

    def _levels(self, queue: Sequence[Request], multipliers: Sequence[float] | None) -> list[int]:
        """Each request's priority in the round (`priority_level` of its bid, at most `max_priority`)."""
        bids = round_bids(queue, multipliers)
        try:
            levels = [priority_level(b) for b in bids]
        except (TypeError, ValueError, OverflowError):  # a bid that is not a finite number
            check_bids(queue, bids)  # names the request
            raise
        if self.max_priority is None:
            return levels
        top = self.max_priority
        return [level if level < top else top for level in levels]


class QoSLPM(SGLangPriority):
    """Priority, then the longest cached prefix, then arrival; see the module docstring."""

    name = "qos_lpm"

    def __init__(self, max_priority: int | None = None) -> None:
        super().__init__(max_priority)

    def decide_round(self, round: WaitingRound) -> PriorityRound:
        """The round over `queue`: by (-priority, -cached prefix, queue position)."""
        queue = round.queue
        decided = self._compiled_round(round, round.prefix_lens)
        if decided is not None:
            return decided
        levels = self._levels(queue, round.multipliers)
        key = [(-p, -n) for p, n in zip(levels, round.prefix_lens)]
        order = [queue[i] for i in sorted(range(len(queue)), key=key.__getitem__)]
        return PriorityRound(order, RoundPriorities(queue, levels))


class RoundPriorities(Mapping):
    """Request id -> priority in one round (`PriorityRound.priorities`), its table built on the first
    lookup: the engine reads a round's priorities only with its priority rules on, and building
    the table for every round of a long queue would cost a tenth of a replay under `sglang_priority`."""

    __slots__ = ("_queue", "_levels", "_table")

    def __init__(self, queue: Sequence[Request], levels: list[int]) -> None:
        self._queue = tuple(queue)  # the engine's list changes after the round; a copy is cheap
        self._levels = levels
        self._table: dict[int, int] | None = None

    def _by_id(self) -> dict[int, int]:
        if self._table is None:
            self._table = dict(zip(map(_request_id, self._queue), self._levels))
        return self._table

    def __getitem__(self, rid: int) -> int:
        return self._by_id()[rid]

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_id())

    def __len__(self) -> int:
        return len(self._levels)

"""Longest prefix match first (SGLang's `lpm` policy).

Requests with more of their whole prompt in the cache go first. As SGLang 0.5.23
(`SchedulePolicy._sort_by_longest_prefix`) the sort is stable and in place on the waiting list, so
equal matches keep the list's order: the previous round's sorted order, less what was admitted,
with new arrivals and retracted requests appended (the engine keeps its queue so, `sorts_in_place`).
Given a queue of its own, a caller gets ties in the order it passed. The match is of the whole
prompt, as SGLang's policy matches it (the engine reuses at most all but the last token).

By default there is no fallback to FCFS for long queues: the policy is the same at every queue
length, so comparisons across loads compare one policy. SGLang's `lpm` (`WAITING_QUEUE_PREFIX_MATCH_MAX`)
switches to its `fcfs` branch whenever more than 128 requests wait (`len(queue) > 128`; the same cut
applies to its `hrrn`, not to `dfs-weight`), which leaves the list as the last sort left it:
`make_scheduler("lpm", fcfs_above=128)` does that (`SGLANG_FCFS_ABOVE` names the 128). Matching does
not refresh LRU times (see `prefix_matcher`); keeping what waits warm is `WaitingPrefixes`'s job,
whose lengths the engine passes with the round (`WaitingRound.prefix_lens`), so a round costs one sort of the queue
(nearly sorted already: Timsort's O(n) case), not a match of every waiting request. On the compiled
core a round with the engine's lengths is sorted in C++ (`csrc/lpm_orders.cpp`), this module's sort
staying the reference and the fallback (docs/design.md section 8).
"""

from __future__ import annotations

from .._checks import is_int
from ..core import active, compiled_module
from ..policy import AdmissionPolicy, WaitingRound
from ..request import Request

SGLANG_FCFS_ABOVE = 128
"""SGLang's `WAITING_QUEUE_PREFIX_MATCH_MAX`: its `lpm` orders FCFS when more requests than this wait."""


class LPM(AdmissionPolicy):
    """Longest prefix match first; see the module docstring.

    Args:
        fcfs_above: leave the queue's order as it is when more than this many requests wait
            (SGLang: `SGLANG_FCFS_ABOVE`); None, the default, never does.
    """

    name = "lpm"
    sorts_in_place = True
    """SGLang sorts its waiting list in place: the next round starts from this round's order."""

    def __init__(self, fcfs_above: int | None = None) -> None:
        if fcfs_above is not None and not (is_int(fcfs_above) and fcfs_above >= 0):
            raise ValueError(f"fcfs_above must be None or an int >= 0, got {fcfs_above!r}")
        self.fcfs_above = None if fcfs_above is None else int(fcfs_above)
        self._compiled = active() == "compiled"  # a flag, not the module: the policy stays copyable

    def in_batch_deprioritizes(self, waiting: int) -> bool:
        """Whether SGLang's in-batch prefix check reorders a queue of `waiting` requests: yes, as
        SGLang's `lpm` sorts by it, unless above the FCFS cut (where SGLang's policy is `fcfs`)."""
        return self._matches(waiting)

    def order_round(self, round: WaitingRound) -> list[Request]:
        queue = round.queue
        if not self._matches(len(queue)):
            return list(queue)  # SGLang's `fcfs` branch: no match, no sort
        if self._compiled and round.length_of is not None \
                and (out := compiled_module().lpm_order(queue, round.length_of)) is not None:
            return out
        negated = [-n for n in round.prefix_lens]
        return [queue[i] for i in sorted(range(len(queue)), key=negated.__getitem__)]  # stable

    def _matches(self, waiting: int) -> bool:
        return self.fcfs_above is None or waiting <= self.fcfs_above

"""k-LPM (Dexter et al., "LLM Query Scheduling with Prefix Reuse and Latency Constraints", NeurIPS
2025): the oldest waiting request, then k - 1 longest-prefix-match picks, and again.

LPM alone maximises prefix reuse but can starve a request whose prefix is cold; FCFS bounds every
wait but reuses nothing on purpose. k-LPM interpolates without money: out of every k admissions one
goes to the oldest waiting request, so the oldest is never more than k - 1 admissions from being
served, whatever is cached. k = 1 is FCFS; as k grows it approaches LPM.

The cycle runs over admissions, not rounds: a round's order continues the cycle where the last
round's admissions left it (the requests that left the queue since the last round were admitted,
since the engine removes a request from the queue only by admitting it). LPM picks are by longest
cached prefix, ties by arrival (as `lpm`); matching does not refresh LRU times (`prefix_matcher`).
On the compiled core the arrival sort and the cycle run in C++ (`csrc/lpm_orders.cpp`), this
module's sort and loop staying the reference and the fallback (docs/design.md section 8).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .._checks import check_count
from ..core import active, compiled_module
from ..policy import AdmissionPolicy, WaitingRound
from ..radix_cache import TreeNode
from ..request import Request
from .base import fcfs_key
from .queue_matcher import QueueMatcher

DEFAULT_K = 4
"""Three LPM picks per FCFS pick: mostly cache-driven, with a bounded wait for cold prefixes. The
paper sweeps k; pass another value as `make_scheduler("klpm", k=...)`."""


class KLPM(AdmissionPolicy):
    """k-LPM; see the module docstring.

    Args:
        k: admissions per cycle (>= 1): one oldest-first pick, then k - 1 longest-prefix picks.
    """

    name = "klpm"
    in_batch = True

    def __init__(self, k: int = DEFAULT_K) -> None:
        self.k = check_count("k", k)
        self._matcher = QueueMatcher()
        self._phase = 0  # position in the cycle of the next admission: 0 = the oldest's turn
        self._last: set[int] = set()
        self._compiled = active() == "compiled"  # a flag, not the module: the policy stays copyable

    def order_round(self, round: WaitingRound) -> list[Request]:
        queue = round.queue
        match, told = self._matcher.update(round)
        self._phase = (self._phase + self._admitted(queue, told)) % self.k
        return self._ordered(queue, match, self._phase)

    def first_round_order(self, round: WaitingRound, peeks: Sequence[tuple[int, TreeNode]]) -> list[Request] | None:
        """The order a fresh k-LPM gives `round`, its first (the cycle at the oldest's turn), from
        `peeks`, each request's `RadixCache.peek` of its whole prompt: made without the matcher,
        which would keep what a next round reads (`reproduce` orders queue snapshots so). On a cache
        of one-token pages only, where the longest cached prefix of all but a prompt's last token,
        what k-LPM matches, is min(whole prompt's, length - 1); None elsewhere, for a queue with an
        id twice, and for a subclass, which may order otherwise (`admit` then)."""
        if round.cache.page_size != 1 or type(self) is not KLPM:
            return None
        # min(w, length - 1) by a comparison (w is never longer than the prompt): min() costs more
        reusable = {r.id: (w - 1 if w and w == len(r.tokens) else w,) for r, (w, _) in zip(round.queue, peeks)}
        return self._ordered(round.queue, reusable, 0) if len(reusable) == len(round.queue) else None

    def _ordered(self, queue: list[Request], match: Mapping[int, tuple], phase: int) -> list[Request]:
        """`queue` in k-LPM's order from the cycle's `phase`, `match[r.id][0]` each request's
        cached prefix."""
        if self._compiled and (out := compiled_module().klpm_order(queue, match, phase, self.k)) is not None:
            return out
        by_arrival = sorted(queue, key=fcfs_key)
        longer = [-match[r.id][0] for r in by_arrival]
        by_match = sorted(range(len(by_arrival)), key=longer.__getitem__)  # stable: ties by arrival
        # Both lists name requests by their place in `by_arrival`; `taken` marks the places picked.
        out: list[Request] = []
        taken = [False] * len(by_arrival)
        oldest = longest = 0
        k = self.k
        for _ in by_arrival:
            if phase == 0:
                while taken[oldest]:
                    oldest += 1
                pick = oldest
            else:
                while taken[by_match[longest]]:
                    longest += 1
                pick = by_match[longest]
            out.append(by_arrival[pick])
            taken[pick] = True
            phase = (phase + 1) % k
        return out

    def _admitted(self, queue: list[Request], told: tuple[list[Request], set[Request]] | None) -> int:
        """How many of the last round's ids wait no more (admitted since), the last round's ids
        brought to `queue`'s: from the changes the matcher was told where it was (waiting ids are
        unique, so an id left unless a joining request has it), else from the queue's ids."""
        if told is None:
            ids = {r.id for r in queue}
            gone = len(self._last - ids)
            self._last = ids
            return gone
        joined = {r.id for r in told[0]}
        left = {r.id for r in told[1]} - joined
        gone = len(left & self._last)
        self._last -= left
        self._last |= joined
        return gone

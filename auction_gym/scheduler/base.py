"""What the policies without money share (`fcfs_key`), and the older names of the policy interface.

The interface is `auction_gym.policy` (`AdmissionPolicy`, `WaitingRound`, `Decision`); the factory
is `auction_gym.registry.make_scheduler`. `Scheduler` and `Auction`, the protocols a policy was
written to before, are deprecated names of `AdmissionPolicy` (each warns once); a policy written
to them still runs (`AdmissionPolicy.adopt`).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

from .._checks import within_int64
from ..policy import AdmissionPolicy, Decision, WaitingRound, round_bids
from ..radix_cache import RadixCache
from ..registry import make_scheduler, scheduler_names
from ..request import Request, fcfs_key

__all__ = [
    "Decision", "admission_order", "decision_priority", "fcfs_key", "in_batch_applies", "make_scheduler",
    "round_bids", "scheduler_names",
]

_RENAMED = {"Scheduler": AdmissionPolicy, "Auction": AdmissionPolicy}
_warned: set[str] = set()


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        if name not in _warned:
            _warned.add(name)
            warnings.warn(f"auction_gym.scheduler.{name} is deprecated: use auction_gym.policy.AdmissionPolicy",
                          DeprecationWarning, stacklevel=2)
        return _RENAMED[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def admission_order(
    policy: Any, queue: Sequence[Request], cache: RadixCache,
    multipliers: Sequence[float] | None = None, remaining: Sequence[float] | None = None,
) -> tuple[list[Request], Decision | None]:
    """`policy`'s admission order of `queue` outside an engine, and the round it decided (None for
    a policy without money): `AdmissionPolicy.admit` of the round."""
    return AdmissionPolicy.adopt(policy).admit(WaitingRound(queue, cache, multipliers, remaining))


def decision_priority(decision: Decision | None) -> Callable[[Request], int]:
    """A request's priority in the round `decision` decided (its `priorities`; 0 when it has none,
    or for a policy without money, `decision` None). Reading a priority that is not an int within
    64 bits raises ValueError: SGLang's request priority is an integer, and the compiled engine and
    cache hold it in 64 bits."""
    priorities = decision.priorities if decision is not None else None
    if not priorities:
        return lambda r: 0

    def priority(r: Request) -> int:
        p = priorities.get(r.id, 0)
        if type(p) is not int or not within_int64(p):
            raise ValueError(f"request {r.id}: priority must be an int within 64 bits (SGLang's is an integer), "
                             f"got {p!r}")
        return p

    return priority


def in_batch_applies(scheduler: Any, waiting: int) -> bool:
    """Whether SGLang's in-batch prefix check reorders `scheduler`'s queue of `waiting` requests
    (`AdmissionPolicy.in_batch_deprioritizes`)."""
    return AdmissionPolicy.adopt(scheduler).in_batch_deprioritizes(waiting)

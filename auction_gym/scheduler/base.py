"""The scheduler interface: given the waiting queue and the cache, the admission order.

Every policy that orders the queue (cache-aware ones without money here, the auctions of
`auction_gym.mechanism`) is a `Scheduler` and is found by name through `make_scheduler`.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Callable, Protocol, Sequence, runtime_checkable

from ..radix_cache import RadixCache
from ..registry import MechanismEntry, find_mechanism, get_mechanism, mechanism_names, register_mechanism
from ..request import Request


@runtime_checkable
class Scheduler(Protocol):
    """Orders a waiting queue for admission; first = admitted first.

    `order` must return a permutation of `queue`. It reads the cache without refreshing LRU times
    (`cache.peek`, or `prefix_matcher.PrefixMatcher`; a peek may split nodes, as SGLang's policy
    matches do) and must not insert, lock or evict: keeping the waiting requests' prefixes warm is
    one rule for every policy, `waiting.WaitingPrefixes`, which the engine runs once per admission
    round before `order`. The engine passes its queue's order: first come, first served (`fcfs_key`),
    a retracted request at the end (`auction_gym.engine.queue`).

    Optionally, `in_batch_deprioritizes(waiting) -> bool`: whether SGLang's in-batch prefix check
    applies to a queue of `waiting` requests (`lpm`: not above its FCFS cut); when it does, the
    engine moves the requests it deprioritizes behind the others in `order`'s result
    (`auction_gym.engine.in_batch`). Without the method, the registry's `in_batch` decides
    (`in_batch_applies`).

    Optionally, `sorts_in_place = True`: SGLang sorts its waiting list in place under this policy,
    so the engine keeps its queue in the order `order` returned (less what it admits, new arrivals
    and retracted requests appended), and the next round's `queue` starts from it (`lpm`,
    `dfs_weight`: their ties then follow the previous round's order, as in SGLang).

    Optionally, `attach_waiting_prefixes(prefixes)`: the engine calls it once, when it is built,
    with that `WaitingPrefixes`; in `order`, `prefixes.lengths(queue, cache)` then gives every
    waiting request's cached prefix length (whole prompt) without a match of the queue of its own
    (None when the queue or the cache is not the one last refreshed).
    """

    name: str

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]: ...


def register_scheduler(name: str) -> Callable[[Callable[..., Scheduler]], Callable[..., Scheduler]]:
    """Class decorator: register a scheduler as mechanism `name` (`auction_gym.registry`, the one
    registry; the summary is the first line of its docstring)."""

    def decorate(factory: Callable[..., Scheduler]) -> Callable[..., Scheduler]:
        summary = (factory.__doc__ or name).strip().splitlines()[0]
        register_mechanism(MechanismEntry(name, factory, summary))
        return factory

    return decorate


def in_batch_applies(scheduler: Scheduler, waiting: int) -> bool:
    """Whether SGLang's in-batch prefix check reorders `scheduler`'s queue of `waiting` requests:
    its own `in_batch_deprioritizes` if it has one, else its registry entry's `in_batch` (False
    for a policy the registry does not know)."""
    own = getattr(scheduler, "in_batch_deprioritizes", None)
    if own is not None:
        return own(waiting)
    entry = find_mechanism(scheduler.name)
    return entry is not None and entry.in_batch


def scheduler_names() -> list[str]:
    """Every registered scheduler name (`auction_gym.registry`), sorted."""
    return sorted(mechanism_names())


def make_scheduler(name: str, **kwargs) -> Scheduler:
    """Build the scheduler registered under `name` with `kwargs`; an unknown name lists the valid ones."""
    try:
        entry = get_mechanism(name)
    except ValueError:
        raise ValueError(f"unknown scheduler {name!r}; valid names: {', '.join(scheduler_names())}") from None
    return entry.factory()(**kwargs)


fcfs_key: Callable[[Request], tuple[float, int]] = attrgetter("arrival", "id")
"""First come, first served; equal arrivals by id, so every order is deterministic."""

"""The scheduler interface: given the waiting queue and the cache, the admission order.

Every policy that orders the queue (cache-aware ones without money here, the auctions of
`auction_gym.mechanism`) is a `Scheduler` and is found by name through `make_scheduler`.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Callable, Protocol, Sequence, runtime_checkable

from ..radix_cache import RadixCache
from ..request import Request


@runtime_checkable
class Scheduler(Protocol):
    """Orders a waiting queue for admission; first = admitted first.

    `order` must return a permutation of `queue`. It reads the cache without refreshing LRU times
    (`cache.peek`, or `prefix_matcher.PrefixMatcher`; a peek may split nodes, as SGLang's policy
    matches do) and must not insert, lock or evict: keeping the waiting requests' prefixes warm is
    one rule for every policy, `waiting.WaitingPrefixes`, which the engine runs once per admission
    round before `order`. The engine passes the queue in FCFS order (`fcfs_key`), so a stable sort
    breaks ties by it.

    Optionally, `attach_waiting_prefixes(prefixes)`: the engine calls it once, when it is built,
    with that `WaitingPrefixes`; in `order`, `prefixes.lengths(queue, cache)` then gives every
    waiting request's cached prefix length (whole prompt) without a match of the queue of its own
    (None when the queue or the cache is not the one last refreshed).
    """

    name: str

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]: ...


_REGISTRY: dict[str, Callable[..., Scheduler]] = {}


def register_scheduler(name: str) -> Callable[[Callable[..., Scheduler]], Callable[..., Scheduler]]:
    """Class decorator: make a scheduler constructible as `make_scheduler(name, **kwargs)`."""

    def decorate(factory: Callable[..., Scheduler]) -> Callable[..., Scheduler]:
        if name in _REGISTRY:
            raise ValueError(f"scheduler name {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return decorate


def scheduler_names() -> list[str]:
    return sorted(_REGISTRY)


def make_scheduler(name: str, **kwargs) -> Scheduler:
    """Build the scheduler registered under `name`; an unknown name lists the valid ones."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown scheduler {name!r}; valid names: {', '.join(scheduler_names())}"
        ) from None
    return factory(**kwargs)


fcfs_key: Callable[[Request], tuple[float, int]] = attrgetter("arrival", "id")
"""First come, first served; equal arrivals by id, so every order is deterministic."""

"""The admission policies' interfaces: given the waiting queue and the cache, the admission order.

A policy without money (FCFS and the cache-aware ones here) is a `Scheduler`: `order(queue,
cache)` returns the order. An auction (`auction_gym.mechanism`), a posted-price design
(`auction_gym.pricing`) or a priority order that reads the bids is an `Auction`: `decide(queue,
cache, multipliers)` returns the round it decided (a `Decision`: its admission order, and what it
charges), which the engine hands back on the `Iteration` it produced (docs/design.md section
2). Every policy is found by name through `make_scheduler`, the one factory.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from ..radix_cache import RadixCache
from ..registry import find_mechanism, get_mechanism, mechanism_names
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


class Decision(Protocol):
    """One admission round as a policy decided it: an auction's `auction_gym.mechanism.AuctionRound`,
    a posted-price design's `auction_gym.pricing.PostedRound`.

    Optionally, `priorities`: request id -> integer priority in the round (larger = more important),
    which the engine's SGLang priority rules read (`EngineConfig.priority_preemption`,
    `radix_eviction_policy`; `decision_priority`); a request it leaves out, or a decision without
    it, has priority 0."""

    def admission_order(self) -> list[Request]:
        """The waiting queue, first = admitted first."""
        ...

    def charges(self, admitted: Sequence[int], per_bidder: Sequence[int], seconds_per_unit: float) -> dict[int, float]:
        """Bidder -> what it owes (money, >= 0, before the market's budget cap) for the requests
        `admitted` (ids) from this round, `per_bidder[i]` of them bidder i's; `seconds_per_unit`
        turns an auction's completion units into seconds (docs/design.md section 3). A bidder that
        owes nothing may be left out."""
        ...


@runtime_checkable
class Auction(Protocol):
    """An admission policy that decides its rounds as values: an auction
    (`auction_gym.mechanism.AuctionMechanism`), a posted-price design (`auction_gym.pricing`), or a
    priority order that reads the bids (`scheduler.priority`).

    `decide(queue, cache, multipliers)` decides the round: with `multipliers` (a market's, one per
    bidder) request r bids multipliers[r.bidder] x r.urgency, without them its own `bid`. It
    returns the round as a value, which the engine puts on the iteration that admitted from it
    (`Iteration.decision`). The rules of `Scheduler.order` on the queue and the cache hold, and so
    do its optional `in_batch_deprioritizes`, `sorts_in_place` and `attach_waiting_prefixes`.

    Optionally, `reads_budgets = True`: `decide` then takes a fourth argument, `remaining`, each
    bidder's budget left before the round (money; a market's, as `multipliers` are), or None in a
    replay, where no budget binds (`auction_gym.pricing.tiers`, which steps a bidder down to the
    tiers it can pay). A design without it is never given budgets.
    """

    name: str

    def decide(
        self, queue: Sequence[Request], cache: RadixCache, multipliers: Sequence[float] | None = None
    ) -> Decision: ...


def round_bids(requests: Sequence[Request], multipliers: Sequence[float] | None) -> list[float]:
    """Each request's bid in a round (docs/design.md section 2): in a market (`multipliers`, one
    per bidder) its bidder's multiplier times its urgency, in a replay its own `bid`. ValueError
    unless every multiplier is finite and >= 0. The one definition every policy that reads bids uses."""
    if multipliers is None:
        return [r.bid for r in requests]
    if not all(0.0 <= a < math.inf for a in multipliers):
        raise ValueError(f"multipliers must be finite and >= 0, got {list(multipliers)}")
    return [multipliers[r.bidder] * r.urgency for r in requests]


def admission_order(
    policy: Scheduler | Auction, queue: Sequence[Request], cache: RadixCache,
    multipliers: Sequence[float] | None = None, remaining: Sequence[float] | None = None,
) -> tuple[list[Request], Decision | None]:
    """`policy`'s admission order of `queue` and, for an auction, the round it decided (`decide`,
    with `multipliers`, and `remaining` for one that `reads_budgets`); None for a policy without
    money, asked for its `order` alone."""
    decide = getattr(policy, "decide", None)
    if decide is None:
        return policy.order(queue, cache), None
    if getattr(policy, "reads_budgets", False):
        decision = decide(queue, cache, multipliers, remaining)
    else:
        decision = decide(queue, cache, multipliers)
    return decision.admission_order(), decision


def decision_priority(decision: Decision | None) -> Callable[[Request], int]:
    """A request's priority in the round `decision` decided (its `priorities`; 0 when it has none,
    or for a policy without money, `decision` None). Reading a priority that is not an int raises
    ValueError: SGLang's request priority is an integer."""
    priorities = getattr(decision, "priorities", None)
    if not priorities:
        return lambda r: 0

    def priority(r: Request) -> int:
        p = priorities.get(r.id, 0)
        if type(p) is not int:
            raise ValueError(f"request {r.id}: priority must be an int (SGLang's is an integer), got {p!r}")
        return p

    return priority


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


def make_scheduler(
    name: str, cost_model: str | None = None, request_overhead: float | None = None,
    tie_break: str | None = None, **kwargs: Any,
) -> Scheduler | Auction:
    """The policy registered under `name`, built with `kwargs`: the one factory of admission
    policies. `cost_model`, `request_overhead` and `tie_break` (docs/design.md section 3) go to an
    auction, and are dropped for a policy without money, which has no completion-time model, so a
    market builds any policy with its own settings; None leaves the auction's default. An unknown
    name lists the valid ones."""
    try:
        entry = get_mechanism(name)
    except ValueError:
        raise ValueError(f"unknown scheduler {name!r}; valid names: {', '.join(scheduler_names())}") from None
    if entry.is_auction:
        given = {"cost_model": cost_model, "request_overhead": request_overhead, "tie_break": tie_break}
        kwargs = {**{k: v for k, v in given.items() if v is not None}, **kwargs}
    return entry.factory()(**kwargs)


fcfs_key: Callable[[Request], tuple[float, int]] = attrgetter("arrival", "id")
"""First come, first served; equal arrivals by id, so every order is deterministic."""

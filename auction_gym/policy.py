"""The admission policy's interface: what the engine gives a policy each round and what it gets back.

The engine calls one method, `AdmissionPolicy.admit(round)`, with a `WaitingRound`: the waiting
queue, the cache, every waiting request's cached prefix length, the market's multipliers and
budgets left, and how the queue changed since the round before. It gets back the admission order
and, from a policy that decides rounds (an auction, a posted-price design, a priority order that
reads the bids), the `Decision`: a value that says the order, the requests' priorities and what
the round charges, with nothing to call back into the policy that made it (docs/design.md
section 2). What a policy can do is declared here with its default, never probed.

The factory, which builds a policy by name, is `auction_gym.registry.make_scheduler`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .request import Request

if TYPE_CHECKING:
    from .radix_cache import RadixCache

NO_PRIORITIES: Mapping[int, int] = MappingProxyType({})
_BIDDER = attrgetter("bidder")


def round_bids(requests: Sequence[Request], multipliers: Sequence[float] | None) -> list[float]:
    """Each request's bid in a round (docs/design.md section 2): in a market (`multipliers`, one
    per bidder) its bidder's multiplier times its urgency, in a replay its own `bid`. ValueError
    unless every multiplier is finite and >= 0 and every request's bidder has one. The one
    definition every policy that reads bids uses."""
    if multipliers is None:
        return [r.bid for r in requests]
    check_multipliers(multipliers)
    try:
        return [multipliers[r.bidder] * r.urgency for r in requests]
    except IndexError:
        check_bidders(requests, multipliers, "multipliers")  # names the request
        raise


def check_multipliers(multipliers: Sequence[float]) -> None:
    """ValueError unless every multiplier is finite and >= 0 (NaN fails too), TypeError unless they
    are a sequence of numbers: what `round_bids` checks, for a policy that checks a round's
    multipliers before it reads any bid."""
    try:
        for a in multipliers:  # a loop, not all() over a generator: every admission round runs it
            if not 0.0 <= a < math.inf:
                break
        else:
            return
    except (TypeError, ValueError):  # a scalar, a string, a multiplier that is not a number
        raise TypeError(f"multipliers must be a sequence of numbers, one per bidder, got {multipliers!r}") from None
    raise ValueError(f"multipliers must be finite and >= 0, got {list(multipliers)}")


def check_remaining(remaining: Sequence[float], multipliers: Sequence[float] | None) -> None:
    """ValueError unless `remaining`, a round's budget left per bidder, is a sequence of numbers
    >= 0 (inf: no budget binds that bidder; NaN fails), as many as `multipliers` where there are
    some: what a policy that reads budgets checks before what it holds moves, so that a short list
    is not read past its end, nor a NaN taken for a budget. (In a replay, without multipliers, a
    queue's bidder beyond the list is named by `check_bidders`.)"""
    try:
        n = len(remaining)
        valid = all(left >= 0.0 for left in remaining)  # one entry per bidder: a short loop
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ValueError(f"remaining must be a sequence of numbers >= 0 (budget left, inf where none binds), "
                         f"one per bidder, got {remaining!r}")
    if multipliers is not None and n != len(multipliers):
        raise ValueError(f"remaining has {n} budgets left for {len(multipliers)} multipliers: one per bidder")


def check_bidders(requests: Sequence[Request], per_bidder: Sequence[float], name: str,
                  bidders: Sequence[int] | None = None) -> None:
    """ValueError naming the first of `requests` whose bidder has no entry in `per_bidder`, a
    round's list called `name` ("multipliers", "budgets left (remaining)"), one per bidder; C-level
    passes unless one has none. `bidders`: each request's bidder as the caller read it (a posted
    design's, as the request joined: pricing/held.py); None: as the requests hold it now."""
    n = len(per_bidder)
    bidders = list(map(_BIDDER, requests)) if bidders is None else bidders
    if not bidders or 0 <= min(bidders) and max(bidders) < n:
        return
    late = next(i for i, b in enumerate(bidders) if not 0 <= b < n)
    # From None: raised while handling the IndexError of a lookup, which says less.
    raise ValueError(f"request {requests[late].id} is bidder {bidders[late]}'s, but the round has {n} {name}, "
                     "one per bidder") from None


def check_bids(requests: Sequence[Request], bids: Sequence[float]) -> None:
    """ValueError naming the first request whose bid in the round (`round_bids`) is not a finite
    number >= 0: what a policy that orders or prices by the bids checks, since a request's `bid` and
    `urgency` may be changed after construction and a product of finite numbers may overflow."""
    try:
        if 0.0 <= min(bids, default=0.0) and sum(bids) < math.inf:  # C-level passes; a NaN makes the sum NaN
            return
    except TypeError:
        pass  # a bid that is not a number, named below
    for r, b in zip(requests, bids):
        try:
            valid = 0.0 <= b < math.inf  # NaN fails too
        except TypeError:
            valid = False
        if not valid:
            raise ValueError(f"request {r.id}: bid must be finite and >= 0, got {b!r}")


@dataclass(frozen=True, slots=True)
class QueueDelta:
    """How the waiting queue of one refresh differs from an earlier one's, and the cached prefix
    lengths of the later one: what a structure kept over the queue (the radix auction's tree)
    needs to follow it without comparing the two queues."""

    joined: list[Request]
    """Requests waiting now that did not then."""
    left: list[Request]
    """Requests that waited then and do not now."""
    rematched: list[Request]
    """Requests waiting at both whose cached prefix was matched again since (its length may differ)."""
    length_of: Mapping[Request, int]
    """Every waiting request's cached prefix length now (tokens)."""

    @staticmethod
    def combine(deltas: Sequence[QueueDelta]) -> QueueDelta:
        """The one delta from the queue before the first of `deltas` to the queue after the last."""
        if len(deltas) == 1:
            return deltas[0]
        joined_since: dict[Request, None] = {}
        left_since: dict[Request, None] = {}
        rematched_since: dict[Request, None] = {}
        for delta in deltas:
            for r in delta.left:
                rematched_since.pop(r, None)
                if r in joined_since:  # joined and left in between: no change
                    del joined_since[r]
                else:
                    left_since[r] = None
            for r in delta.joined:
                if r in left_since:  # left and came back (retracted): waiting at both, matched again
                    del left_since[r]
                    rematched_since[r] = None
                else:
                    joined_since[r] = None
            for r in delta.rematched:
                if r not in joined_since:
                    rematched_since[r] = None
        return QueueDelta(list(joined_since), list(left_since), list(rematched_since), deltas[-1].length_of)


class WaitingRound:
    """One admission round as the engine passes it to its policy.

    `queue`: the waiting requests, first come, first served (a retracted request at the end), or
    the order the engine kept for a policy that `sorts_in_place`. `cache`: read it without
    refreshing LRU times (`cache.peek`), never insert, lock or evict. `multipliers` (one per
    bidder, a market's; None in a replay, where each request bids its own `bid`) and `remaining`
    (each bidder's budget left before the round, money; None where no budget binds). `changes`:
    how the queue differs from the one of the engine's previous round (`QueueDelta`), None when not
    known. `length_of`: each waiting request's cached prefix length (whole prompt), as the engine
    matched it for the round; without it (a round built outside an engine) `prefix_lens` reads
    the cache.
    """

    __slots__ = ("queue", "cache", "multipliers", "remaining", "changes", "_length_of", "_lens")

    def __init__(
        self, queue: Sequence[Request], cache: RadixCache, multipliers: Sequence[float] | None = None,
        remaining: Sequence[float] | None = None, changes: QueueDelta | None = None,
        length_of: Mapping[Request, int] | None = None,
    ) -> None:
        self.queue, self.cache, self.multipliers, self.remaining = queue, cache, multipliers, remaining
        self.changes, self._length_of = changes, length_of
        self._lens: list[int] | None = None

    # Read by a C-level getter, not a Python function: a radix auction's compiled round reads it every round.
    length_of = property(attrgetter("_length_of"), doc="""Each waiting request's cached prefix length as the
        engine matched it (None: not given).""")

    @property
    def prefix_lens(self) -> list[int]:
        """Each request's longest cached prefix of its whole prompt (tokens), in queue order;
        computed once per round, on first use (a policy that reads no cache never pays for it)."""
        if self._lens is None:
            if self._length_of is not None:
                self._lens = list(map(self._length_of.__getitem__, self.queue))
            else:
                self._lens = self.cache.prefix_lens([r.tokens for r in self.queue])
        return self._lens


_WAITING_ROUND_INIT = WaitingRound.__init__
"""`WaitingRound`'s own `__init__`: while the class has it, the compiled engine makes its rounds the
same way without calling it (csrc/engine.cpp)."""


class Decision:
    """One admission round as a policy decided it (`AdmissionPolicy.admit`'s second value).

    `priorities`: request id -> integer priority in the round (larger = more important, an int
    within 64 bits), which the engine's SGLang priority rules read (`EngineConfig.priority_preemption`,
    `radix_eviction_policy`); a request left out has priority 0. `prices`: the prices per token
    posted in the round (a posted-price design's; empty otherwise)."""

    __slots__ = ()
    priorities: Mapping[int, int] = NO_PRIORITIES
    prices: tuple[float, ...] = ()
    stateless_charges = False
    """Whether `charges` keeps no state: asked twice, it answers (or raises) alike, so the market
    asks it without keeping its first answer (`market._AskedOnce`)."""

    def admission_order(self) -> list[Request]:
        """The waiting queue, first = admitted first (a new list)."""
        raise NotImplementedError

    def charges(self, admitted: Sequence[int], per_bidder: Sequence[int], seconds_per_unit: float) -> dict[int, float]:
        """Bidder -> what it owes (money, >= 0, before the budget cap; those owing nothing may be left
        out) for the `admitted` ids, `per_bidder[i]` bidder i's; `seconds_per_unit`: units to seconds."""
        return {}


@dataclass(eq=False, slots=True)
class PriorityRound(Decision):
    """A round that orders and sets priorities but charges nothing (a priority order that reads the
    bids, `auction_gym.scheduler.priority`)."""

    order: list[Request]
    """The waiting queue, first = admitted first."""
    priorities: Mapping[int, int] = field(default_factory=dict)
    stateless_charges = True

    def admission_order(self) -> list[Request]:
        return list(self.order)


class AdmissionPolicy:
    """Base of every admission policy. A subclass defines `order_round` (a policy without money)
    or sets `decides = True` and defines `decide_round` (one that returns its rounds as values).

    Declared behaviour, each with its default:
    - `decides`: `admit` returns the `Decision` of `decide_round`, not only an order.
    - `charges`: its decisions may bill (the registry and the documentation count it among those
      that charge).
    - `is_auction`: an `auction_gym.mechanism.AuctionMechanism`: built with the market's cost
      model, `request_overhead` and `tie_break` (`registry.make_scheduler`).
    - `sorts_in_place`: SGLang sorts its waiting list in place under this policy, so the engine
      keeps its queue in the order `admit` returned, and the next round starts from it.
    - `in_batch`, read by `in_batch_deprioritizes(waiting)`: whether SGLang's in-batch prefix
      check applies to a queue of `waiting` requests (`auction_gym.engine.in_batch`).
    """

    name: str = ""
    decides: bool = False
    charges: bool = False
    is_auction: bool = False
    sorts_in_place: bool = False
    in_batch: bool = False

    def admit(self, round: WaitingRound) -> tuple[list[Request], Decision | None]:
        """The round's admission order (a permutation of `round.queue`, first = admitted first)
        and its decision (None for a policy without money): the one call the engine makes."""
        if self.decides:
            decision = self.decide_round(round)
            return decision.admission_order(), decision
        return self.order_round(round), None

    def order_round(self, round: WaitingRound) -> list[Request]:
        """A policy without money: the admission order of `round.queue`."""
        raise NotImplementedError

    def decide_round(self, round: WaitingRound) -> Decision:
        """A policy that decides rounds: the round over `round.queue`."""
        raise NotImplementedError

    def in_batch_deprioritizes(self, waiting: int) -> bool:
        """Whether SGLang's in-batch prefix check reorders a queue of `waiting` requests."""
        return self.in_batch

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        """The admission order of `queue` with `cache` outside an engine."""
        return self.admit(WaitingRound(queue, cache))[0]

    def decide(
        self, queue: Sequence[Request], cache: RadixCache, multipliers: Sequence[float] | None = None,
        remaining: Sequence[float] | None = None,
    ) -> Decision:
        """The round `decide_round` decides over `queue` outside an engine."""
        return self.decide_round(WaitingRound(queue, cache, multipliers, remaining))

    @staticmethod
    def declared(target: Any, attr: str) -> Any:
        """What a policy class (or a factory) declares for `attr`, the base's default when it is
        not an `AdmissionPolicy` (a factory function, a policy written to the older protocol)."""
        return getattr(target, attr, getattr(AdmissionPolicy, attr))

    @staticmethod
    def adopt(policy: Any, in_batch: bool = False) -> AdmissionPolicy:
        """`policy` as an `AdmissionPolicy`: itself when it is one; else, with a DeprecationWarning,
        a wrapper for a policy written to the older protocol (`order(queue, cache)`, or
        `decide(queue, cache, multipliers[, remaining])` with `reads_budgets`, and the optional
        `sorts_in_place`, `in_batch_deprioritizes`, `charges`; one that had the engine's waiting
        prefixes lent, `attach_waiting_prefixes`, matches its queue itself); `in_batch` is its
        registry entry's, for one that declares none."""
        if isinstance(policy, AdmissionPolicy):
            return policy
        older = callable(getattr(policy, "order", None)) or callable(getattr(policy, "decide", None))
        if not older or not hasattr(policy, "name"):  # a config in the scheduler's place, say: named here
            raise TypeError("a scheduler must be an auction_gym.policy.AdmissionPolicy or the name of a registered one "
                            f"(auction_gym.scheduler_names()), got {type(policy).__name__}: {policy!r:.80}")
        warnings.warn(
            f"{type(policy).__name__} is not an auction_gym.policy.AdmissionPolicy; subclass it (order_round or "
            "decide_round over a WaitingRound): the older protocol is deprecated", DeprecationWarning, stacklevel=3)
        # The one place the older protocol's optional members are looked for: read once, here.
        adopted = _Adopted(policy, getattr(policy, "decide", None), getattr(policy, "in_batch_deprioritizes", None))
        adopted.reads_budgets = bool(getattr(policy, "reads_budgets", False))
        adopted.charges = bool(getattr(policy, "charges", False))
        adopted.sorts_in_place = bool(getattr(policy, "sorts_in_place", False))
        adopted.in_batch = in_batch
        return adopted


def unpack_admission(reply: Any) -> tuple[Sequence[Request], Decision | None]:
    """An `admit` reply as both engines take it, `order, decision = reply` (the compiled engine
    calls this for any reply but a tuple of two, so that it raises what Python raises)."""
    order, decision = reply
    return order, decision


class _Adopted(AdmissionPolicy):
    """A policy written to the older protocol behind the declared interface; `AdmissionPolicy.adopt`
    sets what it declares."""

    reads_budgets = False

    def __init__(self, policy: Any, decide: Any, in_batch_deprioritizes: Any) -> None:
        self.policy, self.name = policy, policy.name
        self._decide, self._in_batch = decide, in_batch_deprioritizes
        self.decides = decide is not None

    def order_round(self, round: WaitingRound) -> list[Request]:
        return self.policy.order(round.queue, round.cache)

    def decide_round(self, round: WaitingRound) -> Decision:
        if self.reads_budgets:
            return self._decide(round.queue, round.cache, round.multipliers, round.remaining)
        return self._decide(round.queue, round.cache, round.multipliers)

    def in_batch_deprioritizes(self, waiting: int) -> bool:
        return self.in_batch if self._in_batch is None else self._in_batch(waiting)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.policy, attr)

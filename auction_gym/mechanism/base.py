"""What both auctions share: the cost-model settings, the round the engine asks for (`decide_round`)
and the value it returns (`AuctionRound`)."""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence

from ..policy import AdmissionPolicy, Decision, QueueDelta, WaitingRound, check_bids, round_bids
from ..prefix_matcher import PrefixMatcher
from ..radix_cache import RadixCache
from ..request import Request
from .outcome import AuctionOutcome
from .queue_tree import TokenMemo, cached_prefix_lengths
from .smith import check_tie_break
from .validation import validate_cost_model

Cached = RadixCache | Iterable[Sequence[int]] | None


class Allocation(Protocol):
    """What an auction's `allocate` returns: the round's order and costs, kept for its payments."""

    requests: list[Request]
    order: list[int]
    """Positions in `requests`, first = admitted first."""
    completion: list[float]
    """C_r per position in `requests`."""
    cost: float
    """sum_r b_r C_r in `order` (= -welfare)."""
    admission: list[Request]
    """`requests` in `order`."""

    def whole(self, pricing: AuctionMechanism) -> Allocation:
        """The allocation the payments read: itself, or for a round ordered without its payments'
        inputs, the one `pricing` builds from scratch (once)."""
        ...


_warned: set[str] = set()


def _deprecated(name: str, instead: str) -> None:
    """A DeprecationWarning for `name`, once per process."""
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"{name} is deprecated: {instead}", DeprecationWarning, stacklevel=3)


def overrides_any(cls: type, base: type, layers: Iterable[str]) -> bool:
    """Whether `cls` (`base` or a subclass) defines any of `base`'s `layers` its own way: a compiled
    round that stands in for those layers decides only rounds of a class that keeps them all."""
    return any(getattr(cls, layer) is not getattr(base, layer) for layer in layers)


@dataclass(eq=False, slots=True)
class AuctionRound(Decision):
    """What `AuctionMechanism.decide` decided in one round: its inputs, its allocation, and on first
    use its payments and outcome. The engine returns it on the `Iteration` that admitted from it
    (`Iteration.decision`), so the market prices the round from this value after the engine has
    admitted (docs/design.md section 2). Payments are in the cost model's units (see
    `AuctionOutcome`).

    It holds its pricing rule (`AuctionMechanism.pricing`: an auction of the same class and
    settings that decides no rounds), never the auction that decided it, whose state moves on.
    """

    pricing: AuctionMechanism = field(repr=False)
    """The pricing rule: `payments` and `outcome` of the allocation."""
    requests: list[Request]
    """The waiting queue as the engine passed it. Held here, so none of these objects is freed and
    replaced by another while the record is kept (requests compare by identity)."""
    bids: list[float]
    """Each request's bid in the round: its bidder's multiplier x its urgency in a market, the
    request's own `bid` otherwise."""
    prefix_lens: list[int] | None
    """Each request's cached prefix length (tokens) under "tokens"; None under "unit", where the
    radix tree and the bids alone decide."""
    allocation: Allocation | None
    """The order and its costs; None for an empty queue."""
    _outcome_cache: AuctionOutcome | None = field(default=None, init=False, repr=False)
    _queued: dict[int, int] | None = field(default=None, init=False, repr=False)

    def admission_order(self) -> list[Request]:
        """The requests, first = admitted first (a new list)."""
        return [] if self.allocation is None else list(self.allocation.admission)

    @property
    def auction(self) -> AuctionMechanism:
        """Deprecated name of `pricing`."""
        _deprecated("AuctionRound.auction", "use AuctionRound.pricing")
        return self.pricing

    @property
    def queued(self) -> dict[int, int]:
        """Bidder -> its requests in the round (q_i of the market's charging rule)."""
        if self._queued is None:
            self._queued = Counter([r.bidder for r in self.requests])
        return self._queued

    @property
    def outcome(self) -> AuctionOutcome:
        """Order, all payments, welfare and completion times of the round."""
        if self._outcome_cache is None:
            alloc = self.allocation
            self._outcome_cache = AuctionOutcome() if alloc is None else self.pricing.outcome(alloc)
        return self._outcome_cache

    def charges(
        self, admitted: Sequence[int], per_bidder: Sequence[int], seconds_per_unit: float
    ) -> dict[int, float]:
        """What the round charges (money, before any budget cap), as the market's charging rule
        says (docs/design.md section 3): bidder i, with per_bidder[i] of its requests admitted (the
        ids `admitted`) out of q_i queued, pays p_i x a_i / q_i x seconds_per_unit, p_i its VCG
        payment in cost units. Only the admitted bidders' payments are computed; a bidder whose
        payment is 0 is left out."""
        charged = [i for i, a in enumerate(per_bidder) if a]
        due = {}
        bidders = None
        for i, p in self.payments(charged).items():
            if p:  # a zero payment charges nothing, so counting the queue waits for one that is not
                if bidders is None:
                    bidders = [r.bidder for r in self.requests]
                due[i] = p * per_bidder[i] / bidders.count(i) * seconds_per_unit  # q_i, as `queued` counts
        return due

    def payments(self, bidders: Iterable[int]) -> dict[int, float]:
        """VCG payments (>= 0) of `bidders` (0 for a bidder not in the round), computing only
        theirs unless the whole outcome is already there. A lone request delays nobody, so its
        round charges nothing (over half the rounds of the default scenario)."""
        if len(self.requests) == 1 and self._outcome_cache is None:
            return dict.fromkeys(bidders, 0.0)
        if self._outcome_cache is not None or self.allocation is None:
            payments = self.outcome.payments
            return {i: payments.get(i, 0.0) for i in bidders}
        return self.pricing.payments(self.allocation, bidders)


class AuctionMechanism(AdmissionPolicy):
    """Base of the auctions: `run` decides and prices a one-off round, `decide_round` decides the
    engine's admission rounds (`decide` one outside an engine).

    A subclass defines `allocate` (the order and its costs) and `payments` (VCG payments of some or
    all bidders from an allocation), so a round can price only the bidders it charges.

    Args:
        cost_model: "tokens" (the default: C_k = uncached prefix tokens of the first k requests
            + k * request_overhead, so what the cache holds costs nothing) or "unit" (C_k = k, the
            paper's literal model, blind to the cache), docs/design.md section 3.
        request_overhead: completion units charged per request under "tokens" (>= 0).
        tie_break: how requests whose keys tie are ordered (`smith.TIE_BREAKS`): "cached_prefix"
            (the default: longest cached prefix first, then smallest id, so requests that bid 0
            keep the cache) or "request_id" (smallest id first, the rule `RadixAuction-v0` and
            `-v1` keep). Ties cost the same, so payments do not depend on it.
    """

    name = ""
    decides = True
    charges = True
    is_auction = True

    def __init__(self, cost_model: str = "tokens", request_overhead: float = 1.0,
                 tie_break: str = "cached_prefix") -> None:
        self.cost_model, self.request_overhead = validate_cost_model(cost_model, request_overhead)
        self.tie_break = tie_break
        self.cache_ties = check_tie_break(tie_break) and cost_model != "unit"
        """Whether ties go by cached prefix: "unit" reads no cache, so its ties stay by id."""
        self._memo = TokenMemo()
        # `decide`'s cached prefix lengths outside an engine, kept up to date from round to round
        # under "tokens" (re-matching only the requests a cache change can affect).
        self._matcher = PrefixMatcher(whole_prompt=True)
        self._lent: Any = None  # what `attach_waiting_prefixes` lent, and its refresh last read
        self._lent_serial: int | None = None
        # The inputs and allocation of the round last decided, for an engine that asks again
        # with the same inputs; bids None: the allocation's (a compiled round's, made on first use).
        self._last: tuple[list[Request], list[float] | None, list[int] | None, Allocation | None] | None = None
        self._pricing: AuctionMechanism | None = None

    @property
    def pricing(self) -> AuctionMechanism:
        """The rule that prices this auction's rounds: an auction of the same class and settings
        that decides none (so a round priced later reads nothing this one changed since)."""
        if self._pricing is None:
            self._pricing = type(self)(self.cost_model, self.request_overhead, self.tie_break)
        return self._pricing

    def attach_waiting_prefixes(self, prefixes: Any) -> None:
        """Deprecated: an engine passes the round's cached lengths and changes with the round
        (`decide_round`). `decide` outside an engine reads them from `prefixes` (`lengths(queue,
        cache)`, `serial`, `delta_since(serial)`) when they are for its queue."""
        _deprecated("AuctionMechanism.attach_waiting_prefixes", "the engine passes a WaitingRound to decide_round")
        self._lent, self._lent_serial = prefixes, None

    @property
    def request_work(self) -> float:
        """Completion units one request adds to every later completion time."""
        return 1.0 if self.cost_model == "unit" else self.request_overhead

    def allocate(
        self, requests: Sequence[Request], cached: Cached = None, prefix_lens: Sequence[int] | None = None,
        bids: Sequence[float] | None = None,
    ) -> Allocation:
        """The round's order and costs (no payments) over a non-empty queue; `prefix_lens` (each request's
        cached prefix) and `bids` (the round's, multiplier x urgency) when the caller has them."""
        raise NotImplementedError

    def _decide(
        self, requests: list[Request], bids: list[float], prefix_lens: list[int] | None, cache: RadixCache,
        multipliers: Sequence[float] | None = None, changes: QueueDelta | None = None,
    ) -> Allocation:
        """`allocate` of the round's `bids` and `prefix_lens` (None under "unit"); a subclass may reach the
        same order faster from the `multipliers` and the queue's `changes` (None: not known)."""
        return self.allocate(requests, cached=cache, prefix_lens=prefix_lens, bids=bids)

    def _skip(self, changes: QueueDelta | None) -> None:
        """A round decided without `_decide` (an empty queue, or inputs unchanged), whose `changes`
        a subclass that follows the queue keeps for its next round."""

    def _prefix_lens(
        self, tokens: Sequence, cached: Cached, prefix_lens: Sequence[int] | None
    ) -> Sequence[int] | None:
        """Cached prefix length per request under "tokens" (None under "unit", which ignores them)."""
        if self.cost_model == "unit":
            return None
        if prefix_lens is None:
            return cached_prefix_lengths(tokens, cached)
        if len(prefix_lens) != len(tokens):
            raise ValueError(f"prefix_lens has {len(prefix_lens)} entries for {len(tokens)} requests")
        return prefix_lens

    @staticmethod
    def _checked_bids(requests: Sequence[Request], own: list[float], bids: Sequence[float] | None) -> list[float]:
        """The bids `allocate` orders by: the requests' `own` (checked with them), or the given
        `bids`, one per request, each finite and >= 0 (a market's round bids no request holds)."""
        if bids is None:
            return own
        if len(bids) != len(requests):
            raise ValueError(f"bids has {len(bids)} entries for {len(requests)} requests")
        check_bids(requests, bids)
        return [float(b) for b in bids]

    def payments(self, alloc: Allocation, bidders: Iterable[int] | None = None) -> dict[int, float]:
        """VCG payment (>= 0) of each of `bidders` (default: every bidder with a request in the round;
        a bidder without one pays 0)."""
        raise NotImplementedError

    def run(self, requests: Sequence[Request], cached: Cached = None) -> AuctionOutcome:
        """Order `requests` and price them; `cached` is the round's cached set (RadixCache, token
        sequences, or None). Raises ValueError on invalid bids, duplicate ids or empty tokens."""
        if len(requests) == 0:
            return AuctionOutcome()
        return self.outcome(self.allocate(requests, cached))

    def outcome(self, alloc: Allocation) -> AuctionOutcome:
        """Order, all payments, welfare and completion times of an allocation."""
        requests = alloc.requests
        return AuctionOutcome(
            order=[requests[r].id for r in alloc.order],
            payments=self.payments(alloc),
            welfare=-alloc.cost,
            completion={req.id: c for req, c in zip(requests, alloc.completion)},
        )

    def decide_round(self, round: WaitingRound) -> AuctionRound:
        """Decide the engine's admission round over `round.queue` with `round.cache` as the cached
        set, and return it (the admission order is `admission_order()`). With multipliers (a
        market's: one per bidder), request r bids multipliers[r.bidder] x r.urgency (`round_bids`);
        without, its own `bid`. The round is priced on demand, from the record
        (`AuctionRound.payments`), not from the cache, which the engine changes as it admits."""
        requests = list(round.queue)
        bids = round_bids(requests, round.multipliers)
        costed = self.cost_model == "tokens" and requests
        lens, changes = (round.prefix_lens, round.changes) if costed else (None, None)
        return self._round(requests, bids, lens, round.cache, round.multipliers, changes)

    def decide(
        self, queue: Sequence[Request], cache: RadixCache, multipliers: Sequence[float] | None = None,
        remaining: Sequence[float] | None = None,
    ) -> AuctionRound:
        """`decide_round` outside an engine: the queue's cached prefix lengths matched here,
        incrementally from call to call (or read from what `attach_waiting_prefixes` lent)."""
        requests = list(queue)
        bids = round_bids(requests, multipliers)
        lens = changes = None
        if self.cost_model == "tokens" and requests:
            lens, changes = self._lent_round(queue, cache)
            if lens is None:
                match = self._matcher.update(requests, cache)
                lens = [match[r.id][0] for r in requests]
        return self._round(requests, bids, lens, cache, multipliers, changes)

    def _lent_round(self, queue: Sequence[Request], cache: RadixCache) -> tuple[list[int] | None, QueueDelta | None]:
        """The lengths and the changes since the last call that the lent refreshes give for
        `queue` ((None, None) when nothing was lent or they are not for this queue)."""
        lent, since = self._lent, self._lent_serial
        lens = None if lent is None else lent.lengths(queue, cache)
        if lens is None:
            self._lent_serial = None
            return None, None
        self._lent_serial = lent.serial
        return lens, None if since is None else lent.delta_since(since)

    def _round(
        self, requests: list[Request], bids: list[float], lens: list[int] | None, cache: RadixCache,
        multipliers: Sequence[float] | None, changes: QueueDelta | None,
    ) -> AuctionRound:
        """The round over `requests`. An engine asks again after a round that admitted nothing
        (memory was short); when the round's inputs are unchanged the allocation is reused."""
        if (allocation := self._unchanged(requests, bids, lens)) is not None:
            self._skip(changes)
        elif requests:
            allocation = self._decide(requests, bids, lens, cache, multipliers, changes)
            self._last = requests, bids, lens, allocation
        else:
            allocation = None
            self._skip(changes)
            self._last = requests, bids, lens, allocation
        return AuctionRound(self.pricing, requests, bids, lens, allocation)

    def _unchanged(self, requests: list[Request], bids: list[float], lens: list[int] | None) -> Allocation | None:
        """The last round's allocation when this round's inputs are the same (None otherwise, or when
        the last round's queue was empty). A queue of another length has other inputs (one bid and
        one length per request), so the last round's bids are not read then."""
        last = self._last
        if last is None or len(requests) != len(last[0]):
            return None
        kept = last[3].bids if last[1] is None else last[1]
        if bids == kept and requests == last[0] and lens == last[2]:
            return last[3]
        return None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(cost_model={self.cost_model!r}, "
            f"request_overhead={self.request_overhead})"
        )

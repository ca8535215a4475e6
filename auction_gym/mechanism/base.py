"""What both auctions share: the cost-model settings and the scheduler face the engine calls."""

from __future__ import annotations

import math
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence

from ..radix_cache import RadixCache
from ..request import Request
from ..scheduler.prefix_matcher import PrefixMatcher
from ..scheduler.waiting import WaitingPrefixes
from .outcome import AuctionOutcome
from .queue_tree import TokenMemo, cached_prefix_lengths
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


@dataclass(eq=False, slots=True)
class AuctionRound:
    """What `AuctionMechanism.order` decided in one round: its inputs, its allocation, and on first
    use its payments and outcome. Kept as the auction's `last_round` until the next round is decided,
    so the market prices the round after the engine has admitted from it. Payments are in the cost
    model's units (see `AuctionOutcome`).

    Its inputs (`requests`, `bids`, `prefix_lens`) are what decides the allocation, so `order`
    reuses the record for a round whose inputs are equal (`decided_from`).

    The record holds its auction weakly (`live_auction`): to price a round after its market has
    moved on (a market's reset makes new auctions), keep the auction too.
    """

    auction_ref: weakref.ReferenceType[AuctionMechanism] = field(repr=False)
    """The auction that decided it, held weakly (`mechanism`)."""
    requests: list[Request]
    """The waiting queue as the engine passed it. Held here, so none of these objects is freed and
    replaced by another while the record is kept (requests compare by identity)."""
    bids: list[float]
    """Each request's bid when the round was decided."""
    prefix_lens: list[int] | None
    """Each request's cached prefix length (tokens) under "tokens"; None under "unit", where the
    radix tree and the bids alone decide."""
    allocation: Allocation | None
    """The order and its costs; None for an empty queue."""
    _outcome_cache: AuctionOutcome | None = field(default=None, init=False, repr=False)
    _queued: dict[int, int] | None = field(default=None, init=False, repr=False)

    @property
    def mechanism(self) -> AuctionMechanism:
        """The auction that decided the round (and prices it)."""
        return live_auction(self.auction_ref)

    def decided_from(self, requests: list[Request], bids: list[float], prefix_lens: list[int] | None) -> bool:
        """Whether a round with these inputs is this one. Bids are compared first: they change in
        almost every round."""
        return bids == self.bids and requests == self.requests and prefix_lens == self.prefix_lens

    def admission_order(self) -> list[Request]:
        """The requests, first = admitted first (a new list)."""
        return [] if self.allocation is None else self.mechanism._admission(self.allocation)

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
            self._outcome_cache = AuctionOutcome() if alloc is None else self.mechanism._outcome(alloc)
        return self._outcome_cache

    def payments(self, bidders: Iterable[int]) -> dict[int, float]:
        """VCG payments (>= 0) of `bidders` (0 for a bidder not in the round), computing only
        theirs unless the whole outcome is already there. A lone request delays nobody, so its
        round charges nothing (over half the rounds of the default scenario)."""
        if len(self.requests) == 1 and self._outcome_cache is None:
            return dict.fromkeys(bidders, 0.0)
        if self._outcome_cache is not None or self.allocation is None:
            payments = self.outcome.payments
            return {i: payments.get(i, 0.0) for i in bidders}
        return self.mechanism.payments(self.allocation, bidders)


def stamp_bids(queue: Iterable[Request], alpha: Sequence[float]) -> list[float]:
    """Set each request's bid to its bidder's multiplier times its urgency, how a market bids
    (docs/design.md section 3), and return the bids. ValueError unless every multiplier is finite
    and >= 0."""
    if not all(0.0 <= a < math.inf for a in alpha):
        raise ValueError(f"multipliers must be finite and >= 0, got {list(alpha)}")
    bids = []
    for r in queue:
        r.bid = b = alpha[r.bidder] * r.urgency
        bids.append(b)
    return bids


def live_auction(ref: weakref.ReferenceType[AuctionMechanism]) -> AuctionMechanism:
    """The auction `ref` refers to. A round's record holds its auction weakly because the auction
    holds its last round: a cycle between them would leave each finished episode's engine (which
    the auction reaches through its cache) to the cyclic garbage collector instead of freeing it
    when the market moves on. ReferenceError once the auction is gone."""
    auction = ref()
    if auction is None:
        raise ReferenceError("the auction that decided this round is gone: keep the auction to price its rounds")
    return auction


class AuctionMechanism:
    """Base of the auctions: `run` decides a round, `order` makes the auction a Scheduler.

    A subclass defines `allocate` (the order and its costs) and `payments` (VCG payments of some or
    all bidders from an allocation), so a scheduler round can price only the bidders it charges.

    Args:
        cost_model: "tokens" (the default: C_k = uncached prefix tokens of the first k requests
            + k * request_overhead, so what the cache holds costs nothing) or "unit" (C_k = k, the
            paper's literal model, blind to the cache), docs/design.md section 3.
        request_overhead: completion units charged per request under "tokens" (>= 0).

    Attributes:
        last_round: the `AuctionRound` record of the last round `order` decided (None before the
            first): the one place a scheduler round's allocation is kept, for its payments and for
            reuse when the engine asks again.
    """

    name = ""

    def __init__(self, cost_model: str = "tokens", request_overhead: float = 1.0) -> None:
        self.cost_model, self.request_overhead = validate_cost_model(cost_model, request_overhead)
        self.last_round: AuctionRound | None = None
        self._memo = TokenMemo()
        # The scheduler face's cached prefix lengths, kept up to date from round to round under
        # "tokens" (re-matching only the requests a cache change can affect).
        self._matcher = PrefixMatcher(whole_prompt=True)
        self._waiting: WaitingPrefixes | None = None

    def attach_waiting_prefixes(self, prefixes: WaitingPrefixes) -> None:
        """Read the queue's cached prefix lengths from the engine's `WaitingPrefixes` (see
        `Scheduler`), matching the queue itself only when they are not for this round."""
        self._waiting = prefixes

    @property
    def request_work(self) -> float:
        """Completion units one request adds to every later completion time."""
        return 1.0 if self.cost_model == "unit" else self.request_overhead

    def allocate(
        self, requests: Sequence[Request], cached: Cached = None, prefix_lens: Sequence[int] | None = None
    ) -> Allocation:
        """The round's order and costs (no payments) over a non-empty queue. `prefix_lens`, per
        request its longest prefix in `cached`, saves reading them from `cached` when the caller
        has them (the scheduler face keeps them incrementally)."""
        raise NotImplementedError

    def _decide(
        self, requests: list[Request], bids: list[float], prefix_lens: list[int] | None, cache: RadixCache,
        alpha: Sequence[float] | None = None, refreshed: WaitingPrefixes | None = None,
    ) -> Allocation:
        """The scheduler face's allocation of a non-empty queue, whose `bids` and cached
        `prefix_lens` (None under "unit") `order` read this round, and `alpha` the multipliers
        the bids were made with (`order_paced`; None: bids as given); `refreshed`, the engine's
        refresh whose queue `requests` is and whose lengths `prefix_lens` are (None: not known to
        be), whose changes a subclass may follow instead of comparing queues: `allocate`, unless a
        subclass has a faster way to the same order."""
        return self.allocate(requests, cached=cache, prefix_lens=prefix_lens)

    def _admission(self, alloc: Allocation) -> list[Request]:
        """`alloc`'s requests in its order (a new list)."""
        requests = alloc.requests
        return [requests[r] for r in alloc.order]

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

    def payments(self, alloc: Allocation, bidders: Iterable[int] | None = None) -> dict[int, float]:
        """VCG payment (>= 0) of each of `bidders` (default: every bidder with a request in the round;
        a bidder without one pays 0)."""
        raise NotImplementedError

    def run(self, requests: Sequence[Request], cached: Cached = None) -> AuctionOutcome:
        """Order `requests` and price them; `cached` is the round's cached set (RadixCache, token
        sequences, or None). Raises ValueError on invalid bids, duplicate ids or empty tokens."""
        if len(requests) == 0:
            return AuctionOutcome()
        return self._outcome(self.allocate(requests, cached))

    def _outcome(self, alloc: Allocation) -> AuctionOutcome:
        requests = alloc.requests
        return AuctionOutcome(
            order=[requests[r].id for r in alloc.order],
            payments=self.payments(alloc),
            welfare=-alloc.cost,
            completion={req.id: c for req, c in zip(requests, alloc.completion)},
        )

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        """Scheduler interface: decide the round over the requests' bids as they are
        (`_decide_round`)."""
        return self._decide_round(queue, cache)

    def order_paced(self, queue: Sequence[Request], cache: RadixCache, alpha: Sequence[float]) -> list[Request]:
        """`order` in a market, where bidder i bids alpha[i] x urgency on each of its requests:
        stamps those bids on the queue (`stamp_bids`) and decides the round. An auction whose
        order within one bidder's requests does not change when that bidder's bids are scaled
        (the radix auction) keeps its work from round to round in urgency units."""
        return self._decide_round(queue, cache, alpha)

    def _decide_round(
        self, queue: Sequence[Request], cache: RadixCache, alpha: Sequence[float] | None = None
    ) -> list[Request]:
        """Decide the round with `cache` as the cached set (with `alpha`, `order_paced`: over the
        bids it stamps, alpha[bidder] x urgency; without, over the requests' bids), keep it as
        `last_round` and return the requests in admission order. The round is priced on demand,
        from the record (`last_payments`, `last_outcome`), not from the cache, which the engine
        changes as it admits.

        An engine asks again after a round that admitted nothing (memory was short); when the
        round's inputs are unchanged (`AuctionRound.decided_from`) the record is kept as it is:
        nothing else decides the allocation."""
        requests = list(queue)
        bids = [r.bid for r in requests] if alpha is None else stamp_bids(requests, alpha)
        lens = refreshed = None
        if self.cost_model == "tokens" and requests:
            if self._waiting is not None:  # the engine's refresh has matched this queue already
                # `queue` itself, not the copy: asked for the same list (by the engine's in-batch
                # check first), it answers from that call instead of passing the queue again.
                lens = self._waiting.lengths(queue, cache)
                refreshed = self._waiting if lens is not None else None
            if lens is None:
                match = self._matcher.update(requests, cache)  # kept incrementally from round to round
                lens = [match[r.id][0] for r in requests]
        decided = self.last_round
        if decided is None or not decided.decided_from(requests, bids, lens):
            allocation = self._decide(requests, bids, lens, cache, alpha, refreshed) if requests else None
            decided = self.last_round = AuctionRound(
                auction_ref=weakref.ref(self), requests=requests, bids=bids, prefix_lens=lens, allocation=allocation)
        return decided.admission_order()

    @property
    def last_outcome(self) -> AuctionOutcome | None:
        """The outcome of the last round `order` decided, all payments included (None before);
        `last_round.outcome`."""
        return None if self.last_round is None else self.last_round.outcome

    def last_payments(self, bidders: Iterable[int]) -> dict[int, float]:
        """VCG payments of `bidders` in the last round `order` decided (0 for a bidder not in it),
        computing only theirs; `last_round.payments(bidders)`. RuntimeError before any round."""
        if self.last_round is None:
            raise RuntimeError("no round has been ordered")
        return self.last_round.payments(bidders)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(cost_model={self.cost_model!r}, "
            f"request_overhead={self.request_overhead})"
        )

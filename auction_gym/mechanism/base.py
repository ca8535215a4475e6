"""What both auctions share: the cost-model settings and the scheduler face the engine calls."""

from __future__ import annotations

from typing import Iterable, Protocol, Sequence

from ..radix_cache import RadixCache
from ..request import Request
from ..scheduler.prefix_matcher import PrefixMatcher
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


class AuctionMechanism:
    """Base of the auctions: `run` decides a round, `order` makes the auction a Scheduler.

    A subclass defines `allocate` (the order and its costs) and `payments` (VCG payments of some or
    all bidders from an allocation), so a scheduler round can price only the bidders it charges.

    Args:
        cost_model: "tokens" (the default: C_k = uncached prefix tokens of the first k requests
            + k * request_overhead, so what the cache holds costs nothing) or "unit" (C_k = k, the
            paper's literal model, blind to the cache), DESIGN.md section 3.
        request_overhead: completion units charged per request under "tokens" (>= 0).
    """

    name = ""

    def __init__(self, cost_model: str = "tokens", request_overhead: float = 1.0) -> None:
        self.cost_model, self.request_overhead = validate_cost_model(cost_model, request_overhead)
        self._last_alloc: Allocation | None = None
        self._last_outcome: AuctionOutcome | None = None
        self._last_key: tuple[list[float], list[Request], list[int] | None] | None = None
        self._memo = TokenMemo()
        # The scheduler face's cached prefix lengths, kept up to date from round to round under
        # "tokens" (re-matching only the requests a cache change can affect).
        self._matcher = PrefixMatcher(whole_prompt=True)

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
        """Scheduler interface: allocate the round with `cache` as the cached set and return the
        requests in admission order. Its prices come on demand: `last_payments` for some bidders,
        `last_outcome` for the whole outcome, both from the allocation (not the cache, which the
        engine changes as it admits).

        An engine asks again after a round that admitted nothing (memory was short); if the queue,
        the bids and (under "tokens") the requests' cached prefix lengths are unchanged, the last
        allocation is reused: nothing else decides it."""
        # The same request objects (held here, so none is freed and replaced meanwhile), bids, and
        # cached lengths (kept incrementally by the matcher; None under "unit", where the radix
        # tree and bids alone decide). Requests compare by identity, so comparing the keys compares
        # the objects, and the bids first: they change in almost every round.
        requests = list(queue)
        lens = None
        if self.cost_model == "tokens" and requests:
            match = self._matcher.update(requests, cache)
            lens = [match[r.id][0] for r in requests]
        key = ([r.bid for r in requests], requests, lens)
        if key != self._last_key:
            self._last_alloc = self.allocate(requests, cached=cache, prefix_lens=lens) if requests else None
            self._last_outcome = None
            self._last_key = key
        if self._last_alloc is None:
            return []
        requests = self._last_alloc.requests
        return [requests[r] for r in self._last_alloc.order]

    @property
    def last_outcome(self) -> AuctionOutcome | None:
        """The outcome of the last round `order` decided, all payments included (None before)."""
        if self._last_outcome is None and self._last_key is not None:
            alloc = self._last_alloc
            self._last_outcome = AuctionOutcome() if alloc is None else self._outcome(alloc)
        return self._last_outcome

    def last_payments(self, bidders: Iterable[int]) -> dict[int, float]:
        """VCG payments of `bidders` in the last round `order` decided (0 for a bidder not in it),
        computing only theirs."""
        if self._last_outcome is not None:
            return {i: self._last_outcome.payments.get(i, 0.0) for i in bidders}
        if self._last_alloc is None:
            raise RuntimeError("no round has been ordered")
        return self.payments(self._last_alloc, bidders)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(cost_model={self.cost_model!r}, "
            f"request_overhead={self.request_overhead})"
        )

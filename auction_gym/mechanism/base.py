"""What both auctions share: the cost-model settings and the scheduler face the engine calls."""

from __future__ import annotations

from typing import Iterable, Sequence

from ..radix_cache import RadixCache
from ..request import Request
from .outcome import AuctionOutcome
from .queue_tree import TokenMemo
from .validation import validate_cost_model

Cached = RadixCache | Iterable[Sequence[int]] | None


class AuctionMechanism:
    """Base of the auctions: `run` decides a round, `order` makes the auction a Scheduler.

    Args:
        cost_model: "unit" (C_k = k) or "tokens" (C_k = uncached prefix tokens of the first k
            requests + k * request_overhead), DESIGN.md section 3.
        request_overhead: completion units charged per request under "tokens" (>= 0).
    """

    name = ""

    def __init__(self, cost_model: str = "unit", request_overhead: float = 1.0) -> None:
        self.cost_model, self.request_overhead = validate_cost_model(cost_model, request_overhead)
        self.last_outcome: AuctionOutcome | None = None
        self._last_key: tuple[list[Request], list[float], object] | None = None
        self._memo = TokenMemo()

    @property
    def request_work(self) -> float:
        """Completion units one request adds to every later completion time."""
        return 1.0 if self.cost_model == "unit" else self.request_overhead

    def run(self, requests: Sequence[Request], cached: Cached = None) -> AuctionOutcome:
        raise NotImplementedError

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        """Scheduler interface: run the round with `cache` as the cached set; keep the outcome in
        `self.last_outcome` for the market and return the requests in admission order.

        An engine asks again after a round that admitted nothing (memory was short); if the queue,
        the bids and (under "tokens") the cache are unchanged, the last outcome is returned."""
        # The same request objects (held here, so none is freed and replaced meanwhile), bids, and
        # cache contents; the radix tree and bids alone decide a "unit" round.
        key = (
            list(queue),
            [r.bid for r in queue],
            (cache, cache.changes_since(None)[0]) if self.cost_model == "tokens" else None,
        )
        same = (
            self._last_key is not None
            and len(key[0]) == len(self._last_key[0])
            and all(a is b for a, b in zip(key[0], self._last_key[0]))
            and key[1:] == self._last_key[1:]
        )
        if not same:
            self.last_outcome = self.run(queue, cached=cache)
            self._last_key = key
        outcome = self.last_outcome
        by_id = {r.id: r for r in queue}
        return [by_id[i] for i in outcome.order]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(cost_model={self.cost_model!r}, "
            f"request_overhead={self.request_overhead})"
        )

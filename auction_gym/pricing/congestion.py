"""Dynamic congestion pricing: one posted price for priority that follows load (EIP-1559's rule).

Two classes: standard (free) and priority, at a price per prompt token posted each round. A request
buys priority, once, when the design first sees it waiting, if its bid covers it: by the best
response of the service tiers (`tiers.best_tier`, with a free standard tier), if bid x W_standard
> bid x W_priority + price x prompt tokens, W the wait it expects in each class. Priority requests
are admitted first, each class first come, first served; a request with bid 0 (budget spent) goes
behind every paying one and pays nothing.

After each decision (an admission round, or the engine's retry of one) the price moves with load, as EIP-1559's base fee moves with block use:
p <- max(floor, p x (1 + eta x (utilization - target))), utilization the share of the waiting queue
that bought priority (0 for an empty queue), so the price rises while more than `target` of what
waits pays for priority and falls otherwise. Each round's price is on its `PostedRound.prices`,
which `RoundReport.decision` carries: that is the price path (`radix-auction markets` logs it).

A request's weight (its urgency in a market, its own bid in a replay), bidder and prompt length are
read once, when the design first holds it, and every later round's classes, counts and bills use
those values (held.py), on either core: a request's fields changed while it waits move none of them.
"""

from __future__ import annotations

import math
from itertools import repeat
from operator import attrgetter

from ..policy import AdmissionPolicy, WaitingRound, check_bids, check_multipliers, round_bids
from .held import HeldChoices, compiled_book, taken_over
from .posted_round import PostedRound
from .tiers import BASE_PRICE, SECONDS_PER_REQUEST, best_tier

_ID = attrgetter("id")


class CongestionPricing(AdmissionPolicy):
    """A priority price that follows load; see the module docstring.

    Args:
        price: the first round's priority price per prompt token (money, > 0).
        eta: the step of the price rule, in (0, 1] (EIP-1559: 1/8).
        target: the share of the queue in priority the price aims at, in (0, 1).
        floor: the lowest price (money per token, > 0 and <= price).
        seconds_per_request: the wait one request ahead adds in the best response (s, > 0).
    """

    name = "congestion"
    decides = True
    charges = True

    def __init__(
        self, price: float = BASE_PRICE, eta: float = 0.125, target: float = 0.5, floor: float | None = None,
        seconds_per_request: float = SECONDS_PER_REQUEST,
    ) -> None:
        if not (isinstance(price, (int, float)) and 0.0 < price < math.inf):
            raise ValueError(f"price must be finite and > 0, got {price!r}")
        if not (isinstance(eta, (int, float)) and 0.0 < eta <= 1.0):
            raise ValueError(f"eta must be in (0, 1], got {eta!r}")
        if not (isinstance(target, (int, float)) and 0.0 < target < 1.0):
            raise ValueError(f"target must be in (0, 1), got {target!r}")
        floor = price / 1000 if floor is None else floor
        if not (isinstance(floor, (int, float)) and 0.0 < floor <= price):
            raise ValueError(f"floor must be > 0 and <= price ({price!r}), got {floor!r}")
        if not (isinstance(seconds_per_request, (int, float)) and 0.0 < seconds_per_request < math.inf):
            raise ValueError(f"seconds_per_request must be finite and > 0, got {seconds_per_request!r}")
        self.price, self.eta, self.target, self.floor = float(price), float(eta), float(target), float(floor)
        self.seconds_per_request = float(seconds_per_request)
        self._held = HeldChoices(2)  # request -> 1 if it bought priority, else 0, while it waits
        self._book = compiled_book(2, None, self.seconds_per_request)

    def decide_round(self, round: WaitingRound) -> PostedRound:
        """The round at this round's price: new requests choose, priority first, bills for the
        paying priority requests; then the price moves for the next round. The choices held follow
        the queue's changes (held.py), so a round's Python steps are its changes and bidders."""
        price, queue, multipliers = self.price, round.queue, round.multipliers
        if multipliers is not None:  # checked before what is held moves
            check_multipliers(multipliers)
        if self._book is not None and (decided := self._compiled_round(round, price)) is not None:
            return decided
        if multipliers is not None:  # what is held is read too: the compiled book declines it
            self._held.check_bidders(queue, multipliers, "multipliers")
        held = self._held
        held.check_switch(queue, multipliers)  # before what is held moves
        new = held.follow(queue, round.changes, multipliers is None, round.cache)
        bids = round_bids(new, multipliers)
        check_bids(new, bids)  # a bid changed after construction, or a product that overflows
        (paying, bought), unpaid = held.paying(multipliers)  # those held in standard, in priority
        paying += bought  # ahead in standard
        for r, b in zip(new, bids):
            chosen = b > 0 and best_tier(b, r.prompt_len, (paying, bought), (0.0, price),
                                         self.seconds_per_request) == 1
            paying += b > 0
            bought += chosen
            held.hold(r, int(chosen))
            if not b > 0 and held.rank[r] >= 0:
                unpaid.append(r)
        rank = held.ranks(unpaid)
        order = sorted(queue, key=rank.__getitem__, reverse=True)  # stable: FCFS in a class, the unpaid last
        bills = {}
        for b, lengths in held.lengths(1, multipliers):
            bills.update(zip(map(_ID, lengths), zip(repeat(b), map(price.__mul__, lengths.values()))))
        self._move(price, bought, len(queue))
        return PostedRound(order, bills, (price,))

    def _compiled_round(self, round: WaitingRound, price: float) -> PostedRound | None:
        """The round decided by the compiled book; None, the book handed over to `_held`, for
        inputs it does not take as they are."""
        changes = round.changes
        joined, left = (None, None) if changes is None else (changes.joined, changes.left)
        got = self._book.congestion_round(round.queue, joined, left, round.cache, round.multipliers, price)
        if got is None:
            self._held, self._book = taken_over(self._book, 2, None), None
            return None
        order, bills, bought = got
        self._move(price, bought, len(round.queue))
        return PostedRound(order, bills, (price,))

    def _move(self, price: float, bought: int, waiting: int) -> None:
        """The price for the next round, after one at `price` where `bought` of `waiting` requests hold priority."""
        utilization = bought / waiting if waiting else 0.0
        self.price = max(self.floor, price * (1 + self.eta * (utilization - self.target)))

    def __repr__(self) -> str:
        return f"CongestionPricing(price={self.price}, eta={self.eta}, target={self.target})"

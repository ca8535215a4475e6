"""Posted-price service tiers: priority sold at fixed prices per token, as API providers sell it.

K tiers, each with a price per prompt token (default: flex 0.5, standard 1.0 and priority 1.8 x
`base_price`, Google's Flex and Priority PayGo ratios); a higher tier is admitted first, FCFS
(`tiers`) or longest cached prefix first (`tiers_lpm`) inside. Each request buys its tier once by a
best response to the waits it expects, within its bidder's budget left; a bidder's bills in a round
never exceed that budget. The rules in full: docs/markets.md ("The best response", "Out of budget").

A request's weight (its urgency in a market, its own bid in a replay), bidder and prompt length are
read once, when the design first holds it, and every later round's classes, counts, step-down and
bills use those values (held.py), on either core: a request's fields changed while it waits move
none of them.
"""

from __future__ import annotations

import math
from operator import mul
from typing import Sequence

from ..policy import (
    AdmissionPolicy,
    WaitingRound,
    check_bids,
    check_multipliers,
    check_remaining,
    round_bids,
)
from ..request import Request
from .held import HeldChoices, compiled_book, taken_over
from .posted_round import PostedRound

TIER_RATIOS: dict[str, float] = {"flex": 0.5, "standard": 1.0, "priority": 1.8}
"""The default tiers, cheapest first: each one's price over `base_price`."""
BASE_PRICE = 3e-7
"""The default standard price per prompt token (money): with it, bidders pacing by OGD in the
default scenario spend 90% of their budgets on average, as under the auctions (88%); at 1e-7 they
spent 36% (4 seeds, `python -m experiments.studies.scenario --mechanisms tiers --etas 0.02`)."""
SECONDS_PER_REQUEST = 0.069
"""The default engine's seconds per request when every running slot is busy (1 / its served
rate of 14.5 requests/s, `MarketConfig.served_rate`): the wait one request ahead adds."""
INSIDE = ("fcfs", "lpm")
"""The orders inside a tier."""
_MARGIN = 1 - 2**-26
"""The share of a budget left within which a bidder's bills need no walk (`ServiceTiers._stepped_down`)."""


def check_prices(prices: Sequence[float], name: str = "tier prices") -> tuple[float, ...]:
    """`prices` as floats; ValueError naming `name` unless they are numbers, finite, > 0 and
    strictly increasing."""
    try:
        values = tuple(float(p) for p in prices)
    except (TypeError, ValueError):  # not a sequence, or an entry that is not a number
        values = ()
    if not values or not all(0.0 < p < math.inf for p in values) or any(a >= b for a, b in zip(values, values[1:])):
        raise ValueError(f"{name} must be numbers, finite, > 0 and strictly increasing, got {prices!r}")
    return values


def best_tier(
    bid: float, prompt_len: int, ahead: Sequence[int], prices: Sequence[float], seconds: float,
    budget: float = math.inf,
) -> int:
    """The tier the best response buys: argmin_k bid x ahead[k] x seconds + prices[k] x prompt_len
    over the tiers whose bill prices[k] x prompt_len `budget` covers (ties to the cheaper tier);
    -1 when it covers none. `ahead[k]` counts the paying requests waiting in tiers >= k."""
    best, best_cost = -1, math.inf
    for k, price in enumerate(prices):
        if price * prompt_len > budget:
            break  # prices increase: no dearer tier is covered either
        cost = bid * ahead[k] * seconds + price * prompt_len
        if cost < best_cost:
            best, best_cost = k, cost
    return best


class ServiceTiers(AdmissionPolicy):
    """Fixed-price service tiers; see the module docstring.

    Args:
        base_price: the price per prompt token of ratio 1 (money, > 0).
        ratios: each tier's price over `base_price`, cheapest first (> 0, strictly increasing).
        inside: the order inside a tier, one of INSIDE.
        seconds_per_request: the wait one request ahead adds in the best response (s, > 0).
    """

    name = "tiers"
    decides = True
    charges = True

    def __init__(
        self, base_price: float = BASE_PRICE, ratios: Sequence[float] = tuple(TIER_RATIOS.values()),
        inside: str = "fcfs", seconds_per_request: float = SECONDS_PER_REQUEST,
    ) -> None:
        if not (isinstance(base_price, (int, float)) and 0.0 < base_price < math.inf):
            raise ValueError(f"base_price must be finite and > 0, got {base_price!r}")
        self.prices = check_prices([base_price * r for r in check_prices(ratios, "ratios")])
        if inside not in INSIDE:
            raise ValueError(f"inside must be one of {', '.join(INSIDE)}, got {inside!r}")
        if not (isinstance(seconds_per_request, (int, float)) and 0.0 < seconds_per_request < math.inf):
            raise ValueError(f"seconds_per_request must be finite and > 0, got {seconds_per_request!r}")
        self.inside, self.seconds_per_request = inside, float(seconds_per_request)
        self._held = HeldChoices(len(self.prices), self.prices)  # the tiers bought, while they wait
        self._book = compiled_book(len(self.prices), self.prices, self.seconds_per_request)

    def decide_round(self, round: WaitingRound) -> PostedRound:
        """The round over `queue`: new requests buy their tiers, each bidder's budget left
        (`remaining`, one per bidder; None: no budget binds) steps down what it cannot cover, then
        tiers high to low, each in its inside order; bills for the paying requests. The tiers held
        follow the queue's changes (held.py), so a round's Python steps are its changes, its
        bidders and the requests of a bidder whose budget left may not cover its bills."""
        queue, remaining, multipliers = round.queue, round.remaining, round.multipliers
        if multipliers is not None:  # checked before what is held moves
            check_multipliers(multipliers)
        if remaining is not None:
            check_remaining(remaining, multipliers)
        if self._book is not None and (decided := self._compiled_round(round)) is not None:
            return decided
        for per_bidder, name in ((multipliers, "multipliers"), (remaining, "budgets left (remaining)")):
            if per_bidder is not None:  # what is held is read too: the compiled book declines it
                self._held.check_bidders(queue, per_bidder, name)
        held = self._held
        held.check_switch(queue, multipliers)  # before what is held moves
        new = held.follow(queue, round.changes, multipliers is None, round.cache)
        bids = round_bids(new, multipliers)
        check_bids(new, bids)  # a bid changed after construction, or a product that overflows
        counts, unpaid = held.paying(multipliers)
        ahead = self._buy(new, bids, counts, unpaid, remaining)
        inside = queue
        if self.inside == "lpm":
            lens = round.prefix_lens
            inside = list(map(queue.__getitem__, sorted(range(len(queue)), key=lens.__getitem__, reverse=True)))
        rank = held.ranks(unpaid)
        out, stepped = (set(), {}) if remaining is None else self._stepped_down(inside, multipliers, ahead, remaining, rank)
        bills = held.bills(multipliers, out)
        if out or stepped:
            rank = {**rank, **stepped}
            for b in out:
                rank.update(dict.fromkeys(held.holding(b).members, -1))
            for r, k in stepped.items():
                if k >= 0:  # its bidder and tokens as it joined (held.py), as its bill at its own tier
                    bills[r.id] = (held.bidder(r), self.prices[k] * held.prompt_len(r))
                else:
                    del bills[r.id]
        # Stable: the inside order within a tier, the unpaid (-1) last.
        return PostedRound(sorted(inside, key=rank.__getitem__, reverse=True), bills, self.prices)

    def _compiled_round(self, round: WaitingRound) -> PostedRound | None:
        """The round decided by the compiled book; None, the book handed over to `_held`, for
        inputs it does not take as they are."""
        changes = round.changes
        joined, left = (None, None) if changes is None else (changes.joined, changes.left)
        lens = round.prefix_lens if self.inside == "lpm" else None
        got = self._book.tiers_round(round.queue, joined, left, round.cache, round.multipliers, round.remaining, lens)
        if got is None:
            self._held, self._book = taken_over(self._book, len(self.prices), self.prices), None
            return None
        return PostedRound(got[0], got[1], self.prices)

    def _buy(
        self, new: list[Request], bids: list[float], counts: list[int], unpaid: list[Request],
        remaining: Sequence[float] | None,
    ) -> list[int]:
        """The `new` requests buy their tiers by the best response among the tiers their bidder's
        budget left covers, in queue order, so a request sees those that came before it; `counts`:
        the paying requests held per tier. Those that weigh but bid 0 join `unpaid`. Returns the
        paying requests waiting in tiers >= k, for each k, after them."""
        held, ahead = self._held, [sum(counts[j:]) for j in range(len(counts))]
        for r, b in zip(new, bids):
            k = -1
            if b > 0:
                budget = math.inf if remaining is None else remaining[r.bidder]
                k = best_tier(b, r.prompt_len, ahead, self.prices, self.seconds_per_request, budget)
            if k >= 0:
                for j in range(k + 1):
                    ahead[j] += 1
            else:  # bid 0, or no tier covered: the cheapest, unpaid while it is not covered
                k = 0
            held.hold(r, k)
            if not b > 0 and held.rank[r] >= 0:
                unpaid.append(r)
        return ahead

    def _stepped_down(
        self, inside: list[Request], multipliers: Sequence[float] | None, ahead: list[int],
        remaining: Sequence[float], rank: dict[Request, int],
    ) -> tuple[set[int], dict[Request, int]]:
        """The bidders whose budget left covers none of their bills (every request of theirs unpaid
        this round), and the paying requests of the others whose tier their budget left steps down
        (-1: unpaid), by `_walk` over each bidder that its bills might exceed; `inside`: the queue
        in the inside order, `rank`: each request's tier bought (-1: it bids 0). A bidder whose
        bills of the tiers held (paying or not) sum to within its budget left by more than the
        rounding of as many subtractions as it has requests covers every bill (the margin holds
        for fewer than 2^25 requests)."""
        out, stepped, cheapest, weight = set(), {}, self.prices[0], self._held.weight
        for b, m, holding in self._held.bidders(multipliers):
            if m == 0:
                continue  # none of its requests bids: nothing billed
            left = remaining[b]
            total = sum(map(mul, self.prices, holding.tokens))
            if total <= left * _MARGIN and total < math.inf:
                continue
            if cheapest * holding.shortest > left:
                out.add(b)  # each paying request fails its turn, and best_tier then finds no tier
                continue
            walked = list(filter(holding.members.__contains__, inside))
            paying = list(map(rank.__getitem__, walked))
            # The weights held, as the request joined (held.py), not as it is now; m is 1.0 in a
            # replay, and 1.0 x a weight > 0 is that weight exactly.
            bids = [m * weight(r) for r in walked]
            tiers = self._walk(list(map(self._held.prompt_len, walked)), bids, paying, ahead, left)
            stepped.update((r, k) for r, k, was in zip(walked, tiers, paying) if k != was)
        return out, stepped

    def _walk(self, lengths: list[int], bids: list[float], paying: list[int], ahead: list[int], left: float) -> list[int]:
        """Each of one bidder's requests' tier in this round (-1: unpaid) when they are billed out
        of its budget `left` (step 2 of the module docstring): tiers high to low, each in the
        inside order (`lengths`', their prompt tokens as they joined), a request its bill does not
        fit stepping down to the best tier that the rest covers, where it is billed in that tier's
        turn. `paying`: the tiers bought (-1: it bids 0)."""
        prices, tiers = self.prices, list(paying)
        turns: list[list[int]] = [[] for _ in prices]  # each tier's requests, walked in its turn
        for i, k in enumerate(paying):
            if k >= 0:
                turns[k].append(i)
        for k in range(len(prices) - 1, -1, -1):
            turns[k].sort()  # those stepped down merge in the inside order
            for i in turns[k]:
                length = lengths[i]
                bill = prices[k] * length
                if bill <= left:
                    left -= bill
                    continue
                j = best_tier(bids[i], length, ahead[:k], prices[:k], self.seconds_per_request, left)
                tiers[i] = j
                if j >= 0:
                    turns[j].append(i)
        return tiers

    def __repr__(self) -> str:
        return f"{type(self).__name__}(prices={self.prices}, inside={self.inside!r})"


class TiersLPM(ServiceTiers):
    """Service tiers with the longest cached prefix first inside a tier ("tiers_lpm")."""

    name = "tiers_lpm"

    def __init__(
        self, base_price: float = BASE_PRICE, ratios: Sequence[float] = tuple(TIER_RATIOS.values()),
        seconds_per_request: float = SECONDS_PER_REQUEST,
    ) -> None:
        super().__init__(base_price, ratios, "lpm", seconds_per_request)

"""Posted-price service tiers: priority sold at fixed prices per token, as API providers sell it.

K tiers, each with a price per prompt token (default: flex 0.5, standard 1.0 and priority 1.8 x
`base_price`, Google's Flex and Priority PayGo ratios); a higher tier is admitted first, FCFS
(`tiers`) or longest cached prefix first (`tiers_lpm`) inside. Each request buys its tier once by a
best response to the waits it expects, within its bidder's budget left; a bidder's bills in a round
never exceed that budget. The rules in full: docs/markets.md ("The best response", "Out of budget").
"""

from __future__ import annotations

import math
from typing import Sequence

from ..policy import AdmissionPolicy, WaitingRound, round_bids
from ..request import Request
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


def check_prices(prices: Sequence[float]) -> tuple[float, ...]:
    """`prices` as floats; ValueError unless they are finite, > 0 and strictly increasing."""
    values = tuple(float(p) for p in prices)
    if not values or not all(0.0 < p < math.inf for p in values) or any(a >= b for a, b in zip(values, values[1:])):
        raise ValueError(f"tier prices must be finite, > 0 and strictly increasing, got {list(prices)}")
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
        self.prices = check_prices([base_price * r for r in check_prices(ratios)])
        if inside not in INSIDE:
            raise ValueError(f"inside must be one of {', '.join(INSIDE)}, got {inside!r}")
        if not (isinstance(seconds_per_request, (int, float)) and 0.0 < seconds_per_request < math.inf):
            raise ValueError(f"seconds_per_request must be finite and > 0, got {seconds_per_request!r}")
        self.inside, self.seconds_per_request = inside, float(seconds_per_request)
        self._tier: dict[int, int] = {}  # request id -> the tier it bought, while it waits

    def decide_round(self, round: WaitingRound) -> PostedRound:
        """The round over `queue`: new requests buy their tiers, each bidder's budget left
        (`remaining`, one per bidder; None: no budget binds) steps down what it cannot cover, then
        tiers high to low, each in its inside order; bills for the paying requests."""
        queue, remaining = round.queue, round.remaining
        bids = round_bids(queue, round.multipliers)
        tiers, ahead = self._buy(queue, bids, remaining)
        rank = list(range(len(queue)))
        if self.inside == "lpm":
            negated = [-n for n in round.prefix_lens]
            rank.sort(key=negated.__getitem__)
        paying = [tiers[i] if bids[i] > 0 else -1 for i in range(len(queue))]
        if remaining is not None:
            paying = self._within_budgets(queue, bids, paying, ahead, rank, remaining)
        rank.sort(key=lambda i: -paying[i])  # stable: the inside order within a tier
        bills = {queue[i].id: (queue[i].bidder, self.prices[paying[i]] * queue[i].prompt_len)
                 for i in range(len(queue)) if paying[i] >= 0}
        return PostedRound([queue[i] for i in rank], bills, self.prices)

    def _buy(
        self, queue: Sequence[Request], bids: list[float], remaining: Sequence[float] | None
    ) -> tuple[list[int], list[int]]:
        """Each request's tier (kept if bought before, else bought now by the best response among
        the tiers its bidder's budget left covers, in queue order, so a request sees those that
        came before it), and the paying requests waiting in tiers >= k, for each k, after it."""
        held, tiers = self._tier, []
        self._tier = kept = {}
        counts = [0] * len(self.prices)
        for r, b in zip(queue, bids):
            k = held.get(r.id)
            if k is not None and b > 0:
                counts[k] += 1
        for r, b in zip(queue, bids):
            k = held.get(r.id)
            if k is None:
                k = -1
                if b > 0:
                    ahead = [sum(counts[j:]) for j in range(len(counts))]
                    budget = math.inf if remaining is None else remaining[r.bidder]
                    k = best_tier(b, r.prompt_len, ahead, self.prices, self.seconds_per_request, budget)
                if k >= 0:
                    counts[k] += 1
                else:  # bid 0, or no tier covered: the cheapest, unpaid while it is not covered
                    k = 0
            kept[r.id] = k
            tiers.append(k)
        return tiers, [sum(counts[j:]) for j in range(len(counts))]

    def _within_budgets(
        self, queue: Sequence[Request], bids: list[float], paying: list[int], ahead: list[int],
        inside: list[int], remaining: Sequence[float],
    ) -> list[int]:
        """Each request's tier in this round (-1: unpaid) when each bidder's requests are billed
        in the round's order out of its budget left (step 2 of the module docstring). `paying`:
        the tiers bought (-1 for bid 0); `inside`: the request indices in the inside order."""
        prices, tiers, left = self.prices, list(paying), list(remaining)
        place = [0] * len(queue)
        for position, i in enumerate(inside):
            place[i] = position
        turns: list[list[int]] = [[] for _ in prices]  # each tier's requests, walked in its turn
        for i in inside:
            if tiers[i] >= 0:
                turns[tiers[i]].append(i)
        for k in range(len(prices) - 1, -1, -1):
            for i in sorted(turns[k], key=place.__getitem__):  # those stepped down merge in order
                r = queue[i]
                bill = prices[k] * r.prompt_len
                if bill <= left[r.bidder]:
                    left[r.bidder] -= bill
                    continue
                j = best_tier(bids[i], r.prompt_len, ahead[:k], prices[:k], self.seconds_per_request, left[r.bidder])
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

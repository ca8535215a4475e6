"""Posted-price service tiers: priority sold at fixed prices per token, as API providers sell it.

K tiers, each with a price per prompt token (default: flex 0.5, standard 1.0 and priority 1.8
times `base_price`, Google's Flex and Priority PayGo ratios; OpenAI's `service_tier` sells the
same three). A higher tier is admitted first; inside a tier the order is FCFS (SGLang's only order
with priorities, `inside="fcfs"`, registered as "tiers") or longest cached prefix first (what users
ask for, `inside="lpm"`, registered as "tiers_lpm").

Best response (the rule each request's tier is bought by, once, when the design first sees it
waiting): a request with bid b (its bidder's multiplier x its urgency in a market: what it is
willing to pay per second saved, so the env's action keeps its meaning and pacing works unchanged)
and P prompt tokens buys the tier k that minimizes b x W_k + price_k x P, ties to the cheaper.
W_k = (paying requests waiting in tiers >= k) x `seconds_per_request` is the wait it expects in
tier k: the requests ahead of it there, each holding the engine about 1 / served rate seconds. The
rule reads the provider's queue by tier (as a provider's status page would publish it), not the
bidder's observation, so the env's observation is RadixAuction-v0's, unchanged; a learner sees the
total queue only.

A request with bid 0 (its bidder's budget is spent: the market sets its multiplier to 0) is served
as under the auction, behind every paying request, and pays nothing; it keeps the tier it bought
and pays for it if its bidder bids again before it is admitted. Payment: the tier's price x the
request's prompt tokens, its bill, charged in the round that admits it (`PostedRound.charges`).

Budgets (a market's rounds: `decide` is given `remaining`, each bidder's budget left before the
round, `WaitingRound.remaining`, as it is given the multipliers). A bidder that cannot pay a tier takes a
cheaper one it can pay, and one that can pay none is served unpaid, as above. Precisely:

1. A request buys its tier by the best response among the tiers whose bill its bidder's budget
   left covers (`best_tier` with `budget`); if it covers none, the request holds the cheapest
   tier, which step 2 then finds unpaid.
2. Each round, the round's paying requests are walked in the round's admission order (tiers high
   to low, the inside order within a tier), each bidder's budget left shrinking by the bill of each
   of its requests walked. A request whose bill is covered keeps its tier; one whose bill is not
   steps down, for this round, to the best response among the cheaper tiers what its bidder has
   left covers (the same rule, with the waits W_k of the round's queue as bought) and is walked
   again in that tier's turn; one for which no cheaper tier is covered is served unpaid (behind
   every paying request, pays nothing) in this round. A request keeps the tier it bought: the next
   round walks it from there again.

So the bills of one bidder's paying requests in a round add up to at most its budget left, and
whichever of them the engine admits (it admits from the front of the order as memory allows, and
may move some behind, `engine.in_batch`), together they never overspend: the market's cap at what
is left never cuts a bill (beyond float rounding). In a replay (`remaining` None) no budget binds
and every bill is covered.
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

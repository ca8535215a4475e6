"""What a posted-price design's waiting requests hold, followed from round to round by the queue's changes.

A posted-price design (tiers.py, congestion.py) keeps the choice each request bought while it waits,
and each round needs, per choice, how many of the paying requests (bid > 0) hold it, and each
request's class in the order. `HeldChoices` follows the queue by the changes the engine reports
(`WaitingRound.changes`), or by comparing request ids without them, and keeps per bidder the count
and prompt tokens per choice of its requests that bid when their bidder's multiplier does, so a
round costs its changes and its bidders in Python steps, plus C-level passes to order the queue.

A request's bid is its bidder's multiplier x its urgency in a market, its own `bid` in a replay
(`policy.round_bids`); this module calls what the multiplier scales its weight. A bidder whose
multiplier times the least weight it holds is > 0 has every request bidding (rounding is
monotone), so only a bidder at multiplier 0, or one whose products may underflow, is looked at
request by request.

Every field a design reads of a request is read once, when the design first holds it: its weights
(its urgency and its `bid` both, as they are then; a new request's bid that is NaN, < 0 or inf is
refused then, by the design's `check_bids`), its bidder and its prompt length (`HeldChoices.joined`).
Every later use (its class, the counts, the tiers' step-down, the bills, its leaving, a change of
bid kind, the hand-over from the compiled book) reads the stored values (`HeldChoices.weight`,
`bidder`, `prompt_len`), never the request again. A request's fields may be changed while it waits
(a caller's own object); reading them again in some steps and not in others would price a round
by two weights at once, bill or count it under another bidder than the one it is held under (or
fail to find that bidder's holding when it leaves), and the compiled book, which keeps each
request's fields from when it joined, would decide a third way. At a change of bid kind the other
stored field becomes the weight, unchecked until then: `HeldChoices.check_switch` refuses a bid
from it that is NaN, < 0 or inf, naming the request, before anything moves.

On the compiled core (`auction_gym.core`) a design keeps what its requests hold in a `PostedBook`
(`compiled_book`), which decides its rounds in one call each (docs/design.md section 8); at an
input it does not take as it is, the design goes on in Python from what the book held (`taken_over`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter, is_
from typing import Sequence

from ..core import active, compiled_module
from ..policy import QueueDelta, check_bidders, check_bids
from ..request import Request

_ID = attrgetter("id")


@dataclass(eq=False, slots=True)
class Holding:
    """One bidder's held requests that weigh > 0: per choice, their count, prompt tokens and each
    one's prompt tokens; with fixed prices, each one's bill. Read-only outside `HeldChoices`."""

    members: dict[Request, None]
    count: list[int]
    tokens: list[int]
    lens: list[dict[Request, int]]
    bills: dict[int, tuple[int, float]] = field(default_factory=dict)
    least: float = float("inf")
    """The least weight held since the bidder's first request (a bound: it never rises on a removal)."""
    shortest: int = 2**63
    """The fewest prompt tokens held since the bidder's first request (a bound, as `least`)."""

    def all_bid(self, m: float) -> bool:
        """Whether each of these requests bids > 0 at multiplier `m`."""
        return m * self.least > 0


@dataclass(eq=False, slots=True)
class HeldChoices:
    """The choices the requests of the last round's queue hold; see the module docstring.

    Args:
        choices: how many choices there are (0 to choices - 1).
        prices: each choice's price per prompt token, when fixed (`bills` then answers).
    """

    choices: int
    prices: Sequence[float] | None = None
    choice: dict[int, int] = field(default_factory=dict)
    """Request id -> the choice it holds."""
    rank: dict[Request, int] = field(default_factory=dict)
    """Request -> its class when its bidder's multiplier is > 0: its choice if it weighs > 0, else -1."""
    request: dict[int, Request] = field(default_factory=dict)
    joined: dict[int, tuple[float, float, int, int]] = field(default_factory=dict)
    """Request id -> its (urgency, bid, bidder, prompt_len) as read when it was first held (module docstring)."""
    _bidders: dict[int, Holding] = field(default_factory=dict)
    _replay: bool = False
    _cache: object = None

    def weight(self, r: Request) -> float:
        """What the round's multiplier scales into held `r`'s bid (its own bid in a replay), as read
        when it was first held."""
        return self.joined[r.id][self._replay]

    def bidder(self, r: Request) -> int:
        """Held `r`'s bidder, as read when it was first held."""
        return self.joined[r.id][2]

    def prompt_len(self, r: Request) -> int:
        """Held `r`'s prompt tokens, as read when it was first held."""
        return self.joined[r.id][3]

    def check_bidders(self, queue: Sequence[Request], per_bidder: Sequence[float], name: str) -> None:
        """`policy.check_bidders` over the bidders `queue`'s round reads: a held request's as it
        joined (one weighing > 0 is read through its bidder's holding), a new one's as it is. C-level
        passes unless a bidder, held or now, has no entry in `per_bidder`."""
        n, bidders, request, rank = len(per_bidder), self._bidders, self.request, self.rank
        if bidders and not (0 <= min(bidders) and max(bidders) < n):
            # One that leaves this round is not read: its holding is gone before the round reads any.
            weighing = [r for r in queue if request.get(r.id) is r and rank[r] >= 0]
            check_bidders(weighing, per_bidder, name, list(map(self.bidder, weighing)))
        try:
            check_bidders(queue, per_bidder, name)
        except ValueError:  # a request whose bidder changed while held is read as it joined, above
            check_bidders([r for r in queue if request.get(r.id) is not r], per_bidder, name)

    def check_switch(self, queue: Sequence[Request], multipliers: Sequence[float] | None) -> None:
        """Before a round over `queue` at `multipliers` that changes the bid kind (a replay's own
        bids or not): ValueError naming the first held request still waiting whose bid by the weight
        it now takes (its other stored field, which no check has seen) is NaN, < 0 or inf, as
        `check_bids` names a new one's. Nothing is read when the kind stays."""
        if (multipliers is None) == self._replay:
            return
        request, joined = self.request, self.joined
        requests = [r for r in queue if request.get(r.id) is r]  # one that leaves is weighed by nothing
        if multipliers is None:
            bids = [joined[r.id][1] for r in requests]
        else:
            stored = list(map(self.bidder, requests))
            # One weighing nothing until now, so not in `check_bidders`' holdings.
            check_bidders(requests, multipliers, "multipliers", stored)
            bids = [multipliers[b] * joined[r.id][0] for r, b in zip(requests, stored)]
        check_bids(requests, bids)

    def follow(self, queue: Sequence[Request], changes: QueueDelta | None, replay: bool, cache: object) -> list[Request]:
        """Drop the requests that left since the last round and return those new in `queue`, in
        its order, for the caller to `hold`. `changes` are trusted when they lead from the last
        round's queue to this one (sizes, members, the new ones at the queue's end, the same
        `cache`); otherwise the ids are compared. `replay`: whether bids are the requests' own."""
        if replay != self._replay:  # another weight: every class and count changes with it
            self._replay = replay
            for r in list(self.request.values()):
                fields = self.joined[r.id]  # the fields it joined with, not the request's now
                self.hold(r, self.drop(r), fields)
        same_engine, self._cache = cache is self._cache, cache
        if changes is not None and same_engine and self._leads_to(queue, changes):
            for r in changes.left:
                self.drop(r)
            return list(changes.joined)
        return self._compare(queue)

    def _leads_to(self, queue: Sequence[Request], changes: QueueDelta) -> bool:
        request, left, joined = self.request, changes.left, changes.joined
        if len(request) - len(left) + len(joined) != len(queue):
            return False
        if not all(map(is_, map(request.get, map(_ID, left)), left)) or any(map(request.__contains__, map(_ID, joined))):
            return False
        # The sizes can balance while a request waits that neither side names: the requests before
        # the joined ones must be exactly those held but not left.
        stayed, gone = queue[:len(queue) - len(joined)], set(map(_ID, left))
        if len(gone) != len(left) or not gone.isdisjoint(map(_ID, stayed)):
            return False
        if not all(map(is_, map(request.get, map(_ID, stayed)), stayed)):
            return False
        return all(map(is_, queue[len(queue) - len(joined):], joined))

    def _compare(self, queue: Sequence[Request]) -> list[Request]:
        request, new = self.request, []
        present = set(map(_ID, queue))
        for r in [r for rid, r in request.items() if rid not in present]:
            self.drop(r)
        for r in queue:
            held = request.get(r.id)
            if held is None:
                new.append(r)
            elif held is not r:  # another object under a held id holds what the id held
                self.hold(r, self.drop(held))
        return new

    def hold(self, r: Request, k: int, fields: tuple[float, float, int, int] | None = None) -> None:
        """`r` (not held) holds choice `k`; `fields`: its (urgency, bid, bidder, prompt_len) when it
        was first held (None: it is first held now, and they are read)."""
        if fields is None:
            fields = (r.urgency, r.bid, r.bidder, r.prompt_len)
        self.request[r.id], self.choice[r.id], self.joined[r.id] = r, k, fields
        w = fields[self._replay]
        if not w > 0:
            self.rank[r] = -1
            return
        self.rank[r] = k
        b, length = fields[2], fields[3]
        bidder = self._bidders.get(b)
        if bidder is None:
            n = self.choices
            bidder = self._bidders[b] = Holding({}, [0] * n, [0] * n, [{} for _ in range(n)])
        bidder.members[r] = None
        bidder.count[k] += 1
        bidder.tokens[k] += length
        bidder.lens[k][r] = length
        if self.prices is not None:
            bidder.bills[r.id] = (b, self.prices[k] * length)
        bidder.least = min(bidder.least, w)
        bidder.shortest = min(bidder.shortest, length)

    def drop(self, r: Request) -> int:
        """Forget held `r`; returns the choice it held."""
        k = self.choice.pop(r.id)
        b = self.joined.pop(r.id)[2]  # its Holding is the one it joined, whatever its bidder is now
        del self.request[r.id]
        if self.rank.pop(r) < 0:
            return k
        bidder = self._bidders[b]
        del bidder.members[r]
        if not bidder.members:
            del self._bidders[b]
            return k
        bidder.count[k] -= 1
        bidder.tokens[k] -= bidder.lens[k].pop(r)
        bidder.bills.pop(r.id, None)
        return k

    def paying(self, multipliers: Sequence[float] | None) -> tuple[list[int], list[Request]]:
        """The held requests bidding > 0 in a round at `multipliers`, counted per choice, and the
        held ones that weigh > 0 and bid 0 (their bidder's multiplier is 0, or the product underflows)."""
        counts, unpaid = [0] * self.choices, []
        for _, m, bidder in self.bidders(multipliers):
            if bidder.all_bid(m):
                for k, c in enumerate(bidder.count):
                    counts[k] += c
            elif m == 0:
                unpaid.extend(bidder.members)
            else:
                for r in bidder.members:
                    if m * self.weight(r) > 0:
                        counts[self.rank[r]] += 1
                    else:
                        unpaid.append(r)
        return counts, unpaid

    def ranks(self, unpaid: list[Request]) -> dict[Request, int]:
        """Each held request's class in a round where `unpaid` (held, weighing > 0) bid 0: `rank`,
        with those at -1 (`rank` itself, not a copy, when none are)."""
        return {**self.rank, **dict.fromkeys(unpaid, -1)} if unpaid else self.rank

    def holding(self, b: int) -> Holding:
        """What bidder `b` holds (it holds a request that weighs > 0)."""
        return self._bidders[b]

    def bidders(self, multipliers: Sequence[float] | None) -> list[tuple[int, float, Holding]]:
        """(bidder, its multiplier at `multipliers`, what it holds) for each bidder holding a
        request that weighs > 0."""
        if multipliers is None:
            return [(b, 1.0, bidder) for b, bidder in self._bidders.items()]
        return [(b, multipliers[b], bidder) for b, bidder in self._bidders.items()]

    def bills(self, multipliers: Sequence[float] | None, unpaid: set[int]) -> dict[int, tuple[int, float]]:
        """Request id -> (its bidder, its price x prompt tokens at the choice it holds), for the
        held requests bidding > 0 at `multipliers` but those of the bidders in `unpaid` (a new
        dict; with fixed prices)."""
        bills: dict[int, tuple[int, float]] = {}
        for b, m, bidder in self.bidders(multipliers):
            if b in unpaid:
                continue
            if bidder.all_bid(m):
                bills.update(bidder.bills)
            elif m != 0:
                bills.update((r.id, bidder.bills[r.id]) for r in bidder.members if m * self.weight(r) > 0)
        return bills

    def lengths(self, k: int, multipliers: Sequence[float] | None) -> list[tuple[int, dict[Request, int]]]:
        """(bidder, its requests holding choice `k` and bidding > 0 at `multipliers` -> their
        prompt tokens) for each bidder with a request bidding > 0 (the dicts read-only)."""
        out = []
        for b, m, bidder in self.bidders(multipliers):
            if bidder.all_bid(m):
                out.append((b, bidder.lens[k]))
            elif m != 0:
                out.append((b, {r: n for r, n in bidder.lens[k].items() if m * self.weight(r) > 0}))
        return out


def compiled_book(choices: int, prices: Sequence[float] | None, seconds: float) -> object | None:
    """The compiled core's `PostedBook` for a design built on it (`auction_gym.core.active`), else None."""
    module = compiled_module() if active() == "compiled" else None
    return None if module is None else module.PostedBook(choices, list(prices or ()), seconds)


def taken_over(book: object, choices: int, prices: Sequence[float] | None) -> HeldChoices:
    """`HeldChoices` holding what `book` held, for a design to go on from in Python: the same
    choices and the fields the book read when each request joined (its weights, bidder and prompt
    tokens), so the same rounds (the bills' order in the dict may differ)."""
    entries, replay, cache = book.held()
    held = HeldChoices(choices, prices, _replay=replay, _cache=cache)
    for r, k, *fields in entries:
        held.hold(r, k, tuple(fields))
    return held

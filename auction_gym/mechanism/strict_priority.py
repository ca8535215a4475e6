"""The strict priority auction (the unconstrained market): order by bid, VCG-style payments.

Order: bid descending, ties by the longest cached prefix (under the default `tie_break`,
"cached_prefix"; so requests that bid 0 keep LPM's order), then arrival, then request id.
Completion times come from the same cost model as the radix auction (queue_tree.completion_times).

Payments: p_i = (others' cost in the strict order of Q without i) subtracted from (others' cost in
the strict order of Q), with cost = sum bid x completion. Removing i keeps the others' relative
order, so the difference has a closed form over ranks k = 0..n-1 of the order. For another
bidder's request r, C_r drops by
  - h for each of i's requests ranked before r (h = 1 under "unit", request_overhead else), and
  - under "tokens", e_v for each tree node v whose first request (rank a_v) is i's and whose first
    request of another bidder has rank c_v > rank r (the node's edge was computed for i at a_v and
    is computed for the others only at c_v; c_v = n when no other bidder reaches v).
Hence, with others_i(a, c) the sum of non-i bids at ranks strictly between a and c,
    p_i = h * sum_{x in Q_i} others_i(rank x, n)
          + sum_{v: first request is i's} e_v * others_i(a_v, c_v)
          + sum_{x in Q_i} e_x * others_i(rank x, n),
the last term for the own edges of requests hanging alone below their node (queue_tree), which no
other request reaches.
Under "unit" this is sum over others' r of b_r x (number of i's requests ahead of r), and the strict
order is welfare-optimal over all orders, so this is exact VCG over all orders.
Cost: O(n log n) for the sort and the rank look-ups, plus O(n + V) for the tree under "tokens".
On the compiled core the queue's checks, the order and the payments run in C++
(`csrc/strict_priority.cpp`, docs/design.md section 8), an engine's round of plain inputs in one
call (`StrictPriorityAuction.admit`) and its charges in one more (`ChargedRound`), this module's
code staying the reference and the fallback for inputs the compiled calls do not take.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate
from typing import Any, Iterable, Sequence

import numpy as np

from ..core import active, compiled_module
from ..policy import AdmissionPolicy, Decision, WaitingRound, check_bids
from ..request import Request
from .base import AuctionMechanism, AuctionRound, Cached, overrides_any
from .queue_tree import QueueTree, TokenMemo, build_queue_tree, completion_times
from .radix_auction import ROUNDING
from .validation import validate_requests


@dataclass(eq=False)
class StrictAllocation:
    """The strict order of one round, with what the payments need.

    The order does not depend on the cost model, so the queue's radix tree and the completion
    times, which only the payments and the outcome use, are built on first use: an engine that
    only asks for orders (a replay without charging) never pays for them.
    """

    requests: list[Request]
    bids: list[float]
    order: list[int]
    rank: list[int]
    """rank[r]: position of request r in `order`."""
    tokens: list[np.ndarray]
    prefix_lens: Sequence[int] | None
    """Cached prefix length per request under "tokens"; None under "unit"."""
    request_work: float
    memo: TokenMemo | Any = field(default=None, repr=False)
    """The auction's memo of its prompts' order: a `TokenMemo` on the Python core, the compiled
    builder's `PromptMemo` on the compiled one."""
    compiled: bool = False
    """Whether the auction was built on the compiled core (its payments run there)."""
    ordered: list[Request] | None = field(default=None, repr=False)
    """The requests in `order`, where the compiled round made them already."""

    @property
    def admission(self) -> list[Request]:
        """The requests in the strict order (a new list)."""
        if self.ordered is not None:
            return list(self.ordered)
        requests = self.requests
        return [requests[r] for r in self.order]

    def whole(self, pricing: object) -> StrictAllocation:
        """Itself: it holds what the payments read."""
        return self

    @cached_property
    def tree(self) -> QueueTree | None:
        """The queue's radix tree under "tokens"; None under "unit"."""
        return None if self.prefix_lens is None else build_queue_tree(self.tokens, self.prefix_lens, self.memo)

    @cached_property
    def completion(self) -> list[float]:
        """C_r per position in `requests`."""
        if self.tree is None:
            return [float(k + 1) for k in self.rank]
        return completion_times(self.tree, self.order, self.request_work)

    @cached_property
    def cost(self) -> float:
        """sum_r b_r C_r in `order` (= -welfare)."""
        return math.fsum(map(operator.mul, self.bids, self.completion))


@dataclass(eq=False, slots=True)
class ChargedRound(AuctionRound):
    """A round the compiled calls decided (`StrictPriorityAuction.admit`), whose charges are one more
    (`_core.strict_charges`): the same values as `AuctionRound.charges`, bit for bit, which takes
    the inputs that call does not (and a round whose outcome was read, or of one request)."""

    def charges(
        self, admitted: Sequence[int], per_bidder: Sequence[int], seconds_per_unit: float
    ) -> dict[int, float]:
        alloc = self.allocation
        if self._outcome_cache is None and len(self.requests) > 1 and alloc.compiled:
            tree = alloc.tree
            if tree is None or tree.compiled is not None:
                due = compiled_module().strict_charges(
                    None if tree is None else tree.compiled, alloc.requests, alloc.bids, alloc.order,
                    alloc.request_work, per_bidder, seconds_per_unit)
                if due is not None:
                    return due
        return AuctionRound.charges(self, admitted, per_bidder, seconds_per_unit)


_ROUND_LAYERS = ("decides", "decide_round", "_round", "_decide", "_skip", "_unchanged", "_prefix_lens", "allocate")
"""The layers `StrictPriorityAuction.admit`'s compiled round stands in for: a subclass that overrides
one of them has its rounds decided through them."""


class StrictPriorityAuction(AuctionMechanism):
    """Highest bid first, with the closed-form payments of the module docstring."""

    name = "strict_vcg"

    def __init__(self, cost_model: str = "tokens", request_overhead: float = 1.0,
                 tie_break: str = "cached_prefix") -> None:
        super().__init__(cost_model, request_overhead, tie_break)
        self._compiled = active() == "compiled"  # a flag, not the module: the auction stays copyable
        # The compiled builder's memo, whose copies start empty (as a memo can).
        self._prompt_memo = compiled_module().PromptMemo() if self._compiled else None
        self._compiled_rounds = self._compiled and not overrides_any(type(self), StrictPriorityAuction, _ROUND_LAYERS)
        """Whether `admit` may decide a round through the compiled calls (decided once)."""
        self._compiled_charges = self._compiled_rounds and not overrides_any(
            type(self), StrictPriorityAuction, ("pricing", "payments"))
        """Whether those rounds charge through the compiled closed form (`ChargedRound`)."""

    def admit(self, round: WaitingRound) -> tuple[list[Request], Decision | None]:
        """`AdmissionPolicy.admit`. On the compiled core an engine's round of plain inputs is decided
        with `decide_round`'s layers written out: its bids and cached lengths read over the queue,
        compared with the last round's and its allocation made in one compiled call
        (`_core.strict_round`; else `_core.strict_bids` and `_core.strict_allocation`), unless this
        class overrides a layer they stand in for (`_ROUND_LAYERS`); other inputs go through the
        layers, which raise their own errors."""
        if self._compiled_rounds and round.queue:
            decided = self._compiled_round(round)
            if decided is not None:
                return decided
        return AdmissionPolicy.admit(self, round)

    def _compiled_round(self, round: WaitingRound) -> tuple[list[Request], AuctionRound] | None:
        """`admit` of a non-empty round through the compiled calls; None, nothing changed, where the
        first does not take the round's inputs (or, under "tokens", the round has no engine's lengths).
        As `_round`, the last allocation is reused when the inputs are the same, unchecked. Plain
        inputs whose checks pass are read, compared with the last round's and decided in one call
        (`_core.strict_round`); any other go through the calls one by one."""
        costed = self.cost_model == "tokens"
        if costed and round.length_of is None:
            return None
        requests, core = list(round.queue), compiled_module()
        length_of = round.length_of if costed else None
        fused = core.strict_round(requests, round.multipliers, length_of, self.cache_ties, self._last)
        if fused is True:  # the last round's inputs: its allocation and copies of its inputs' lists
            _, kept, lens, allocation = self._last
            return allocation.admission, self._round_of(
                requests, list(kept), None if lens is None else list(lens), allocation)
        if fused is not None:
            bids, lens, *decided = fused
            check_bids(requests, bids)  # the compiled calls refuse a NaN bid only
            allocation = self._compiled_allocation(requests, bids, lens, decided)
            self._last = requests, bids, lens, allocation
            return allocation.admission, self._round_of(requests, bids, lens, allocation)
        read = core.strict_bids(requests, round.multipliers, length_of)
        if read is None:
            return None
        bids, lens = read
        check_bids(requests, bids)
        allocation = self._unchanged(requests, bids, lens)
        if allocation is None:
            decided = core.strict_allocation(requests, bids, lens, self.cache_ties)
            if decided is None:  # a check fails or an input is not plain: allocate raises or takes it
                allocation = self._decide(requests, bids, lens, round.cache, round.multipliers,
                                          round.changes if costed else None)
            else:
                allocation = self._compiled_allocation(requests, bids, lens, decided)
            self._last = requests, bids, lens, allocation
        return allocation.admission, self._round_of(requests, bids, lens, allocation)

    def _round_of(self, requests: list[Request], bids: list[float], lens: list[int] | None,
                  allocation: StrictAllocation) -> AuctionRound:
        """The decision of a round the compiled calls decided: one that charges in one more call
        where this class prices its rounds as strict priority does (`_compiled_charges`)."""
        kind = ChargedRound if self._compiled_charges else AuctionRound
        return kind(self.pricing, requests, bids, lens, allocation)

    def _compiled_allocation(self, requests: list[Request], bids: list[float], lens: list[int] | None,
                             decided: Sequence) -> StrictAllocation:
        """The allocation of a compiled call's (order, rank, tokens, admission), with its own bids, as
        allocate's: the round's may be changed."""
        order, rank, tokens, ordered = decided
        return StrictAllocation(
            requests=requests, bids=list(bids), order=order, rank=rank, tokens=tokens, prefix_lens=lens,
            request_work=self.request_work, memo=self._prompt_memo, compiled=True, ordered=ordered)

    def allocate(
        self, requests: Sequence[Request], cached: Cached = None, prefix_lens: Sequence[int] | None = None,
        bids: Sequence[float] | None = None,
    ) -> StrictAllocation:
        """Order a non-empty queue by bid (ties by cached prefix under `cache_ties`, then by
        arrival, then id) and cost it."""
        requests, core = list(requests), compiled_module() if self._compiled else None
        plain = None if core is None else core.plain_requests(requests)
        tokens, own = validate_requests(requests, self._memo.held) if plain is None else plain
        bids = self._checked_bids(requests, own, bids)
        lens = self._prefix_lens(tokens, cached, prefix_lens)
        n = len(requests)
        cached_first = lens if self.cache_ties and lens is not None else [0] * n
        ranked = None if core is None else core.strict_order(requests, bids, cached_first)
        if ranked is None:
            order = sorted(range(n), key=lambda r: (-bids[r], -cached_first[r], requests[r].arrival, requests[r].id))
            rank = [0] * n
            for k, r in enumerate(order):
                rank[r] = k
        else:
            order, rank = ranked
        # The compiled builder may attach equal prompts in another order than the memo's, which
        # neither the completion times nor the payments (`_first_requests`) read.
        return StrictAllocation(
            requests=requests, bids=bids, order=order, rank=rank, tokens=tokens, prefix_lens=lens,
            request_work=self.request_work, memo=self._prompt_memo if self._compiled else self._memo,
            compiled=self._compiled,
        )

    def payments(self, alloc: StrictAllocation, bidders: Iterable[int] | None = None) -> dict[int, float]:
        """Payments of `bidders` (default: every bidder in the round) by the closed form; all of
        them cost O(n + V) together, so a subset is cut from the whole."""
        pay = _compiled_payments(alloc)
        if pay is None:
            pay = _closed_form(alloc)
        for i, p in pay.items():
            if p < 0.0 and p < -ROUNDING * max(alloc.cost, 1.0):  # the cost only where it is read
                raise AssertionError(f"negative strict-priority payment {p} for bidder {i}")
            pay[i] = max(p, 0.0)
        return pay if bidders is None else {i: pay.get(i, 0.0) for i in bidders}


def _compiled_payments(alloc: StrictAllocation) -> dict[int, float] | None:
    """`_closed_form` in C++ (`csrc/strict_priority.cpp`), for an allocation made on the compiled
    core whose tree, if any, the compiled builder made; None where it does not run."""
    if not alloc.compiled:
        return None
    tree = alloc.tree
    if tree is not None and tree.compiled is None:
        return None
    paid = compiled_module().strict_payments(
        None if tree is None else tree.compiled, alloc.requests, alloc.bids, alloc.order, alloc.request_work)
    return None if paid is None else dict(zip(*paid))


def _closed_form(alloc: StrictAllocation) -> dict[int, float]:
    """Each bidder's payment in the round by the module docstring's closed form, before the
    clip at 0 (bidders in the order of their first request)."""
    requests, bids, order, rank, tree = alloc.requests, alloc.bids, alloc.order, alloc.rank, alloc.tree
    n, overhead = len(order), alloc.request_work
    total = list(accumulate((bids[r] for r in order), initial=0.0))  # bids at ranks < k
    ranks: dict[int, list[int]] = {}
    cum: dict[int, list[float]] = {}
    place = [0] * n  # request r is the place[r]-th of its bidder's in the order
    for k, r in enumerate(order):
        i = requests[r].bidder
        own = ranks.setdefault(i, [])
        place[r] = len(own)
        own.append(k)
        cum.setdefault(i, [0.0]).append(cum[i][-1] + bids[r])

    def others_between(i: int, a: int, c: int) -> float:
        """Bids of requests not of bidder i at ranks a < k < c."""
        own = cum[i][bisect_left(ranks[i], c)] - cum[i][bisect_left(ranks[i], a + 1)]
        return (total[c] - total[a + 1]) - own

    # others_between(i, k, n) of each of bidder i's ranks k, its j-th: the bisections give m
    # (every rank is below n) and j + 1 (ranks are distinct and ascending), so no search.
    after = {i: [(total[n] - total[k + 1]) - (cum[i][len(ks)] - cum[i][j + 1]) for j, k in enumerate(ks)]
             for i, ks in ranks.items()}
    pay = {i: overhead * sum(tails) for i, tails in after.items()}
    if tree is not None:
        for v, (a, i, c) in enumerate(_first_requests(tree, requests, rank)):
            if tree.edge_work[v] > 0:
                pay[i] += tree.edge_work[v] * others_between(i, a, c)
        for r, e in enumerate(tree.req_work):  # own edges: nobody else reaches them
            if e > 0:
                i = requests[r].bidder
                pay[i] += e * after[i][place[r]]
    return pay


def _first_requests(
    tree: QueueTree, requests: list[Request], rank: list[int]
) -> list[tuple[int, int, int]]:
    """Per node: (rank a of its first request, that request's bidder, rank c of its first request
    of another bidder, n if none), over the requests of its subtree. Children first, O(n + V)."""
    n = len(rank)
    first: list[tuple[int, int, int]] = [(n, -1, n)] * tree.n_nodes
    for v in range(tree.n_nodes - 1, -1, -1):
        items = [(rank[r], requests[r].bidder, n) for r in tree.attached[v]]
        items += [first[c] for c in tree.children[v]]
        a, i, _ = min(items, key=lambda t: t[0])
        c = min(ai if bi != i else ci for ai, bi, ci in items)
        first[v] = (a, i, c)
    return first

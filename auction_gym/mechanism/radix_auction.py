"""The radix-tree auction: welfare-maximal depth-first order and its VCG payments.

Allocation: Smith's rule on the blocks of the queue's radix tree (queue_tree, smith.py), children
before parents; the optimal cost is F_root, so W = -F_root. Payments: p_i = (cost of the others in
the chosen order) - (optimal cost without bidder i), recomputed only on the nodes above i's top
blocks (`interaction_after_change`). Cost model "tokens" by default (uncached edge tokens plus
request_overhead per request). The block stats, the complexity and why tokens:
docs/economic-model.md section 3 ("The radix auction's algorithm").

As the engine's policy (`decide_round`) a round of two requests or more is allocated by the
`TreeAllocator` (allocator.py), kept across rounds; this module builds a round from scratch only
when one is priced without multipliers, or a round of one request is read in full.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ..policy import AdmissionPolicy, Decision, QueueDelta, WaitingRound, check_bids, round_bids
from ..radix_cache import RadixCache
from ..request import Request
from .allocator import OrderedRound, TreeAllocator
from .base import AuctionMechanism, AuctionRound, Cached, overrides_any
from .factored import FactoredAllocation
from .outcome import AuctionOutcome
from .queue_tree import QueueTree, build_queue_tree, completion_times
from .smith import (
    NodeIndex,
    SortKey,
    block_key,
    block_keys,
    depth_first,
    index_node,
    interaction_after_change,
    tie_value,
    tree_stats,
)
from .validation import validate_requests

_MIXED = object()  # owner of a node whose subtree holds more than one bidder
ROUNDING = 1e-9  # payments above -ROUNDING * (total cost) are rounding noise, clipped to 0


@dataclass(eq=False)
class RadixAllocation:
    """The allocation of one round, with what the payments reuse.

    Blocks are numbered: node v -> v, request r -> n_nodes + r (r = position in the queue).
    `s`, `p`, `f`, `tie`, `key` (Smith sort key) are per block; `sorted_blocks[v]`, `g[v]`,
    `sum_f[v]` per node.
    """

    requests: list[Request]
    bids: list[float]
    tree: QueueTree
    s: list[float]
    p: list[float]
    f: list[float]
    tie: list[int]
    key: list[SortKey]
    sorted_blocks: list[list[int]]
    g: list[float]
    sum_f: list[float]
    order: list[int]
    completion: list[float]
    cost: float
    """sum_r b_r C_r in the chosen order (= -welfare)."""

    @property
    def leaf_owner(self) -> list[int]:
        """The bidder of each leaf block: here the requests."""
        return [req.bidder for req in self.requests]

    def own_cost(self, bidder: int) -> float:
        """sum b_r C_r over `bidder`'s requests."""
        return sum([b * c for r, b, c in zip(self.requests, self.bids, self.completion) if r.bidder == bidder])

    @property
    def admission(self) -> list[Request]:
        """The requests in the chosen order."""
        requests = self.requests
        return [requests[r] for r in self.order]

    def whole(self, pricing: AuctionMechanism) -> RadixAllocation:
        """Itself: it holds what the payments read."""
        return self


Decided = RadixAllocation | OrderedRound | FactoredAllocation
"""What `RadixTreeAuction` decides a round with."""

_ROUND_LAYERS = ("decides", "decide_round", "_round", "_decide", "_skip", "pricing", "payments", "full")
"""The layers `RadixTreeAuction.admit`'s compiled path stands in for: a subclass that overrides one
of them has its rounds decided through them."""


@dataclass(eq=False, slots=True)
class CompiledRound(AuctionRound):
    """A market's round decided in one compiled call (`RadixTreeAuction.admit`, which makes it with
    its allocation, a `FactoredAllocation` read from the compiled round on first use), whose charges
    are one more: the same values as `AuctionRound.charges`, bit for bit. Its bids, which a market's
    step does not read, are made a list on first use."""

    stateless_charges = True
    """Its charges are a function of the round (the compiled call's, or the rule's where that one
    declines the counts), so the market asks them without keeping the first answer."""

    def __getattr__(self, name: str) -> object:
        # Called only for a slot not set yet: the bids, the allocation's (made a list there now).
        if name != "bids":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.bids = self.allocation.bids
        return self.bids

    def charges(
        self, admitted: Sequence[int], per_bidder: Sequence[int], seconds_per_unit: float
    ) -> dict[int, float]:
        if self._outcome_cache is None:
            try:
                return self.allocation.compiled.charges(per_bidder, seconds_per_unit, ROUNDING)
            except TypeError:  # counts that are not ints: the Python rule takes them
                pass
        return AuctionRound.charges(self, admitted, per_bidder, seconds_per_unit)


@dataclass(eq=False, slots=True)
class LoneRound(AuctionRound):
    """A market's round of one request decided without the layers (`RadixTreeAuction.admit`): a
    lone bidder delays nobody, so it charges nothing, as `AuctionRound.charges` finds (its payment
    is 0 whether or not the outcome was read)."""

    stateless_charges = True

    def charges(
        self, admitted: Sequence[int], per_bidder: Sequence[int], seconds_per_unit: float
    ) -> dict[int, float]:
        return {}


def _bids_differ(compiled: object, last: tuple) -> bool:
    """Whether the bids of a round `compiled` decided (`RoundTree.market_round`) differ from those
    of the `last` round (`AuctionMechanism._last`), found without making either a list where the
    last round was decided so too and nobody made its bids a list (else False: `_unchanged` says)."""
    allocation = last[3]
    return last[1] is None and "bids" not in allocation.__dict__ and not compiled.same_bids(allocation.compiled)


class RadixTreeAuction(AuctionMechanism):
    """Welfare-maximal order over the depth-first range of the queue's radix tree, VCG payments.

    Child blocks are visited by (sum of bids) / (work) descending, zero-work blocks first, equal
    ratios by the `tie_break` rule (`smith.TIE_BREAKS`; by default the block with the longest cached
    prefix first, then the smallest request id).

    See the module docstring for the algorithm and its complexity.
    """

    name = "radix_vcg"
    in_batch = True
    """SGLang's in-batch prefix check applies: the order is cache-aware, as `lpm`'s is."""

    def __init__(self, cost_model: str = "tokens", request_overhead: float = 1.0,
                 tie_break: str = "cached_prefix") -> None:
        super().__init__(cost_model, request_overhead, tie_break)
        self._allocator = TreeAllocator(self.request_work, costed=self.cost_model == "tokens",
                                        cache_ties=self.cache_ties)
        """The engine's rounds of two requests or more (allocator.py)."""
        self._own_layers = not overrides_any(type(self), RadixTreeAuction, _ROUND_LAYERS)
        """Whether this class overrides none of the layers the compiled path stands in for (decided once)."""
        self._compiled_rounds = self._own_layers and self._allocator.compiled
        """Whether `admit` may decide a market's round in one compiled call, standing in for the layers
        (decided once; under "unit" too, where the tree follows the engine's changes and reads no lengths)."""

    def admit(self, round: WaitingRound) -> tuple[list[Request], Decision | None]:
        """`AdmissionPolicy.admit`. On the compiled core, a market's round of two requests or more
        that follows the engine's changes is decided in one compiled call (docs/design.md section 8),
        and a round of one request without the layers, with the same order, bids and allocation as
        `decide_round`'s, unless this class overrides a layer they stand in for (`_ROUND_LAYERS`)."""
        if self._compiled_rounds and (multipliers := round.multipliers) is not None:
            queue = round.queue
            waiting = len(queue)
            if waiting == 1:
                return self._lone_round(round, multipliers)
            if waiting > 1 and (changes := round.changes) is not None and (
                    admitted := self._market_round(queue, multipliers, changes, round.length_of)) is not None:
                return admitted
        return AdmissionPolicy.admit(self, round)

    def _lone_round(self, round: WaitingRound, multipliers: Sequence[float]) -> tuple[list[Request], AuctionRound]:
        """`admit` of a market's round of one request (about a third of RadixAuction-v1's rounds),
        `decide_round`'s layers written out: the same checks in the same order (of plain inputs made
        in one compiled call, `TreeAllocator.lone_round`, which makes the round's values), the
        round's changes kept for the tree's next round, the last allocation reused when the inputs
        are the same."""
        requests = list(round.queue)
        read = self._allocator.lone_round(requests, multipliers, round.length_of)
        if read is None:
            decision = self._checked_lone_round(round, requests, multipliers)
            return list(decision.allocation.admission), decision
        decision = read[1]
        bids, lens = decision.bids, decision.prefix_lens
        kept = self._unchanged(requests, bids, lens)
        self._allocator.skip(round.changes)
        decision.pricing = self._pricing or self.pricing
        if kept is None:
            self._last = requests, bids, lens, decision.allocation
            return read
        decision.allocation = kept
        return list(kept.admission), decision

    def _checked_lone_round(
        self, round: WaitingRound, requests: list[Request], multipliers: Sequence[float]
    ) -> AuctionRound:
        """`_lone_round` of inputs the compiled call does not take as they are, checked here."""
        bids, lens = round_bids(requests, multipliers), round.prefix_lens if self.cost_model == "tokens" else None
        allocation = self._unchanged(requests, bids, lens)
        self._allocator.skip(round.changes)
        if allocation is None:
            validate_requests(requests, self._memo.held)
            check_bids(requests, bids)
            allocation = OrderedRound(requests, bids, lens, list(requests))
            self._last = requests, bids, lens, allocation
        return LoneRound(self._pricing or self.pricing, requests, bids, lens, allocation)

    def _market_round(
        self, queue: Sequence[Request], multipliers: Sequence[float], changes: QueueDelta,
        lens_of: Mapping[Request, int] | None,
    ) -> tuple[list[Request], AuctionRound] | None:
        """`admit` of a market's round over `queue` in one compiled call (`TreeAllocator.market_round`,
        which copies the queue there and makes the round's values), priced and kept here, or the last
        round's allocation reused when the inputs are the same; None, with nothing changed, when that
        call does not take the round's inputs."""
        admitted = self._allocator.market_round(queue, multipliers, changes, lens_of)
        if admitted is None:
            return None
        decision = admitted[1]
        allocation, requests, lens = decision.allocation, decision.requests, decision.prefix_lens
        # The tree's request work, as the layers' `CompiledQueueTree.factored` passes it.
        allocation.request_work = self._allocator.request_work
        # `pricing` is not overridden here (`_ROUND_LAYERS`), so once made it is read without its frame.
        pricing = self._pricing or self.pricing
        last = self._last
        if last is not None and len(last[0]) == len(requests) and not _bids_differ(allocation.compiled, last):
            bids = allocation.compiled.bids
            if (kept := self._unchanged(requests, bids, lens)) is not None:
                return list(kept.admission), AuctionRound(pricing, requests, bids, lens, kept)
        decision.pricing = pricing
        self._last = requests, None, lens, allocation
        return admitted

    def allocate(
        self, requests: Sequence[Request], cached: Cached = None, prefix_lens: Sequence[int] | None = None,
        bids: Sequence[float] | None = None,
    ) -> RadixAllocation:
        """The welfare-maximal order and its costs (no payments) over a non-empty queue, built
        from scratch (the oracle the kept trees are tested against)."""
        requests = list(requests)
        tokens, own = validate_requests(requests, self._memo.held)  # the memo's arrays passed already
        lens = self._prefix_lens(tokens, cached, prefix_lens)
        tree = build_queue_tree(tokens, lens, self._memo)
        ties = [tie_value(r.id, c, self.cache_ties) for r, c in zip(requests, [0] * len(requests) if lens is None else lens)]
        return self._allocate_over(requests, self._checked_bids(requests, own, bids), tree, ties)

    def _allocate_over(
        self, requests: list[Request], bids: list[float], tree: QueueTree, ties: list[int],
    ) -> RadixAllocation:
        """The allocation of `requests` with `bids` over their queue tree (one request or many),
        `ties` each request's tie-break value (`smith.tie_value`)."""
        if len(requests) == 1:
            return self._allocate_lone(requests, bids, tree, ties[0])
        return self._allocate_tree(requests, bids, tree, ties)

    def _decide(
        self, requests: list[Request], bids: list[float], prefix_lens: list[int] | None, cache: RadixCache,
        multipliers: Sequence[float] | None = None, changes: QueueDelta | None = None,
    ) -> Decided:
        """A round of two requests or more: the allocator's (allocator.py). A lone request:
        itself, its allocation built on first use."""
        if len(requests) > 1:
            return self._allocator.allocate(requests, bids, prefix_lens, multipliers, changes)
        # Nothing to order (over half the rounds of the default scenario).
        self._allocator.skip(changes)
        validate_requests(requests, self._memo.held)
        check_bids(requests, bids)  # the round's bid, which in a market is not the request's
        return OrderedRound(requests, bids, prefix_lens, list(requests))

    def _skip(self, changes: QueueDelta | None) -> None:
        self._allocator.skip(changes)

    def full(self, alloc: Decided) -> RadixAllocation | FactoredAllocation:
        """The allocation the payments read (an `OrderedRound`'s built from scratch, once)."""
        return alloc.whole(self)

    def outcome(self, alloc: Decided) -> AuctionOutcome:
        return super().outcome(self.full(alloc))

    def _allocate_tree(
        self, requests: list[Request], bids: list[float], tree: QueueTree, ties: list[int],
    ) -> RadixAllocation:
        """Block stats children before parents, Smith order at each node, then the depth-first order."""
        nn, overhead = tree.n_nodes, self.request_work
        own_p = [e + overhead for e in tree.req_work]  # a hanging request's own edge, then its overhead
        s = [0.0] * nn + bids
        p = [0.0] * nn + own_p
        f = [0.0] * nn + [e * b + b * overhead for e, b in zip(tree.req_work, bids)]
        tie = [0] * nn + ties
        key: list[SortKey | None] = [None] * nn
        key += block_keys(bids, own_p, ties)
        sorted_blocks, g, sum_f = tree_stats(tree.children, tree.attached, tree.edge_work, s, p, f, tie, key)
        order = depth_first(sorted_blocks, nn)
        completion = completion_times(tree, order, overhead)
        return RadixAllocation(
            requests=requests, bids=bids, tree=tree, s=s, p=p, f=f, tie=tie, key=key, sorted_blocks=sorted_blocks,
            g=g, sum_f=sum_f, order=order, completion=completion, cost=math.fsum(map(operator.mul, bids, completion)),
        )

    def _allocate_lone(self, requests: list[Request], bids: list[float], tree: QueueTree, rid: int) -> RadixAllocation:
        """`_allocate_tree` of a queue of one (the root and the request's block; over half the
        rounds of the default scenario), with the same values and without the loops; `rid` its
        tie-break value."""
        (b,), (e,) = bids, tree.req_work
        own = e + self.request_work
        f = e * b + b * self.request_work
        key = block_key(b, own, rid)
        return RadixAllocation(
            requests=requests, bids=bids, tree=tree, s=[b, b], p=[own, own], f=[f, f], tie=[rid, rid],
            key=[key, key], sorted_blocks=[[1]], g=[0.0], sum_f=[f], order=[0], completion=[own], cost=b * own,
        )

    def payments(self, alloc: Decided, bidders: Iterable[int] | None = None) -> dict[int, float]:
        """VCG payment of each of `bidders` (default: every bidder in the round; one without a
        request in it pays 0); see the module docstring."""
        alloc = self.full(alloc)
        leaf_owner = alloc.leaf_owner
        present = dict.fromkeys(leaf_owner)  # the round's bidders, in order of first leaf
        priced = list(present) if bidders is None else [i for i in bidders if i in present]
        payments = {i: 0.0 for i in (present if bidders is None else bidders)}
        if len(present) == 1 or not priced:  # a lone bidder delays nobody else
            return payments
        compiled = getattr(alloc, "compiled", None)  # a round decided on the compiled core prices itself
        unclipped = compiled.payments(priced) if compiled is not None else self._unclipped(alloc, present, priced)
        for bidder, pay in zip(priced, unclipped):
            if pay < 0:
                if pay < -ROUNDING * max(alloc.cost, 1.0):
                    raise AssertionError(f"negative VCG payment {pay} for bidder {bidder}")
                pay = 0.0
            payments[bidder] = pay
        return payments

    def _unclipped(
        self, alloc: RadixAllocation | FactoredAllocation, present: Iterable[int], priced: list[int],
    ) -> list[float]:
        """The payment of each of `priced` before the rounding clip: (cost of the others in the chosen
        order) - (optimal cost without it)."""
        nn = alloc.tree.n_nodes
        # Per bidder, its top blocks grouped by parent node, in each node's sorted order.
        owner: list[object] = [_MIXED] * nn + alloc.leaf_owner
        tops: dict[int, dict[int, list[int]]] = {i: {} for i in present}
        for v in range(nn - 1, -1, -1):  # children before parents
            blocks = alloc.sorted_blocks[v]
            owners = set(map(owner.__getitem__, blocks))
            if len(owners) == 1:
                owner[v] = owners.pop()  # one bidder, or _MIXED for a lone mixed child
                continue
            for b in blocks:
                if owner[b] is not _MIXED:
                    tops[owner[b]].setdefault(v, []).append(b)
        indexes: dict[int, NodeIndex] = {}
        pos = [0] * len(owner)
        return [(alloc.cost - alloc.own_cost(i)) - self._cost_without(alloc, tops[i], indexes, pos) for i in priced]

    def _cost_without(
        self,
        alloc: RadixAllocation | FactoredAllocation,
        leaving: dict[int, list[int]],
        indexes: dict[int, NodeIndex],
        pos: list[int],
    ) -> float:
        """Optimal cost of the queue without one bidder's requests, given as its top blocks
        `leaving` grouped by parent node."""
        parent = alloc.tree.parent
        affected: list[int] = []  # children before parents
        if len(leaving) == 1:  # one path (the usual case; the root alone in the agentic workload)
            v = next(iter(leaving))
            while v >= 0:
                affected.append(v)
                v = parent[v]
        else:
            seen: set[int] = set()
            for v in leaving:
                while v >= 0 and v not in seen:
                    seen.add(v)
                    v = parent[v]
            affected = sorted(seen, reverse=True)
        s, p, f, tie = alloc.s, alloc.p, alloc.f, alloc.tie
        entering: dict[int, list[tuple[int, float, float, float]]] = {}
        for v in affected:
            index = indexes.get(v)
            if index is None:
                index = indexes[v] = index_node(alloc.sorted_blocks[v], alloc.key, s, p, pos)
            out = leaving.get(v, ())
            new = entering.get(v, ())
            gone = [(pos[b], s[b], p[b]) for b in out]
            back = []
            if new:  # changed children: the old version leaves, the new one comes back
                gone += [(pos[c], s[c], p[c]) for c, *_ in new]
                back = [(block_key(bs, bp, tie[c]), bs, bp) for c, bs, bp, _ in new]
            inter = interaction_after_change(alloc.g[v], index, gone, back)
            internal = alloc.sum_f[v] - sum([f[b] for b in out])
            for c, _, _, bf in new:
                internal += bf - f[c]
            if v == 0:  # the root
                return internal + inter
            bid_sum = index.cum_s[-1] - sum([s[b] for b in out])
            work = index.cum_p[-1] - sum([p[b] for b in out])
            for c, bs, bp, _ in new:
                bid_sum += bs - s[c]
                work += bp - p[c]
            e = alloc.tree.edge_work[v]
            entering.setdefault(parent[v], []).append(
                (v, bid_sum, e + work, e * bid_sum + internal + inter)
            )
        raise AssertionError("the root is an ancestor of every removed block")


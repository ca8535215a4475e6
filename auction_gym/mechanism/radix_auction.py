"""The radix-tree auction: welfare-maximal depth-first order and its VCG payments.

Allocation. In the queue's radix tree (see queue_tree), a block is a child subtree or a request that
ends at the node. Block stats, children before parents:
    request r:  S = b_r, P = w, F = b_r * w             (w = 1 under "unit", request_overhead else)
    node v:     S = sum S_j, P = e_v + sum P_j, F = e_v * S + sum F_j + G_v
where e_v is the uncached edge work and G_v the interaction term of v's blocks in Smith order
(smith.py). The order visits blocks depth-first in that order, and the optimal cost is F_root, so
W = -F_root; the outcome's welfare is recomputed as -sum b_r C_r from the completion times.
Cost: O(n log n + L) to build the tree (L = total tokens) and O(sum_v d_v log d_v) to sort, d_v the
number of blocks at v; O(n) prefix_len walks of the cache under "tokens".

Payments. p_i = (cost of the others in the chosen order) - (optimal cost without bidder i), both as
sum of bid x completion. Removing i deletes i's "top" blocks: the blocks wholly owned by i whose
parent node also holds another bidder. Only the nodes on the paths from those parents to the root
change, and each of them still holds another bidder, so none empties. Bottom-up over those nodes,
the new G comes from `interaction_after_change` in O(m_v log d_v) for m_v changed blocks, and the
new (S, P, F) of the node goes up to its parent as a changed block. Total:
    O(n + V) for ownership and the costs in the chosen order, plus
    O(sum_i sum_{v in A_i} m_v log d_v), A_i = nodes above i's top blocks,
i.e. at most O(sum_r depth_r log d) over all bidders, against O(B * allocation) for re-running the
allocation per bidder. When each bidder owns whole subtrees under the root (the agentic workload:
a system prompt per bidder), A_i is the root alone and m = 1, so all payments cost
O(n + V + B log B).
Changed blocks keep their old tie-break id: ties do not change the cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..request import Request
from ..scheduler.base import register_scheduler
from .base import AuctionMechanism, Cached
from .outcome import AuctionOutcome
from .queue_tree import QueueTree, build_queue_tree, cached_prefix_lengths, completion_times
from .smith import NodeIndex, block_key, index_node, interaction_after_change
from .validation import validate_requests

_MIXED = object()  # owner of a node whose subtree holds more than one bidder
ROUNDING = 1e-9  # payments above -ROUNDING * (total cost) are rounding noise, clipped to 0


@dataclass(eq=False)
class RadixAllocation:
    """The allocation of one round, with what the payments reuse.

    Blocks are numbered: node v -> v, request r -> n_nodes + r (r = position in the queue).
    `s`, `p`, `f`, `tie` are per block; `sorted_blocks[v]`, `g[v]`, `sum_f[v]` per node.
    """

    requests: list[Request]
    bids: list[float]
    tree: QueueTree
    s: list[float]
    p: list[float]
    f: list[float]
    tie: list[int]
    sorted_blocks: list[list[int]]
    g: list[float]
    sum_f: list[float]
    order: list[int]
    completion: list[float]
    cost: float
    """sum_r b_r C_r in the chosen order (= -welfare)."""


@register_scheduler("radix_vcg")
class RadixTreeAuction(AuctionMechanism):
    """Welfare-maximal order over the depth-first range of the queue's radix tree, VCG payments.

    Child blocks are visited by (sum of bids) / (work) descending, zero-work blocks first, equal
    ratios by the smallest request id in the block.

    See the module docstring for the algorithm and its complexity.
    """

    name = "radix_vcg"

    def run(self, requests: Sequence[Request], cached: Cached = None) -> AuctionOutcome:
        """Order `requests` and price them; `cached` is the round's cached set (RadixCache, token
        sequences, or None). Raises ValueError on invalid bids, duplicate ids or empty tokens."""
        if len(requests) == 0:
            return AuctionOutcome()
        alloc = self.allocate(requests, cached)
        return AuctionOutcome(
            order=[alloc.requests[r].id for r in alloc.order],
            payments=self.payments(alloc),
            welfare=-alloc.cost,
            completion={req.id: c for req, c in zip(alloc.requests, alloc.completion)},
        )

    def allocate(self, requests: Sequence[Request], cached: Cached = None) -> RadixAllocation:
        """The allocation alone (no payments), for `run` and for timing it separately."""
        requests = list(requests)
        tokens, bids = validate_requests(requests)
        n = len(requests)
        prefix_lens = None if self.cost_model == "unit" else cached_prefix_lengths(tokens, cached)
        tree = build_queue_tree(tokens, prefix_lens, self._byte_keys(tokens))
        nn, w = tree.n_nodes, self.request_work
        s = [0.0] * nn + bids
        p = [0.0] * nn + [w] * n
        f = [0.0] * nn + [b * w for b in bids]
        tie = [0] * nn + [req.id for req in requests]
        sorted_blocks: list[list[int]] = [[] for _ in range(nn)]
        g, sum_f = [0.0] * nn, [0.0] * nn
        for v in range(nn - 1, -1, -1):
            blocks = tree.children[v] + [nn + r for r in tree.ends[v]]
            blocks.sort(key=lambda b: block_key(s[b], p[b], tie[b]))
            work = inter = bid_sum = internal = 0.0
            for b in blocks:
                inter += s[b] * work
                work += p[b]
                bid_sum += s[b]
                internal += f[b]
            e = tree.edge_work[v]
            s[v], p[v], f[v] = bid_sum, e + work, e * bid_sum + internal + inter
            tie[v] = min(tie[b] for b in blocks)
            sorted_blocks[v], g[v], sum_f[v] = blocks, inter, internal
        order: list[int] = []
        todo = [0]
        while todo:
            b = todo.pop()
            if b >= nn:
                order.append(b - nn)
            else:
                todo.extend(reversed(sorted_blocks[b]))
        completion = completion_times(tree, order, w)
        cost = math.fsum(b * c for b, c in zip(bids, completion))
        return RadixAllocation(
            requests, bids, tree, s, p, f, tie, sorted_blocks, g, sum_f, order, completion, cost
        )

    def payments(self, alloc: RadixAllocation) -> dict[int, float]:
        """VCG payment of every bidder in the round (see the module docstring)."""
        tree, requests, nn = alloc.tree, alloc.requests, alloc.tree.n_nodes
        owner: list[object] = [_MIXED] * nn + [req.bidder for req in requests]
        own_cost: dict[int, float] = {}
        for req, b, c in zip(requests, alloc.bids, alloc.completion):
            own_cost[req.bidder] = own_cost.get(req.bidder, 0.0) + b * c
        for v in range(nn - 1, -1, -1):
            owners = {owner[b] for b in alloc.sorted_blocks[v]}
            owner[v] = owners.pop() if len(owners) == 1 else _MIXED
        if owner[0] is not _MIXED:
            return {owner[0]: 0.0}
        tops: dict[int, list[int]] = {i: [] for i in own_cost}
        for v in range(nn):
            if owner[v] is _MIXED:
                for b in alloc.sorted_blocks[v]:
                    if owner[b] is not _MIXED:
                        tops[owner[b]].append(b)
        indexes: dict[int, NodeIndex] = {}
        pos = [0] * len(owner)
        payments: dict[int, float] = {}
        for bidder, blocks in tops.items():
            without = self._cost_without(alloc, blocks, indexes, pos)
            pay = (alloc.cost - own_cost[bidder]) - without
            if pay < 0:
                if pay < -ROUNDING * max(alloc.cost, 1.0):
                    raise AssertionError(f"negative VCG payment {pay} for bidder {bidder}")
                pay = 0.0
            payments[bidder] = pay
        return payments

    def _cost_without(
        self,
        alloc: RadixAllocation,
        removed: list[int],
        indexes: dict[int, NodeIndex],
        pos: list[int],
    ) -> float:
        """Optimal cost of the queue without the blocks `removed` (all of one bidder's requests)."""
        tree, nn = alloc.tree, alloc.tree.n_nodes
        leaving: dict[int, list[int]] = {}
        entering: dict[int, list[tuple[int, float, float, float]]] = {}
        for b in removed:
            v = tree.parent[b] if b < nn else tree.req_node[b - nn]
            leaving.setdefault(v, []).append(b)
        affected: set[int] = set()
        for v in list(leaving):
            while v >= 0 and v not in affected:
                affected.add(v)
                v = tree.parent[v]
        s, p, f, tie = alloc.s, alloc.p, alloc.f, alloc.tie
        for v in sorted(affected, reverse=True):  # children before parents
            index = indexes.get(v)
            if index is None:
                index = indexes[v] = index_node(alloc.sorted_blocks[v], s, p, tie, pos)
            out = leaving.get(v, [])
            new = entering.get(v, [])
            inter = interaction_after_change(
                alloc.g[v],
                index,
                [(pos[b], s[b], p[b]) for b in out] + [(pos[c], s[c], p[c]) for c, *_ in new],
                [(block_key(bs, bp, tie[c]), bs, bp) for c, bs, bp, _ in new],
            )
            bid_sum = index.cum_s[-1] - sum(s[b] for b in out)
            work = index.cum_p[-1] - sum(p[b] for b in out)
            internal = alloc.sum_f[v] - sum(f[b] for b in out)
            for c, bs, bp, bf in new:
                bid_sum += bs - s[c]
                work += bp - p[c]
                internal += bf - f[c]
            e = tree.edge_work[v]
            if v == 0:
                return internal + inter
            entering.setdefault(tree.parent[v], []).append(
                (v, bid_sum, e + work, e * bid_sum + internal + inter)
            )
        raise AssertionError("the root is an ancestor of every removed block")

"""Smith's rule on the child blocks of one node, and the node's cost when some blocks change.

A block is a child subtree or a request ending at the node. Block b has bid sum S_b, work P_b (the
completion units it adds to everything served after it) and internal cost F_b (sum of bid x
completion inside the block, measured from the block's start). Served in a given order, the blocks
of a node cost

    sum_j F_j + G,    G = sum_j S_j * (sum of P over the blocks before j),

and G is minimised by sorting on S/P descending (an adjacent exchange changes G by
S_a P_b - S_b P_a). Zero-work blocks come first. Equal keys cost the same in either order, so the
tie-break is free to serve the cache: under "cached_prefix" (`TIE_BREAKS`) tied blocks go by the
longest cached prefix among their requests, then by the smallest request id, which is LPM's order
inside the depth-first range and leaves every cost, and so every VCG payment, as it was; under
"request_id" by the smallest request id alone. Ties are what requests that bid 0 (a bidder out of
budget) meet at every node, so the rule decides where unpaid requests are served
(docs/design.md section 3).

`interaction_after_change` gives G of the optimal order after m blocks leave and m' <= m (changed
versions of some of them) come back, from prefix sums over the old sorted order, in
O((m + m') log d) for a node of d blocks instead of re-sorting in O(d log d).

`tree_stats` applies the rule at every node of a tree of blocks, children before parents, and
`depth_first` reads the order it decides.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate

SortKey = tuple[int, float, int]
TIE_BREAKS = ("cached_prefix", "request_id")
"""How blocks whose Smith keys tie are ordered: longest cached prefix first, then smallest request id;
or smallest request id alone (the order before the cache-aware rule, which `RadixAuction-v0` and
`-v1` keep)."""
TIE_SPAN = 1 << 64
"""A block's tie value packs (longest cached prefix, smallest id) into one int, id - cached x
TIE_SPAN, so comparing and taking the min of ties stays one integer operation; exact while request
ids are below 2^63 in magnitude."""


def tie_value(request_id: int, cached: int, cache_first: bool) -> int:
    """A request's tie-break value (smaller is served first among equal keys): `request_id`, less
    `cached` x TIE_SPAN when `cache_first`. A block's is the min of its requests'."""
    return request_id - cached * TIE_SPAN if cache_first and cached else request_id


def check_tie_break(tie_break: str) -> bool:
    """Whether `tie_break` (one of TIE_BREAKS) serves the longest cached prefix first; ValueError
    for another name."""
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"unknown tie_break {tie_break!r}; valid: {', '.join(TIE_BREAKS)}")
    return tie_break == "cached_prefix"


def block_key(s: float, p: float, tie: int) -> SortKey:
    """Sort key: zero-work blocks first, then S/P descending, then `tie` (`tie_value`)."""
    return (0, 0.0, tie) if p == 0 else (1, -s / p, tie)


def block_keys(s: list[float], p: list[float], tie: list[int]) -> list[SortKey]:
    """`block_key` of each block: the same keys, without a call per block when no block has zero
    work (every request's own block when the per-request overhead is positive, the default)."""
    if 0.0 in p:
        return list(map(block_key, s, p, tie))
    return [(1, -b / w, t) for b, w, t in zip(s, p, tie)]


@dataclass(eq=False)
class NodeIndex:
    """Prefix sums over a node's blocks in their optimal order: cum_*[k] sums the first k blocks."""

    keys: list[SortKey]
    cum_p: list[float]
    cum_s: list[float]


def index_node(
    blocks: list[int], key: list[SortKey], s: list[float], p: list[float], pos: list[int]
) -> NodeIndex:
    """Index `blocks` (already in optimal order; `key`, `s`, `p` per block) and record each
    block's rank in `pos`. O(d)."""
    for k, b in enumerate(blocks):
        pos[b] = k
    return NodeIndex(
        keys=list(map(key.__getitem__, blocks)),
        cum_p=list(accumulate(map(p.__getitem__, blocks), initial=0.0)),
        cum_s=list(accumulate(map(s.__getitem__, blocks), initial=0.0)),
    )


def interaction_after_change(
    g: float,
    index: NodeIndex,
    leaving: list[tuple[int, float, float]],
    entering: list[tuple[SortKey, float, float]],
) -> float:
    """G of the optimal order after the blocks `leaving` (rank, S, P) go and `entering` (key, S, P)
    come in; `g` is G before. Keys of entering blocks must differ from every staying block's key.

    With U the staying blocks, X the leaving ones and Y the entering ones:
    G(U) = G - sum_x [S_x P(before x) + P_x S(after x)] + G(X)   (pairs inside X were taken twice),
    G' = G(U) + sum_y [S_y P_U(before y) + P_y S_U(after y)] + G(Y).
    """
    leaving = sorted(leaving)
    s_total = index.cum_s[-1]
    ranks: list[int] = []
    cum_xp, cum_xs = [0.0], [0.0]
    strip = 0.0
    for rank, s, p in leaving:
        strip += s * index.cum_p[rank] + p * (s_total - index.cum_s[rank + 1]) - s * cum_xp[-1]
        ranks.append(rank)
        cum_xp.append(cum_xp[-1] + p)
        cum_xs.append(cum_xs[-1] + s)
    g -= strip
    before_y = 0.0
    for key, s, p in sorted(entering):
        at = bisect_left(index.keys, key)
        j = bisect_left(ranks, at)  # leaving blocks ranked before the insertion point
        p_before = index.cum_p[at] - cum_xp[j] + before_y
        s_after = (s_total - index.cum_s[at]) - (cum_xs[-1] - cum_xs[j])
        g += s * p_before + p * s_after
        before_y += p
    return g


def tree_stats(
    children: list[list[int]], attached: list[list[int]], edge_work: list[float],
    s: list[float], p: list[float], f: list[float], tie: list[int], key: list[SortKey | None],
) -> tuple[list[list[int]], list[float], list[float]]:
    """Smith order at every node of a tree of blocks, and the nodes' block stats.

    Nodes are numbered 0..V-1 with every child after its parent (node 0 the root); node v has the
    child nodes `children[v]`, the leaf blocks `attached[v]` (leaf k is block V + k) and the
    uncached work `edge_work[v]` on the edge into it. `s`, `p`, `f`, `tie`, `key` hold an entry
    per block, the leaves' filled in; the nodes' are written here, children before parents:
        S = sum S_j,  P = e_v + sum P_j,  F = e_v * S + sum F_j + G_v,  tie = min tie_j.
    Returns, per node, its blocks in Smith order, G_v and sum F_j."""
    nn = len(children)
    sorted_blocks: list[list[int]] = [[]] * nn
    g, sum_f = [0.0] * nn, [0.0] * nn
    key_of, tie_of = key.__getitem__, tie.__getitem__
    for v in range(nn - 1, -1, -1):
        blocks = children[v] + [nn + r for r in attached[v]]
        blocks.sort(key=key_of)
        work = inter = bid_sum = internal = 0.0
        for b in blocks:
            sb = s[b]
            inter += sb * work
            work += p[b]
            bid_sum += sb
            internal += f[b]
        e = edge_work[v]
        s[v], p[v], f[v] = bid_sum, e + work, e * bid_sum + internal + inter
        tie[v] = min(map(tie_of, blocks))
        key[v] = block_key(s[v], p[v], tie[v])
        sorted_blocks[v] = blocks
        g[v], sum_f[v] = inter, internal
    return sorted_blocks, g, sum_f


def depth_first(sorted_blocks: list[list[int]], n_nodes: int) -> list[int]:
    """The leaves (block - n_nodes) in the depth-first order that visits each node's blocks in
    `sorted_blocks` order from the root (node 0)."""
    order: list[int] = []
    path = [iter(sorted_blocks[0])]  # the blocks still to visit at each open node
    while path:
        for b in path[-1]:
            if b < n_nodes:
                path.append(iter(sorted_blocks[b]))
                break
            order.append(b - n_nodes)
        else:
            path.pop()
    return order

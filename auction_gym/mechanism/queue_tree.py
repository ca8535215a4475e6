"""The radix (compressed trie) tree of a waiting queue, with the uncached work on each edge.

Nodes are numbered 0..V-1 from the root down (node 0 is the root, the empty prefix; pre-order), so
every child has a larger index than its parent and a loop over reversed indices visits children
before parents.
Requests are numbered by their position in the queue as given (0..n-1). Each request is attached to
one node: the node whose depth equals its length (several requests with the same tokens end at the
same node), or, for a request that shares no token beyond some node with any other request, that
node: such a request hangs below it on an edge of its own rather than as a leaf node, which saves a
node per request on the common path of building, sorting and pricing.

Invariants:
- every non-root node has depth > its parent's and at least two blocks (children and attached
  requests);
- `edge_work[v]` = tokens on the edge into v that are not in the cached set, `req_work[r]` the same
  for the own edge of a hanging request (0 for the root, for a request that ends at its node, and
  under the "unit" cost model); cached tokens always form a prefix of a root path.

The cached set is a set of token prefixes fixed for the round: a prefix of request r of length L is
cached iff L <= prefix_len[r]; a node is cached up to the largest such length among the requests of
its subtree (with a page_size-1 cache every request below agrees; with larger pages this takes the
closure so the set stays prefix-closed). VCG's "same cached set" is this set, kept when requests
are removed.

Complexity: building is O(n log n) comparisons of byte strings plus O(L) vectorised token
comparisons (L = total tokens) for the longest common prefixes, and O(n) Python steps for the
stack that turns the sorted sequences into the tree; V <= n. With a `TokenMemo` kept across
rounds, only the prompts new since the last round are compared (O(log n) each) and only new pairs
of sorted neighbours get their common prefix computed.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass
from typing import Container, Iterable, Sequence

import numpy as np

from ..radix_cache import RadixCache
from ..request import as_tokens


@dataclass(eq=False)
class QueueTree:
    """Parent-pointer tree of the queue; see the module docstring for numbering and invariants."""

    parent: list[int]
    """parent[v]; -1 for the root."""
    depth: list[int]
    """Tokens from the root to v."""
    children: list[list[int]]
    """Child nodes of v, in no particular order."""
    attached: list[list[int]]
    """Requests attached to v: ending at v or hanging below it."""
    edge_work: list[float]
    """Uncached tokens on the edge into v."""
    req_node: list[int]
    """The node request r is attached to."""
    req_work: list[float]
    """Uncached tokens on request r's own edge below its node (0 if it ends there)."""

    @property
    def n_nodes(self) -> int:
        return len(self.parent)


def cached_prefix_lengths(
    tokens: Sequence[np.ndarray], cached: RadixCache | Iterable[Sequence[int]] | None
) -> list[int]:
    """Per request, the length of its longest prefix in the cached set (tokens).

    `cached` is a RadixCache (read with `prefix_len`, which leaves it untouched), an iterable of
    token sequences whose prefixes are all cached, or None (nothing cached).
    """
    if cached is None:
        return [0] * len(tokens)
    if not isinstance(cached, RadixCache):
        sequences = cached
        cached = RadixCache(page_size=1)
        for seq in sequences:
            cached.insert(as_tokens(seq, "cached sequence"))
    return [cached.prefix_len(t) for t in tokens]


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two non-empty token arrays."""
    m = min(len(a), len(b))
    neq = a[:m] != b[:m]
    i = int(neq.argmax())
    return i if neq[i] else m


class TokenMemo:
    """Sorted order of token arrays (by their bytes) and the longest common prefix of each array
    with its sorted successor, remembered from one call to the next.

    An auction run by the engine at every admission round sees a queue that changes little; keeping
    each waiting prompt's bytes saves copying every prompt every round, keeping its rank saves
    comparing it again with the prompts it was sorted among (only new prompts are placed, by binary
    search), and keeping its common prefix with its sorted successor saves comparing the pairs that
    stay neighbours. Only read-only arrays (as `Request.tokens` are) are remembered, so nothing can
    go stale; each call of `sort` keeps the arrays it was given and drops the rest.
    """

    def __init__(self) -> None:
        # id(t) -> [t, bytes of t, successor array or None, common prefix with it, rank]; holding
        # the arrays keeps their ids from being reused.
        self._memo: dict[int, list] = {}

    @property
    def held(self) -> Container[int]:
        """Ids of the arrays remembered (and held) since the last `sort`."""
        return self._memo

    def sort(self, tokens: Sequence[np.ndarray]) -> tuple[list[int], list[int]]:
        """Indices of `tokens` in lexicographic order (equal arrays in no particular order), and
        the longest common prefix of each with the next in that order.

        Sequences sharing a prefix are adjacent in any lexicographic order; byte order of the int64
        buffers is one (fixed-width tokens, so the first differing byte lies in the first differing
        token), and comparing bytes runs in C.
        """
        old, new = self._memo, {}
        hits, known, fresh = [], [], []
        for i, t in enumerate(tokens):
            ident = id(t)
            hit = old.get(ident)  # the memo holds its arrays, so a remembered id is still `t`
            if hit is None:
                hit = [t, t.tobytes(), None, 0, 0]
                fresh.append(i)
                if not t.flags.writeable:
                    new[ident] = hit
            else:
                known.append((hit[4], i))
                new[ident] = hit
            hits.append(hit)
        self._memo = new
        if 2 * len(fresh) > len(tokens):  # mostly new: sort from scratch
            keys = [hit[1] for hit in hits]
            ranked = sorted(range(len(tokens)), key=keys.__getitem__)
        else:  # the known keep their order; place each new one
            known.sort()
            ranked = [i for _, i in known]
            if fresh:
                keys = [hit[1] for hit in hits]
                for i in fresh:
                    insort(ranked, i, key=keys.__getitem__)
        lcps: list[int] = []
        prev = None
        for k, i in enumerate(ranked):
            hit = hits[i]
            hit[4] = k
            if prev is not None:
                t = hit[0]
                if prev[2] is not t:  # not neighbours last time: compare
                    prev[2], prev[3] = (None if t.flags.writeable else t), _lcp(prev[0], t)
                lcps.append(prev[3])
            prev = hit
        return ranked, lcps


def build_queue_tree(
    tokens: Sequence[np.ndarray], prefix_lens: Sequence[int] | None, memo: TokenMemo | None = None
) -> QueueTree:
    """Build the queue's radix tree; `prefix_lens` None means no edge work ("unit" cost model).

    `memo` is the caller's `TokenMemo`, kept from round to round; without one nothing is reused.
    """
    n = len(tokens)
    if n == 1:  # a lone request hangs below the root (the usual round at light load)
        work = 0.0 if prefix_lens is None else float(len(tokens[0]) - min(len(tokens[0]), prefix_lens[0]))
        return QueueTree([-1], [0], [[]], [[0]], [0.0], [0], [work])
    ranked, lcps = (memo or TokenMemo()).sort(tokens)
    # shared[k]: common prefix of the k-th sequence with the one before (0 for the first; -1 after
    # the last, which closes every node).
    shared = ([0] + lcps)[:n] + [-1]
    parent: list[int] = []
    depth: list[int] = []
    children: list[list[int]] = []
    attached: list[list[int]] = []
    edge_work: list[float] = []
    req_node = [0] * n
    req_work = [0.0] * n
    # The open nodes: the rightmost root path of the tree built so far, depths strictly increasing,
    # above a sentinel at depth -1. Each is [depth, children, attached requests, largest cached
    # length below it]; a node is numbered k when it is the k-th to close (its subtree complete),
    # and renumbered V-1-k at the end, which is pre-order (siblings close in sorted order).
    stack: list[list] = [[-1, [], [], 0], [0, [], [], 0]]
    top = stack[-1]  # the deepest open node
    for k, r in enumerate(ranked + [-1]):
        sk = shared[k]
        while top[0] > sk:
            d, kids, reqs, reach = stack.pop()
            if stack[-1][0] < sk:
                # The shared prefix ends inside the edge into this node: open a node there.
                stack.append([sk, [], [], 0])
            top = stack[-1]
            v = len(parent)
            for c in kids:
                parent[c] = v
            for q in reqs:
                req_node[q] = v
            parent.append(-1)
            depth.append(d)
            children.append(kids)
            attached.append(reqs)
            top[1].append(v)
            if prefix_lens is None:
                edge_work.append(0.0)
            else:  # cached up to the largest cached length below, clipped to the node's edge
                # (comparisons rather than max/min calls: this runs for every node every round)
                if reach > top[3]:
                    top[3] = reach
                lo = top[0] if top[0] > reach else reach
                edge_work.append(float(d - lo) if d > lo else 0.0)
        if r < 0:
            break
        # The request's node is as deep as the prefix it shares with either neighbour.
        at = shared[k + 1]
        if sk > at:
            at = sk
        if top[0] < at:
            top = [at, [], [], 0]
            stack.append(top)
        top[2].append(r)
        if prefix_lens is not None:
            length, cached = len(tokens[r]), prefix_lens[r]
            if cached > top[3]:
                top[3] = cached
            lo = at if at > cached else cached
            req_work[r] = float(length - lo) if length > lo else 0.0
    last = len(parent) - 1
    return QueueTree(
        [-1] + [last - u for u in reversed(parent[:-1])],  # parent
        depth[::-1],
        [[last - c for c in kids] for kids in reversed(children)],  # children
        attached[::-1],
        edge_work[::-1],
        [last - v for v in req_node],  # req_node
        req_work,
    )


def completion_times(tree: QueueTree, order: Sequence[int], request_work: float) -> list[float]:
    """C_r of each request (indexed like the queue) when served in `order` (request indices).

    C_k = (uncached tokens of all prefixes of the first k requests) + k * request_work: serving a
    request first computes its own edge and the edges on its node's root path that no earlier
    request covered. O(n + V).
    """
    done = [0.0] * len(order)
    clock = 0.0
    if not any(tree.edge_work) and not any(tree.req_work):  # no edge work: skip the walks
        for r in order:
            clock += request_work
            done[r] = clock
        return done
    covered = [False] * tree.n_nodes
    covered[0] = True
    parent, work = tree.parent, tree.edge_work
    for r in order:
        clock += tree.req_work[r]
        v = tree.req_node[r]
        while not covered[v]:
            covered[v] = True
            clock += work[v]
            v = parent[v]
        clock += request_work
        done[r] = clock
    return done

"""The radix (compressed trie) tree of a waiting queue, with the uncached work on each edge.

Nodes are numbered 0..V-1 in pre-order (node 0 is the root, the empty prefix), so every child has a
larger index than its parent and a loop over reversed indices visits children before parents.
Requests are numbered by their position in the queue as given (0..n-1). A request ends at the node
whose depth equals its length; several requests with the same tokens end at the same node.

Invariants:
- every non-root node has depth > its parent's, and is a request end or has >= 2 children;
- `edge_work[v]` = tokens on the edge into v that are not in the cached set (0 for the root and
  under the "unit" cost model); cached tokens always form a prefix of a root path.

The cached set is a set of token prefixes fixed for the round: a prefix of request r of length L is
cached iff L <= prefix_len[r]; a node is cached up to the largest such length among the requests of
its subtree (with a page_size-1 cache every request below agrees; with larger pages this takes the
closure so the set stays prefix-closed). VCG's "same cached set" is this set, kept when requests
are removed.

Complexity: building is O(n log n) comparisons of byte strings plus O(L) vectorised token
comparisons (L = total tokens) for the longest common prefixes, and O(n) Python steps for the
stack that turns the sorted sequences into the tree; V <= 2n.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

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
    ends: list[list[int]]
    """Requests whose tokens end exactly at v."""
    edge_work: list[float]
    """Uncached tokens on the edge into v."""
    req_node: list[int]
    """The node where request r ends."""

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


class ByteKeys:
    """Sort keys (raw bytes) of token arrays, remembered from one call to the next.

    An auction run by the engine at every admission round sees a queue that changes little; keeping
    each waiting prompt's bytes saves copying every prompt every round. Only read-only arrays (as
    `Request.tokens` are) are remembered, so a key can never go stale.
    """

    def __init__(self) -> None:
        self._memo: dict[int, tuple[np.ndarray, bytes]] = {}

    def __call__(self, tokens: Sequence[np.ndarray]) -> list[bytes]:
        old, new, keys = self._memo, {}, []
        for t in tokens:
            hit = old.get(id(t))
            if hit is None or hit[0] is not t:
                hit = (t, t.tobytes())
            if not t.flags.writeable:
                new[id(t)] = hit  # holding `t` keeps its id from being reused
            keys.append(hit[1])
        self._memo = new
        return keys


def build_queue_tree(
    tokens: Sequence[np.ndarray], prefix_lens: Sequence[int] | None, keys: Sequence[bytes] | None = None
) -> QueueTree:
    """Build the queue's radix tree; `prefix_lens` None means no edge work ("unit" cost model).

    `keys`, if given, are the token arrays' bytes (`ByteKeys`); they are computed otherwise.
    """
    n = len(tokens)
    # Sequences sharing a prefix are adjacent in any lexicographic order; byte order of the int64
    # buffers is one (fixed-width tokens, so the first differing byte lies in the first differing
    # token), and comparing bytes runs in C.
    if keys is None:
        keys = [t.tobytes() for t in tokens]
    ranked = sorted(range(n), key=keys.__getitem__)
    par, dep, kids, ends = [-1], [0], [[]], [[]]

    def new_node(parent: int, depth: int) -> int:
        par.append(parent)
        dep.append(depth)
        kids.append([])
        ends.append([])
        return len(par) - 1

    # `stack` is the rightmost root path of the tree built so far (depths strictly increasing).
    stack = [0]
    prev: np.ndarray | None = None
    for r in ranked:
        t = tokens[r]
        common = 0 if prev is None else _lcp(prev, t)
        last = -1
        while dep[stack[-1]] > common:
            last = stack.pop()
        top = stack[-1]
        if dep[top] < common:
            # The shared prefix ends inside the edge into `last`: split that edge.
            mid = new_node(top, common)
            kids[top][-1] = mid
            par[last] = mid
            kids[mid].append(last)
            stack.append(mid)
            top = mid
        if len(t) == common:
            ends[top].append(r)
        else:
            leaf = new_node(top, len(t))
            kids[top].append(leaf)
            ends[leaf].append(r)
            stack.append(leaf)
        prev = t

    # Renumber in pre-order so that children follow their parents.
    order, todo = [], [0]
    while todo:
        v = todo.pop()
        order.append(v)
        todo.extend(kids[v])
    new_id = [0] * len(order)
    for i, v in enumerate(order):
        new_id[v] = i
    parent = [-1 if par[v] < 0 else new_id[par[v]] for v in order]
    depth = [dep[v] for v in order]
    children = [[new_id[c] for c in kids[v]] for v in order]
    ending = [ends[v] for v in order]
    req_node = [0] * n
    for v, rs in enumerate(ending):
        for r in rs:
            req_node[r] = v

    edge_work = [0.0] * len(order)
    if prefix_lens is not None:
        # Largest cached length below each node (children first), clipped to the node's edge.
        reach = [0] * len(order)
        for v in range(len(order) - 1, 0, -1):
            best = max([reach[v]] + [prefix_lens[r] for r in ending[v]])
            top = parent[v]
            reach[top] = max(reach[top], best)
            cached_depth = min(depth[v], max(depth[top], best))
            edge_work[v] = float(depth[v] - cached_depth)
    return QueueTree(parent, depth, children, ending, edge_work, req_node)


def completion_times(tree: QueueTree, order: Sequence[int], request_work: float) -> list[float]:
    """C_r of each request (indexed like the queue) when served in `order` (request indices).

    C_k = (uncached tokens of all prefixes of the first k requests) + k * request_work: serving a
    request first computes the edges on its root path that no earlier request covered. O(n + V).
    """
    covered = [False] * tree.n_nodes
    covered[0] = True
    parent, work = tree.parent, tree.edge_work
    clock = 0.0
    done = [0.0] * len(order)
    for r in order:
        v = tree.req_node[r]
        while not covered[v]:
            covered[v] = True
            clock += work[v]
            v = parent[v]
        clock += request_work
        done[r] = clock
    return done

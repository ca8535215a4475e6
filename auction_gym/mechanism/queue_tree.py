"""The radix (compressed trie) tree of a waiting queue, with the uncached work on each edge.

Nodes are numbered in pre-order from the root (node 0, the empty prefix), so a loop over reversed
indices visits children before parents; a request that shares nothing beyond a node hangs below
it on an edge of its own instead of a leaf node. The cached set is fixed for the round and kept
when requests are removed: VCG's "same cached set". Invariants and cost: docs/economic-model.md
section 3 ("The queue's tree").
"""

from __future__ import annotations

import operator
from bisect import insort
from dataclasses import dataclass, field
from typing import Any, Container, Iterable, Sequence

import numpy as np

from ..core import active, compiled_module
from ..radix_cache import RadixCache
from ..request import as_tokens


@dataclass(eq=False)
class QueueTree:
    """Parent-pointer tree of the queue (numbering and invariants: docs/economic-model.md section 3)."""

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
    compiled: Any = field(default=None, repr=False)
    """The compiled core's copy of these lists (`auction_gym._core.ScratchTree`), on which
    `completion_times` runs; None for a tree built in Python."""

    @property
    def n_nodes(self) -> int:
        return len(self.parent)


_LISTS = ("parent", "depth", "children", "attached", "edge_work", "req_node", "req_work")


class _ScratchLists(QueueTree):
    """A tree the compiled builder made, its lists read out of the C++ copy on first use: the
    completion times and strict priority's payments run on the copy and read none of them."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def __getattr__(self, name: str) -> Any:
        if name not in _LISTS:
            raise AttributeError(name)
        self.__dict__.update(zip(_LISTS, self.compiled.lists()))
        return self.__dict__[name]


def cached_prefix_lengths(
    tokens: Sequence[np.ndarray], cached: RadixCache | Iterable[Sequence[int]] | None
) -> list[int]:
    """Per request, the length of its longest prefix in the cached set (tokens).

    `cached` is a RadixCache (read with `prefix_lens`, which leaves it untouched), an iterable of
    token sequences whose prefixes are all cached, or None (nothing cached).
    """
    if cached is None:
        return [0] * len(tokens)
    if not isinstance(cached, RadixCache):
        sequences = cached
        cached = RadixCache(page_size=1)
        for seq in sequences:
            cached.insert(as_tokens(seq, "cached sequence"))
    return cached.prefix_lens(tokens)


def common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two non-empty token arrays."""
    m = min(len(a), len(b))
    neq = a[:m] != b[:m]
    i = int(neq.argmax())
    return i if neq[i] else m


class _Entry:
    """What `TokenMemo` remembers of one token array."""

    __slots__ = ("tokens", "key", "successor", "lcp", "rank")

    def __init__(self, tokens: np.ndarray) -> None:
        self.tokens = tokens
        self.key = tokens.tobytes()
        """The sort key: the array's bytes."""
        self.successor: np.ndarray | None = None
        """The array that followed it in the last sorted order (None: unknown or writeable)."""
        self.lcp = 0
        """Longest common prefix with `successor` (tokens)."""
        self.rank = 0
        """Position in the last sorted order."""


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
        # id(array) -> its entry, which holds the array and so keeps its id from being reused.
        self._memo: dict[int, _Entry] = {}

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
        entries: list[_Entry] = []
        known: list[tuple[int, int]] = []  # (last rank, index) of the arrays remembered
        fresh: list[int] = []  # indices of the others
        for i, t in enumerate(tokens):
            ident = id(t)
            entry = old.get(ident)  # the memo holds its arrays, so a remembered id is still `t`
            if entry is None:
                entry = _Entry(t)
                fresh.append(i)
                if not t.flags.writeable:
                    new[ident] = entry
            else:
                known.append((entry.rank, i))
                new[ident] = entry
            entries.append(entry)
        self._memo = new
        if 2 * len(fresh) > len(tokens):  # mostly new: sort from scratch
            keys = [entry.key for entry in entries]
            ranked = sorted(range(len(tokens)), key=keys.__getitem__)
        else:  # the known keep their order; place each new one
            known.sort()
            ranked = [i for _, i in known]
            if fresh:
                keys = [entry.key for entry in entries]
                for i in fresh:
                    insort(ranked, i, key=keys.__getitem__)
        lcps: list[int] = []
        prev = None
        for k, i in enumerate(ranked):
            entry = entries[i]
            entry.rank = k
            if prev is not None:
                t = entry.tokens
                if prev.successor is not t:  # not neighbours last time: compare
                    prev.successor = None if t.flags.writeable else t
                    prev.lcp = common_prefix_len(prev.tokens, t)
                lcps.append(prev.lcp)
            prev = entry
        return ranked, lcps


class _Open:
    """A node on the rightmost root path of the tree being built, whose subtree is not complete."""

    __slots__ = ("depth", "children", "attached", "reach")

    def __init__(self, depth: int) -> None:
        self.depth = depth
        """Tokens from the root (-1 for the sentinel above the root)."""
        self.children: list[int] = []
        """Child nodes, by their closing number."""
        self.attached: list[int] = []
        """Requests attached to it."""
        self.reach = 0
        """Largest cached length among the requests below it (tokens)."""


class _Closed:
    """The nodes whose subtree is complete, numbered in the order they close (the root last):
    `QueueTree`'s lists in that numbering, for the `n` requests; `costed` False: no edge work."""

    __slots__ = ("parent", "depth", "children", "attached", "edge_work", "req_node", "costed")

    def __init__(self, n: int, costed: bool) -> None:
        self.parent: list[int] = []  # -1 until the parent closes
        self.depth: list[int] = []
        self.children: list[list[int]] = []
        self.attached: list[list[int]] = []
        self.edge_work: list[float] = []
        self.req_node = [0] * n
        self.costed = costed

    def close(self, node: _Open, above: _Open) -> None:
        """Number `node`, a child of `above`, and the edge work into it."""
        parent, req_node = self.parent, self.req_node
        v = len(parent)
        for c in node.children:
            parent[c] = v
        for q in node.attached:
            req_node[q] = v
        parent.append(-1)
        self.depth.append(node.depth)
        self.children.append(node.children)
        self.attached.append(node.attached)
        above.children.append(v)
        if not self.costed:
            self.edge_work.append(0.0)
            return
        # Cached up to the largest cached length below, clipped to the node's edge (comparisons
        # rather than max/min calls: this runs for every node every round).
        reach, d, lo = node.reach, node.depth, above.depth
        if reach > above.reach:
            above.reach = reach
        if reach > lo:
            lo = reach
        self.edge_work.append(float(d - lo) if d > lo else 0.0)

    def tree(self, req_work: list[float]) -> QueueTree:
        """The tree in pre-order: node k becomes V-1-k."""
        last = len(self.parent) - 1
        return QueueTree(
            parent=[-1] + [last - u for u in reversed(self.parent[:-1])],
            depth=self.depth[::-1],
            children=[[last - c for c in kids] for kids in reversed(self.children)],
            attached=self.attached[::-1],
            edge_work=self.edge_work[::-1],
            req_node=[last - v for v in self.req_node],
            req_work=req_work,
        )


def build_queue_tree(
    tokens: Sequence[np.ndarray], prefix_lens: Sequence[int] | None, memo: TokenMemo | Any = None
) -> QueueTree:
    """Build the queue's radix tree; `prefix_lens` None means no edge work ("unit" cost model).

    `memo` is the caller's `TokenMemo`, kept from round to round, or the compiled builder's
    (`auction_gym._core.PromptMemo`, which gives the lists a fresh sort gives); without one
    nothing is reused, and on the compiled core the compiled builder makes the same lists
    (`_compiled_tree`).

    The requests are visited in sorted order, keeping the open nodes: the rightmost root path of
    the tree built so far, depths strictly increasing, above a sentinel at depth -1. A node is
    numbered k when it is the k-th to close (its subtree complete), and renumbered V-1-k at the
    end, which is pre-order (siblings close in sorted order).
    """
    n = len(tokens)
    if n == 1:  # a lone request hangs below the root (the usual round at light load)
        work = 0.0 if prefix_lens is None else float(len(tokens[0]) - min(len(tokens[0]), prefix_lens[0]))
        return QueueTree(parent=[-1], depth=[0], children=[[]], attached=[[0]], edge_work=[0.0], req_node=[0],
                         req_work=[work])
    if not isinstance(memo, TokenMemo):
        if (built := _compiled_tree(tokens, prefix_lens, memo)) is not None:
            return built
        memo = TokenMemo()
    ranked, lcps = memo.sort(tokens)
    # shared[k]: common prefix of the k-th sequence with the one before (0 for the first; -1 after
    # the last, which closes every node).
    shared = ([0] + lcps)[:n] + [-1]
    closed = _Closed(n, prefix_lens is not None)
    close = closed.close
    req_work = [0.0] * n
    stack = [_Open(-1), _Open(0)]
    top = stack[-1]  # the deepest open node
    for k, r in enumerate(ranked + [-1]):
        sk = shared[k]
        while top.depth > sk:  # close the open nodes deeper than the shared prefix
            node = stack.pop()
            if stack[-1].depth < sk:
                # The shared prefix ends inside the edge into this node: open a node there.
                stack.append(_Open(sk))
            top = stack[-1]
            close(node, top)
        if r < 0:
            break
        # The request's node is as deep as the prefix it shares with either neighbour.
        at = shared[k + 1]
        if sk > at:
            at = sk
        if top.depth < at:
            top = _Open(at)
            stack.append(top)
        top.attached.append(r)
        if prefix_lens is not None:
            length, cached = len(tokens[r]), prefix_lens[r]
            if cached > top.reach:
                top.reach = cached
            lo = at if at > cached else cached
            req_work[r] = float(length - lo) if length > lo else 0.0
    return closed.tree(req_work)


def compiled_memo() -> Any:
    """A fresh `PromptMemo` of the compiled builder on the compiled core, None on the Python core:
    the memo a caller keeps across queues that saves the compiled build its sort's work (equal
    prompts put back in queue order, so the lists are a fresh build's) and leaves the Python
    builder as it is without one."""
    module = compiled_module() if active() == "compiled" else None
    return None if module is None else module.PromptMemo()


def _compiled_tree(tokens: Sequence[np.ndarray], prefix_lens: Sequence[int] | None, memo: Any) -> QueueTree | None:
    """The tree of two requests or more built by the compiled core, when it is the active core
    (`auction_gym.core`) and takes the inputs as they are (non-empty int64 arrays, cached lengths
    ints >= 0): a fresh `TokenMemo`'s stable sort by the prompts' bytes (kept in `memo`, a
    `PromptMemo` or None), then the same walk. None otherwise, for the Python builder, which
    raises the errors of inputs it cannot take."""
    module = compiled_module() if active() == "compiled" else None
    built = None if module is None else module.build_queue_tree(tokens, prefix_lens, memo)
    return None if built is None else _ScratchLists(built)


def completion_times(tree: QueueTree, order: Sequence[int], request_work: float) -> list[float]:
    """C_r of each request (indexed like the queue) when served in `order` (request indices).

    C_k = (uncached tokens of all prefixes of the first k requests) + k * request_work: serving a
    request first computes its own edge and the edges on its node's root path that no earlier
    request covered. O(n + V); in C++ for a tree the compiled core built, when it takes `order`
    and `request_work` is a float (another type adds by its own rules here).
    """
    if tree.compiled is not None and type(request_work) is float \
            and (done := tree.compiled.completion_times(order, request_work)) is not None:
        return done
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


def weighted_cost(tree: QueueTree, order: Sequence[int], request_work: float, weights: Sequence[float]) -> float:
    """sum_r weights[r] x C_r, added in queue order, of serving the queue in `order`
    (`completion_times`): the cost sum_r w_r C_r of docs/economic-model.md section 3. In C++ for a
    tree the compiled core built, when it takes `order` and `weights` is a list of floats."""
    if tree.compiled is not None and type(request_work) is float \
            and (cost := tree.compiled.weighted_cost(order, request_work, weights)) is not None:
        return cost
    return sum(map(operator.mul, weights, completion_times(tree, order, request_work)))


def weighted_costs(
    tree: QueueTree, queue: Sequence[Any], orders: Sequence[Sequence[Any]], request_work: float,
    weights: Sequence[float],
) -> list[float]:
    """`weighted_cost` of each of `orders`, each naming `queue`'s requests by the requests themselves
    (their places in `queue` by identity, as `Request` hashes): the costs of many policies' orders of
    one queue (`reproduce`'s model welfare). In one C++ call for a tree the compiled core built, when
    it takes the inputs as they are (plain `Request`s, lists, float weights)."""
    if tree.compiled is not None and type(request_work) is float \
            and (costs := tree.compiled.weighted_costs(queue, orders, request_work, weights)) is not None:
        return costs
    position = {r: i for i, r in enumerate(queue)}
    return [weighted_cost(tree, list(map(position.__getitem__, order)), request_work, weights) for order in orders]

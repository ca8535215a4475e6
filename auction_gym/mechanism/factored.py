"""The radix auction's round decided in urgency units: work proportional to the nodes that mix bidders.

How `TreeAllocator` (allocator.py) decides a market's round. A bid is alpha_i x urgency, and
scaling one bidder's bids leaves the order inside its own blocks alone, so the kept tree holds
urgencies and a round re-sorts in money only its skeleton (the nodes that hold several bidders),
with each single-bidder block below as a scaled leaf; the VCG payments are computed over the same
skeleton. Orders and payments equal the from-scratch auction's up to rounding
(`tests/test_factored.py`). The derivation: docs/economic-model.md section 3 ("A market's round in
urgency units").
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any, Sequence

from ..request import Request
from .queue_tree import build_queue_tree, completion_times
from .smith import SortKey, block_keys, depth_first, tree_stats
from .validation import validate_requests

if TYPE_CHECKING:
    from .incremental_tree import QueueBlock, QueueNode


@dataclass(eq=False)
class Skeleton:
    """The nodes of a round's queue tree that hold more than one bidder, and the root (node 0;
    every child numbered after its parent); the single-bidder blocks below them are its leaves."""

    parent: list[int]
    """parent[v]; -1 for the root."""
    children: list[list[int]]
    """Child nodes of v."""
    attached: list[list[int]]
    """Leaves of v (numbered from 0)."""
    edge_work: list[float]
    """Uncached work on the edge into v."""
    leaf_node: list[int]
    """The node each leaf hangs from."""

    @property
    def n_nodes(self) -> int:
        return len(self.parent)


@dataclass(eq=False)
class FactoredAllocation:
    """A round decided over the skeleton: its order, its cost, and per skeleton block (nodes, then
    leaves, numbered as in `smith.tree_stats`) what the payments read, as `RadixAllocation` holds
    them per block of the whole tree."""

    requests: list[Request]
    """The queue as given."""
    bids: list[float]
    prefix_lens: list[int] | None
    request_work: float
    tree: Skeleton
    leaf_owner: list[int]
    """The bidder of each leaf."""
    s: list[float]
    p: list[float]
    f: list[float]
    tie: list[int]
    key: list[SortKey | None]
    sorted_blocks: list[list[int]]
    g: list[float]
    sum_f: list[float]
    leaf_order: list[int]
    """The leaves in the order served."""
    admission: list[Request]
    """The requests in the order decided."""
    cost: float
    """sum_r b_r C_r in that order (F of the root, in money)."""
    compiled: Any = None
    """The compiled core's copy of the round (`auction_gym._core.FactoredRound`), which computes the
    payments; None when decided on the Python core."""
    _completion: list[float] | None = None
    _start: list[float] | None = None

    @staticmethod  # not a classmethod: each round calls it, and a class's bound method is made per call
    def of_compiled(requests: list[Request], bids: list[float], prefix_lens: list[int] | None,
                    request_work: float, compiled: Any) -> FactoredAllocation:
        """The round `compiled` (`auction_gym._core.FactoredRound`) decided over the queue `requests`:
        its admission order now, its other fields read from it on first use (most rounds read only
        the order, and the payments, which `compiled` computes). A market's round decided in one
        compiled call (`RoundTree.market_round`) is made so there, its bids, which `compiled` read
        itself, left unset too (made a list on first use)."""
        a = _new(FactoredAllocation)
        a.requests, a.prefix_lens, a.request_work = requests, prefix_lens, request_work
        a.bids, a.compiled, a.admission = bids, compiled, compiled.admission
        return a

    def __getattr__(self, name: str) -> Any:
        # Called only for a field not set yet: one of a compiled round's, read from it now.
        compiled = self.__dict__.get("compiled")
        if compiled is None or name not in _FROM_COMPILED:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if name in ("leaf_owner", "bids", "cost"):  # what the payments read; the round's bids and cost
            self.__dict__[name] = getattr(compiled, name)
        else:
            (parent, children, attached, edge_work, leaf_node, self.leaf_owner, self.s, self.p, self.f, self.tie,
             self.key, self.sorted_blocks, self.g, self.sum_f, self.leaf_order) = compiled.fields()
            self.tree = Skeleton(parent=parent, children=children, attached=attached, edge_work=edge_work,
                                 leaf_node=leaf_node)
        return self.__dict__[name]

    @property
    def order(self) -> list[int]:
        """Positions in `requests` in the order decided."""
        position = {id(r): k for k, r in enumerate(self.requests)}
        return [position[id(r)] for r in self.admission]

    @property
    def completion(self) -> list[float]:
        """C_r per position in `requests`, from the queue's tree built afresh from the round's
        inputs (the same tree the incremental one holds), so the record stands alone."""
        if self._completion is None:
            tokens, _ = validate_requests(self.requests)
            tree = build_queue_tree(tokens, self.prefix_lens)
            self._completion = completion_times(tree, self.order, self.request_work)
        return self._completion

    def whole(self, pricing: object) -> FactoredAllocation:
        """Itself: it holds what the payments read."""
        return self

    def own_cost(self, bidder: int) -> float:
        """sum b_r C_r over `bidder`'s requests: F_B + S_B x start_B over its leaves."""
        if self._start is None:
            self._start = self._leaf_starts()
        nn = self.tree.n_nodes
        return sum([self.f[nn + k] + self.s[nn + k] * t
                    for k, (o, t) in enumerate(zip(self.leaf_owner, self._start)) if o == bidder])

    def _leaf_starts(self) -> list[float]:
        """Completion units served before each leaf starts: the leaves before it, and the edges of
        the nodes above it that no earlier leaf covered."""
        tree, nn = self.tree, self.tree.n_nodes
        covered = [False] * nn
        covered[0] = True
        start = [0.0] * len(self.leaf_owner)
        clock = 0.0
        for k in self.leaf_order:
            v = tree.leaf_node[k]
            while not covered[v]:
                covered[v] = True
                clock += tree.edge_work[v]
                v = tree.parent[v]
            start[k] = clock
            clock += self.p[nn + k]
        return start


_new = object.__new__

_FROM_COMPILED = frozenset(
    ("bids", "cost", "tree", "leaf_owner", "s", "p", "f", "tie", "key", "sorted_blocks", "g", "sum_f", "leaf_order"))
"""The fields a round decided on the compiled core reads from it on first use (`of_compiled`)."""


def factored_allocation(
    root: QueueNode, requests: list[Request], bids: list[float], prefix_lens: list[int] | None,
    alpha: Sequence[float], request_work: float,
) -> FactoredAllocation:
    """The round over the skeleton of `root`, an `IncrementalQueueTree` brought to this queue with
    the urgencies as bids; `bids` are alpha[bidder] x urgency (as recorded for the round)."""
    tree, leaves = _skeleton(root)
    nn = tree.n_nodes
    scale = [alpha[b.owner] for b in leaves]
    leaf_s = [a * b.s for a, b in zip(scale, leaves)]
    leaf_p = [b.p for b in leaves]
    leaf_tie = [b.tie for b in leaves]
    s, p, tie = [0.0] * nn + leaf_s, [0.0] * nn + leaf_p, [0] * nn + leaf_tie
    f = [0.0] * nn + [a * b.f for a, b in zip(scale, leaves)]
    key: list[SortKey | None] = [None] * nn
    key += block_keys(leaf_s, leaf_p, leaf_tie)
    sorted_blocks, g, sum_f = tree_stats(tree.children, tree.attached, tree.edge_work, s, p, f, tie, key)
    leaf_order = depth_first(sorted_blocks, nn)
    admission: list[Request] = []
    for k in leaf_order:
        admission += leaves[k].flat if scale[k] > 0 else zero_bid_order(leaves[k])
    return FactoredAllocation(
        requests=requests, bids=bids, prefix_lens=prefix_lens, request_work=request_work, tree=tree,
        leaf_owner=[b.owner for b in leaves], s=s, p=p, f=f, tie=tie, key=key, sorted_blocks=sorted_blocks, g=g,
        sum_f=sum_f, leaf_order=leaf_order, admission=admission, cost=f[0],
    )


def _skeleton(root: QueueNode) -> tuple[Skeleton, list[QueueBlock]]:
    """The root and the nodes below it that hold more than one bidder, and the other blocks that
    hang from them (the leaves)."""
    tree = Skeleton(parent=[-1], children=[[]], attached=[[]], edge_work=[0.0], leaf_node=[])
    leaves: list[QueueBlock] = []
    stack = [(root, 0)]
    while stack:
        v, k = stack.pop()
        for b in v.blocks:
            if b.owner is None:  # a node holding more than one bidder
                c = len(tree.parent)
                tree.parent.append(k)
                tree.children.append([])
                tree.attached.append([])
                tree.edge_work.append(b.edge)
                tree.children[k].append(c)
                stack.append((b, c))
            else:
                tree.attached[k].append(len(leaves))
                tree.leaf_node.append(k)
                leaves.append(b)
    return tree, leaves


def zero_bid_order(block: QueueBlock) -> list[Request]:
    """The requests of `block` in the from-scratch allocation's order when all their bids are 0:
    every key's ratio is 0 then, so at each node the zero-work blocks come first, then the others,
    each by smallest request id. Kept on the blocks until they change (a bidder out of budget
    bids 0 round after round)."""
    if block.zero_flat is not None:  # unchanged since last asked: the usual case
        return block.zero_flat
    stack = [block]
    while stack:  # children before parents, without recursion (trees can be deep)
        b = stack[-1]
        if b.zero_flat is None:
            pending = [c for c in b.blocks if c.zero_flat is None]
            if pending:
                stack += pending
                continue
            b.zero_flat = list(chain.from_iterable(c.zero_flat for c in sorted(b.blocks, key=_zero_bid_key)))
        stack.pop()
    return block.zero_flat


def _zero_bid_key(b: QueueBlock) -> tuple[bool, int]:
    return b.p != 0, b.tie

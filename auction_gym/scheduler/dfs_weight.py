"""Depth-first by weight (SGLang's `dfs-weight` policy).

Each waiting request hangs on the cache node where its longest cached prefix ends (a partially
matched edge is split there, as SGLang does; the whole prompt is matched, as SGLang's policy match
does). The weight of a node is the number of waiting requests in its subtree. The cache tree is
walked depth first, children in descending weight (ties: the order of the node's children in the
cache, as SGLang's stable sort of `node.children` keeps it), and a node's own requests
come after its children's, in the queue's order (SGLang's waiting list, which it sorts in place:
the engine keeps its queue so, `sorts_in_place`); requests with nothing cached hang on the root and come
last. Only the nodes on paths from those match points to the root are visited, not the whole cache.
On the compiled core the walk runs in C++ over the compiled cache's nodes (`csrc/dfs_weight.cpp`),
this module's code staying the reference and the fallback (docs/design.md section 8).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

from ..core import active, compiled_module
from ..policy import AdmissionPolicy, WaitingRound
from ..radix_cache import TreeNode
from ..request import Request
from .queue_matcher import QueueMatcher


class DFSWeight(AdmissionPolicy):
    name = "dfs_weight"
    sorts_in_place = True
    """SGLang reorders its waiting list in place: the next round starts from this round's order."""

    def __init__(self) -> None:
        self._matcher = QueueMatcher(split=True, whole_prompt=True)  # SGLang matches the whole prompt
        self._compiled = active() == "compiled"  # a flag, not the module: the policy stays copyable

    def order_round(self, round: WaitingRound) -> list[Request]:
        match, _ = self._matcher.update(round)
        return self._ordered(round.queue, match, round.cache.root)

    def first_round_order(self, round: WaitingRound, peeks: Sequence[tuple[int, TreeNode]]) -> list[Request] | None:
        """The order a fresh DFS-weight gives `round`, its first, from `peeks`, each request's
        `RadixCache.peek` of its whole prompt with the edge split where it ends (what its matcher's
        first match makes; the peeks' order does not matter, as a split puts its new upper node in
        the place of the child it cuts): made without the matcher, which would keep what a next
        round reads (`reproduce` orders queue snapshots so). None for a queue with an id twice, and
        for a subclass, which may order otherwise (`admit` then)."""
        match = dict(zip([r.id for r in round.queue], peeks))
        if len(match) != len(round.queue) or type(self) is not DFSWeight:
            return None
        return self._ordered(round.queue, match, round.cache.root)

    def _ordered(
        self, queue: list[Request], match: Mapping[int, tuple[int, TreeNode]], root: TreeNode,
    ) -> list[Request]:
        """`queue` depth first by weight from the cache's `root`, `match[r.id]` each request's
        (cached length, node where its match ends)."""
        if self._compiled and (out := compiled_module().dfs_order(queue, match, root)) is not None:
            return out
        hanging: dict[TreeNode, list[Request]] = defaultdict(list)
        for r in queue:
            hanging[match[r.id][1]].append(r)
        weight: dict[TreeNode, int] = defaultdict(int)
        children: dict[TreeNode, list[TreeNode]] = defaultdict(list)
        for node, reqs in hanging.items():
            n = len(reqs)
            child, child_is_new = None, False
            while node is not None:
                if child_is_new:
                    children[node].append(child)
                is_new = node not in weight
                weight[node] += n
                child, child_is_new = node, is_new
                node = node.parent
        out: list[Request] = []
        stack: list[tuple[TreeNode, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                out.extend(hanging.get(node, ()))
                continue
            stack.append((node, True))
            kids = children[node]
            if len(kids) > 1:  # SGLang: a stable sort of the node's children, in the cache's dict order
                place = {id(c): i for i, c in enumerate(node.children.values())}
                kids = sorted(kids, key=lambda c: (-weight[c], place[id(c)]))
            stack.extend((c, False) for c in reversed(kids))
        return out

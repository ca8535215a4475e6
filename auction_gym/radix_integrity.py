"""`RadixCache.check()`: every invariant `radix_cache` states, checked on the whole tree (as
mini-sglang's `check_integrity`), for tests and debugging; the engine never calls it.

It reads the cache's private state (its heaps and page keys), so it lives beside the module it
checks, not in a test: a change of that state changes this file too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .radix_cache import RadixCache, TreeNode


class IntegrityError(AssertionError):
    """A broken invariant of a `RadixCache` (an AssertionError, so a test fails on it as on an assert)."""


def check_integrity(cache: RadixCache, round_ticks: int) -> None:
    """Raise IntegrityError naming the first broken invariant of `cache`; `round_ticks` bounds a
    waiting rank (`radix_cache.ROUND_TICKS`). O(nodes + heap entries)."""
    root = cache.root
    if root.parent is not None or root.depth != 0 or root.key.size != 0 or root.lock_ref != 1 or root.wait != -1:
        raise IntegrityError("root: must have no parent, depth 0, an empty key, lock_ref 1 and no wait mark")
    count = evictable = protected = 0
    candidates: list[TreeNode] = []
    stack = [root]
    while stack:
        node = stack.pop()
        _check_children(cache, node)
        stack.extend(node.children.values())
        if node is root:
            continue
        _check_node(cache, node, round_ticks)
        count += 1
        if node.lock_ref:
            protected += node.key.size
        else:
            evictable += node.key.size
            if not node.children:
                candidates.append(node)
    if (count, evictable, protected) != (cache.node_count, cache.evictable_size, cache.protected_size):
        raise IntegrityError(
            f"sizes: the tree has {count} nodes, {evictable} evictable and {protected} protected tokens; "
            f"the cache counts {cache.node_count}, {cache.evictable_size} and {cache.protected_size}"
        )
    _check_heaps(cache, candidates)


def _check_children(cache: RadixCache, node: TreeNode) -> None:
    """Each child of `node` is alive, points back to it, extends its depth by its edge and is keyed
    by its edge's first page; the locks below `node` are counted in its own."""
    below = 0
    for key, child in node.children.items():
        where = f"node at depth {child.depth}"
        if not child.alive:
            raise IntegrityError(f"{where}: evicted but still a child of its parent")
        if child.parent is not node:
            raise IntegrityError(f"{where}: its parent pointer is not the node that holds it")
        if child.depth != node.depth + child.key.size:
            raise IntegrityError(f"{where}: depth is not its parent's {node.depth} + its edge's {child.key.size}")
        if child.key.size and key != cache._key(child.key, 0):
            raise IntegrityError(f"{where}: child key {key!r} is not its edge's first page")
        below += child.lock_ref
    if node is not cache.root and node.lock_ref < below:
        raise IntegrityError(
            f"node at depth {node.depth}: lock_ref {node.lock_ref} is less than its children's {below} "
            "(a lock counts on every node of its path)"
        )


def _check_node(cache: RadixCache, node: TreeNode, round_ticks: int) -> None:
    """A non-root node's own fields: a non-empty whole-page edge, values per token, counts in range."""
    where = f"node at depth {node.depth}"
    size = node.key.size
    if size == 0 or size % cache.page_size:
        raise IntegrityError(f"{where}: edge of {size} tokens, not a positive multiple of page_size {cache.page_size}")
    if node.value is not None and len(node.value) != size:
        raise IntegrityError(f"{where}: {len(node.value)} values for an edge of {size} tokens")
    if node.key_bytes is not None and node.key_bytes != node.key.tobytes():
        raise IntegrityError(f"{where}: the bytes kept for its edge are not the edge's")
    if node.lock_ref < 0:
        raise IntegrityError(f"{where}: negative lock_ref {node.lock_ref}")
    if not -1 <= node.wait < round_ticks:
        raise IntegrityError(f"{where}: wait mark {node.wait} outside [-1, {round_ticks})")


def _check_heaps(cache: RadixCache, candidates: list[TreeNode]) -> None:
    """Both lazy heaps are heaps, and every eviction candidate (an unlocked leaf) has a current entry
    on the heap its time selects: the wait heap, keyed by its mark, when it is waited on and its
    round time is not earlier than its own; else the heap, keyed by its own time (and, if waited
    on, listed for `new_round` to put back); under `priority` eviction its priority comes before
    that mark or time in the key. `evict` would miss it otherwise."""
    current: set[int] = set()
    for name, heap, waiting in (("heap", cache._heap, False), ("wait heap", cache._wait_heap, True)):
        for i in range(1, len(heap)):
            if heap[i] < heap[(i - 1) // 2]:
                raise IntegrityError(f"{name}: entry {i} is smaller than its parent (not a heap)")
        for key, _, node in heap:
            if node.alive and _on_wait_heap(cache, node) == waiting and key == _entry_key(cache, node, waiting):
                current.add(id(node))
    touched = set(map(id, cache._waited_touched))
    for node in candidates:
        on_wait_heap = _on_wait_heap(cache, node)
        if id(node) not in current:
            raise IntegrityError(
                f"node at depth {node.depth}: an unlocked leaf with no current entry on the "
                f"{'wait heap' if on_wait_heap else 'heap'}, so eviction would never take it"
            )
        if node.wait >= 0 and not on_wait_heap and id(node) not in touched:
            raise IntegrityError(
                f"node at depth {node.depth}: waited on and touched this round but not listed for "
                "new_round, which would leave it off the wait heap in the next round"
            )


def _on_wait_heap(cache: RadixCache, node: TreeNode) -> bool:
    """Whether `node`'s time in the current round is its waiting round time (`round_start + wait`)."""
    return node.wait >= 0 and node.last_access <= cache._round_start + node.wait


def _entry_key(cache: RadixCache, node: TreeNode, waiting: bool) -> int | tuple[int, int]:
    """The key of `node`'s current entry on the wait heap (`waiting`) or the heap: its mark or its
    time, after its priority under `priority` eviction."""
    time = node.wait if waiting else node.last_access
    return (node.priority, time) if cache.eviction_policy == "priority" else time

"""A radix tree over token sequences: which prompt prefixes have their KV cache resident.

It follows SGLang's `RadixCache` (match with split, insert, locks along a path, LRU or `priority`
eviction of unlocked leaves) at O(1) per access: the clock and the wait marks of waiting
requests are derived in docs/engine.md section 4 ("The radix cache", "The radix cache's clock"),
with the invariants `check()` tests. Edges hold numpy token arrays, so a match costs per node, not
per token.
"""

from __future__ import annotations

from abc import ABCMeta
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from . import core
from ._checks import as_int64, check_count, is_int
from .radix_eviction import EVICTION_POLICIES, ROUND_TICKS, EvictionOrder
from .radix_integrity import check_integrity
from .request import as_tokens, token_view


@dataclass(eq=False, slots=True)
class TreeNode:
    """An edge of the tree and the node it leads to. `depth` counts tokens from the root to this node."""

    key: np.ndarray
    value: np.ndarray | None
    parent: TreeNode | None = field(repr=False)
    depth: int
    children: dict = field(default_factory=dict, repr=False)
    lock_ref: int = 0
    last_access: int = 0
    wait: int = -1
    """The largest rank of the waiting requests whose match ends here; -1 when none (`set_wait`)."""
    alive: bool = True
    key_bytes: bytes | None = field(default=None, repr=False)
    """`key.tobytes()` once a walk has compared the whole edge: walks compare the same edges again
    and again, so their bytes are made once; None until then, and after a split cuts the key."""
    priority: int = 0
    """The largest priority of the inserts that ended here or below (read by `priority` eviction)."""

    def __len__(self) -> int:
        return self.key.size


class MatchResult(NamedTuple):
    length: int
    """Tokens of the query that are cached (a multiple of page_size)."""
    last_node: TreeNode
    """The node where the match ends (the root when nothing matched); lock it to protect the prefix."""
    value: np.ndarray | None
    """Per-token values of the matched prefix, concatenated, when the tree stores values."""


class InsertResult(NamedTuple):
    cached: int
    """Tokens of the inserted sequence that were already in the tree before the call."""
    last_node: TreeNode
    """The node where the inserted (page-aligned) sequence ends."""


def _checked(page_size: int, eviction_policy: str) -> tuple[int, str]:
    """A cache's page size and eviction policy, checked (ValueError naming the bad one)."""
    page_size = check_count("page_size", page_size)
    if eviction_policy not in EVICTION_POLICIES:
        raise ValueError(f"eviction_policy must be one of {', '.join(EVICTION_POLICIES)}, got {eviction_policy!r}")
    return page_size, eviction_policy


class RadixCache(EvictionOrder, core.EitherCore, metaclass=ABCMeta):
    """Prefix cache of token sequences with LRU (or priority, then LRU) eviction of unlocked leaves.

    Constructed on the compiled core (`auction_gym.core.active()`), `RadixCache(...)` returns the
    compiled cache, `auction_gym._core.RadixCache`: the same API and results, bit for bit
    (docs/design.md section 8), and an instance of this class as `isinstance` sees it; its nodes
    are `_core.TreeNode`s, with this `TreeNode`'s fields, read-only.

    Args:
        page_size: tokens per KV page; matches, inserts and splits happen in whole pages, and a
            trailing partial page is never cached (as in SGLang with page_size > 1).
        on_evict: called with the per-token values of every evicted node that has values, so the
            owner of the KV slots (gpu_backend) can free them.
        eviction_policy: "lru" (least recently used first) or "priority" (lowest priority first,
            then least recently used), SGLang's `--radix-eviction-policy` (EVICTION_POLICIES).
    """

    def __new__(
        cls,
        page_size: int = 1,
        on_evict: Callable[[np.ndarray], None] | None = None,
        eviction_policy: str = "lru",
    ) -> RadixCache:
        if cls is RadixCache and core.active() == "compiled":
            page_size, eviction_policy = _checked(page_size, eviction_policy)
            return core.compiled_module().RadixCache(page_size, on_evict, eviction_policy)
        return super().__new__(cls)

    def __init__(
        self,
        page_size: int = 1,
        on_evict: Callable[[np.ndarray], None] | None = None,
        eviction_policy: str = "lru",
    ) -> None:
        self.page_size, self.eviction_policy = _checked(page_size, eviction_policy)
        self.on_evict = on_evict
        self._by_priority = eviction_policy == "priority"
        self._log_epoch = 0
        self.reset()

    def __del__(self) -> None:
        # Parent and children link every node both ways: unlinked, a dropped tree goes with its cache
        # rather than waiting for the cyclic garbage collector (docs/engine.md, Performance notes).
        if hasattr(self, "root"):  # absent if __init__ raised
            self._detach_tree()

    def _detach_tree(self) -> None:
        """Unlink the tree: a node held elsewhere outlives it detached (no parent, no children) and
        evicted, so no operation given it follows its missing parent (as on the compiled core)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            node.children = {}
            node.parent = None
            node.alive = False

    def reset(self) -> None:
        """Empty the cache. The nodes of the old tree are detached and read as evicted: `lock` and
        `unlock` refuse them (ValueError), wait marks and stamps ignore them, no heap keeps them."""
        if hasattr(self, "root"):  # not yet on the first reset, from __init__
            self._detach_tree()
        self.root = TreeNode(key=as_tokens([]), value=None, parent=None, depth=0, lock_ref=1)
        self.evictable_size = 0
        self.protected_size = 0
        self.node_count = 0
        self._tick = 0
        self._has_values = False  # whether any insert has stored values (only then has a path any)
        self._reset_order()
        # Change log for `changes_since`; cleared (under a new epoch) when it grows long, so a
        # long-lived cache does not keep it forever.
        self._log_epoch += 1
        self._log: list[tuple[TreeNode, int | bytes | None]] = []

    @property
    def total_size(self) -> int:
        return self.evictable_size + self.protected_size

    def _key(self, tokens: np.ndarray, pos: int) -> int | bytes:
        if self.page_size == 1:
            return tokens.item(pos)
        return tokens[pos : pos + self.page_size].tobytes()

    def _walk(
        self, tokens: np.ndarray, split: bool, start: TreeNode | None = None, stamp: int = 0, offset: int = 0
    ) -> tuple[int, TreeNode]:
        """Longest cached prefix: (length, node it ends at).

        With `split`, a match that ends inside an edge splits it so the match ends on a node; both
        halves get the time `stamp`. Without it the returned node is the last one matched in full
        (the length may go further).
        `start` must be a node whose whole path is a prefix of `tokens` (an earlier match of them);
        if it has been evicted since, the walk resumes from its closest ancestor still cached.
        With `offset`, `tokens` continue a path of that many tokens (tokens[i] is at depth offset
        + i), which `start` ends, alive: the length still counts from the root.
        """
        n = offset + len(tokens)
        n -= n % self.page_size  # whole pages only
        node = self.root if start is None else start
        while not node.alive:
            if node.parent is None:
                raise ValueError("start: a node detached from its cache")
            node = node.parent
        pos = node.depth
        i = pos - offset  # where the token at depth `pos` is in `tokens`
        by_token = self.page_size == 1  # keyed by the first token: `_key` inlined on this hot path
        while pos < n:
            child = node.children.get(tokens.item(i) if by_token else self._key(tokens, i))
            if child is None:
                break
            key = child.key
            size = m = key.size
            if m > n - pos:  # the tokens end inside this edge
                m = n - pos
                key = key[:m]
                edge = key.tobytes()
            elif (edge := child.key_bytes) is None:
                edge = child.key_bytes = key.tobytes()
            # A whole-edge match is the common case: one comparison of raw bytes answers it; only a
            # mismatch needs the elementwise search for where it is.
            head = tokens[i:i + m]
            if head.tobytes() != edge:
                m = int((head != key).argmax())
            if m == size:
                node, pos, i = child, pos + m, i + m
                continue
            # The match ends inside this edge (at least its first page matched, by its key).
            m -= m % self.page_size
            if split:
                node = self._split(child, m, stamp)
            pos += m
            break
        return pos, node

    def match_prefix(self, tokens: Sequence[int] | np.ndarray, start: TreeNode | None = None) -> MatchResult:
        """Longest cached prefix of `tokens`; splits a partially matched edge; refreshes LRU times.

        `start`, a node whose path is a prefix of `tokens` (say where an earlier `peek` of them
        ended), skips re-comparing that prefix; the result is the same as without it.
        """
        # Hot path: the clock's tick inline.
        self._tick += 1
        tick = self._tick
        length, node = self._walk(token_view(tokens), True, start, tick)
        self._touch(node, tick)
        return MatchResult(length, node, self._path_values(node) if self._has_values else None)

    def _path_values(self, node: TreeNode) -> np.ndarray | None:
        """The per-token values from the root to `node`, concatenated; None when none is stored.
        Read up the parents, so a walk that started below the root needs no path of its own.
        Called only when an insert has stored values (`_has_values`): the simulated engine's cache
        has none, and so no walk to the root per admission."""
        values = []
        while node is not self.root:
            if node.value is not None:
                values.append(node.value)
            node = node.parent
        return np.concatenate(values[::-1]) if values else None

    def prefix_len(self, tokens: Sequence[int] | np.ndarray) -> int:
        """Length of the longest cached prefix of `tokens`, without changing the tree or LRU times."""
        return self._walk(token_view(tokens), split=False)[0]

    def prefix_lens(self, prompts: Iterable[Sequence[int] | np.ndarray]) -> list[int]:
        """`prefix_len` of each of `prompts`, in one compiled call on the compiled core."""
        return [self.prefix_len(tokens) for tokens in prompts]

    def peek(
        self, tokens: Sequence[int] | np.ndarray, start: TreeNode | None = None, split: bool = False
    ) -> tuple[int, TreeNode]:
        """Match without refreshing LRU times: (longest cached prefix length, deepest node matched in
        full); `split` first splits a partly matched edge (halves stamped now) so the node is where the
        match ends; `start`, an earlier peek's node for the same tokens, skips a known prefix."""
        return self._walk(token_view(tokens), split, start, self._tick)

    @property
    def version(self) -> tuple[int, int]:
        """The tree's shape: it changes whenever a node is added, split or evicted (what can change
        a match result), not on LRU refreshes, locks or wait marks, and never repeats. Equal
        versions mean every match result still holds; it is the cursor `changes_since` returns."""
        return (self._log_epoch, len(self._log))

    def changes_since(
        self, cursor: tuple[int, int] | None
    ) -> tuple[tuple[int, int], list[tuple[TreeNode, int | bytes | None]] | None]:
        """What may have changed match results since `cursor`, and the cursor to pass next time.

        A match that ends at node X (or inside X's child with key k) can only change when X gains,
        loses or splits its child k, logged as (X, k), or X is evicted, logged as (X, None). None
        instead of a list means the log was reset (or `cursor` is None): redo every match.
        """
        now = self.version
        if cursor is None or cursor[0] != self._log_epoch:
            return now, None
        return now, self._log[cursor[1] :]

    def edge_key(self, tokens: Sequence[int] | np.ndarray, pos: int) -> int | bytes | None:
        """The child key that `tokens` follow after `pos` tokens (None past the last whole page);
        ValueError for a negative `pos`."""
        if pos < 0:  # a slice from the end is no position in a prompt
            raise ValueError(f"pos must be >= 0, got {pos}")
        tokens = token_view(tokens)
        return self._key(tokens, pos) if pos + self.page_size <= len(tokens) else None

    def insert(
        self,
        tokens: Sequence[int] | np.ndarray,
        value: np.ndarray | None = None,
        start: TreeNode | None = None,
        priority: int = 0,
    ) -> InsertResult:
        """Cache the page-aligned part of `tokens`, with `value[i]` for token i (values already cached are
        kept: the caller frees its own); `start` skips a known prefix; `priority`: for `priority` eviction,
        an int within 64 bits (TypeError otherwise, as on the compiled core)."""
        priority = as_int64("priority", priority)
        return self._insert(token_view(tokens), value, start, 0, priority)

    def extend(
        self, node: TreeNode, tokens: Sequence[int] | np.ndarray, value: np.ndarray | None = None,
        priority: int = 0,
    ) -> InsertResult:
        """`insert` of `node`'s path followed by `tokens`, from `node`, without that sequence being
        built (say a finished request's output after its locked prompt): `value[i]` goes with
        tokens[i], and `cached` counts from the root. `node` must be cached (ValueError if evicted)."""
        priority = as_int64("priority", priority)
        if not isinstance(node, TreeNode):  # a TypeError, as the compiled cache's binding raises
            raise TypeError(f"extend: node must be a TreeNode, got {node!r}")
        if not node.alive:
            raise ValueError("extend from an evicted node")
        return self._insert(token_view(tokens), value, node, node.depth, priority)

    def insert_prefixes(self, tokens: Sequence[np.ndarray], lengths: Sequence[int]) -> None:
        """`insert(tokens[i][:lengths[i]])` for each i in order, those of length 0 left out: a cache
        holding given prefixes of given prompts (a queue snapshot's, rebuilt by `reproduce`), in
        one compiled call on the compiled core. ValueError unless each length is an integer
        (`_checks.is_int`) with 0 <= lengths[i] <= len(tokens[i])."""
        if len(tokens) != len(lengths):
            raise ValueError(f"{len(lengths)} lengths for {len(tokens)} token arrays")
        for t, n in zip(tokens, lengths):
            if not is_int(n) or not 0 <= n <= len(t):
                raise ValueError(f"a prefix of {n!r} tokens of {len(t)}")
            if n:
                self.insert(t[: int(n)])

    def peek_prefixes(self, tokens: Iterable[Sequence[int] | np.ndarray], split: bool = False) -> list[tuple[int, TreeNode]]:
        """`peek(t, split=split)` of each of `tokens` in order, in one compiled call on the compiled
        core (a queue snapshot's matches, rebuilt by `reproduce`)."""
        return [self.peek(t, split=split) for t in tokens]

    def raise_priority(self, node: TreeNode, priority: int) -> None:
        """Make `node`'s priority at least `priority`, without an access: what SGLang's insert of a
        prefix with a higher priority does to the priorities of its path (the root is ignored).
        `priority`: an int within 64 bits (TypeError otherwise, as on the compiled core)."""
        priority = as_int64("priority", priority)
        if node is self.root or priority <= node.priority:
            return
        node.priority = priority
        if not node.children and not node.lock_ref and node.alive:
            self._push(node)  # its entry is keyed by its priority under `priority` eviction

    def _insert(
        self, tokens: np.ndarray, value: np.ndarray | None, start: TreeNode | None, offset: int, priority: int
    ) -> InsertResult:
        """`insert` of `tokens` continuing a path of `offset` tokens that `start` ends (`_walk`)."""
        if value is not None and len(value) < len(tokens):
            raise ValueError(f"value has {len(value)} entries for {len(tokens)} tokens")
        n = offset + len(tokens)
        n -= n % self.page_size  # whole pages only
        self._tick += 1  # hot path: the clock's tick inline
        tick = self._tick
        cached, node = self._walk(tokens, True, start, tick, offset)
        if cached < n:
            key = tokens[cached - offset:n - offset]
            if key.flags.writeable:  # the caller may change its array; the tree keeps its own
                key = key.copy()
                key.flags.writeable = False
            if value is not None:
                value = np.asarray(value[cached - offset:n - offset])
                self._has_values = True
            leaf = TreeNode(key, value, node, node.depth + n - cached, priority=priority)
            child_key = self._key(tokens, cached - offset)
            node.children[child_key] = leaf
            self._changed(node, child_key)
            self.node_count += 1
            self.evictable_size += key.size
            node = leaf
            # SGLang creates the leaf after stamping the path it walked (and split), so the leaf is
            # the later: on a split, the lower half is evicted before the new leaf.
            self._tick += 1
            tick = self._tick
        elif priority > node.priority:
            self.raise_priority(node, priority)
        self._touch(node, tick)
        return InsertResult(cached, node)

    def lock(self, node: TreeNode) -> None:
        """Add a reference to `node` and its ancestors; referenced nodes are never evicted."""
        self._lock_up_to(node, self.root)

    def move_lock(self, old: TreeNode, new: TreeNode) -> None:
        """`lock(new)` then `unlock(old)`, in one pass up from `new` that stops at `old` when `old`
        is on `new`'s path (a locked match extended by an insert from it, say a prompt after its
        prefill): at `old` and above, the reference taken and the one dropped cancel, so only
        the nodes below `old` change, not the whole path twice."""
        for node, walk in ((new, "lock"), (old, "unlock")):  # before either walk, as the compiled binding refuses
            if not isinstance(node, TreeNode):
                self._refuse_detached(node, walk)
        if not self._lock_up_to(new, old):  # `old` is not on `new`'s path
            self.unlock(old)

    def _lock_up_to(self, node: TreeNode, stop: TreeNode) -> bool:
        """Add a reference to `node` and its ancestors below `stop`; False if the root came first."""
        root, start = self.root, node
        try:
            while node is not stop:
                if node is root:
                    return False
                if node.lock_ref == 0:
                    size = node.key.size  # len(node), without the method call on this hot path
                    self.evictable_size -= size
                    self.protected_size += size
                node.lock_ref += 1
                node = node.parent
        except AttributeError:  # walked off a node of a reset tree: refused off the hot path
            self._refuse_detached(start, "lock")
        return True

    def unlock(self, node: TreeNode) -> None:
        """Drop a reference taken by `lock(node)`."""
        start = node
        try:
            while node is not self.root:
                if node.lock_ref <= 0:
                    if node.parent is None:
                        raise ValueError("unlock of a node detached from its cache")
                    raise RuntimeError("unlock of a node that is not locked")
                node.lock_ref -= 1
                if node.lock_ref == 0:
                    size = node.key.size
                    self.evictable_size += size
                    self.protected_size -= size
                    if not node.children:
                        self._push(node)
                node = node.parent
        except AttributeError:
            self._refuse_detached(start, "unlock")

    def _refuse_detached(self, start: TreeNode, walk: str) -> None:
        """Raise ValueError for a `lock` (`walk`) or `unlock` from `start` that met a node of a reset
        tree, first undoing what it did to that node: the nodes below it keep their change, as the
        compiled core, which checks each node before changing it, leaves them. TypeError for a `start`
        that is no node (None, say), as the compiled cache's binding raises: checked here, off the hot path."""
        if not isinstance(start, TreeNode):
            raise TypeError(f"{walk}: node must be a TreeNode, got {start!r}") from None
        node = start
        while node.parent is not None:
            node = node.parent
        size = node.key.size
        if walk == "lock":
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_size += size
                self.protected_size -= size
        else:
            node.lock_ref += 1
            if node.lock_ref == 1:
                self.evictable_size -= size
                self.protected_size += size
                self._unpush(node)
        raise ValueError(f"{walk} of a node detached from its cache") from None

    def evict(self, num_tokens: int) -> int:
        """Evict least-recently-used unlocked leaves until `num_tokens` are freed or none is left.

        Whole nodes are evicted, so the tokens freed (returned) can exceed `num_tokens`, an int
        within 64 bits (TypeError otherwise) and >= 0 (ValueError: a negative count is a caller's
        mistake, not a request for nothing), as on the compiled core.
        """
        num_tokens = as_int64("num_tokens", num_tokens)
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        freed = 0
        if len(self._heap) + len(self._wait_heap) > 2 * self.node_count + 64:
            self._rebuild_heap()
        pop = self._pop_lowest_priority if self._by_priority else self._pop_oldest
        while freed < num_tokens:
            node, stamp = pop()
            if node is None:
                break
            parent = node.parent
            key = self._key(node.key, 0)
            del parent.children[key]
            node.alive = False
            self._changed(node, None)
            self._changed(parent, key)
            self.node_count -= 1
            size = node.key.size  # len(node), without the method calls
            self.evictable_size -= size
            freed += size
            if node.value is not None and self.on_evict is not None:
                self.on_evict(node.value)
            parent.last_access = max(parent.last_access, stamp)
            if node.priority > parent.priority:
                parent.priority = node.priority
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                self._push(parent)
        return freed

    def check(self) -> None:
        """Raise `IntegrityError` (an AssertionError) naming the first broken invariant (docs/engine.md
        section 4, "The radix cache"). O(nodes + heap entries): for tests and debugging."""
        check_integrity(self, ROUND_TICKS)

    def sequences(self) -> Iterator[np.ndarray]:
        """Every cached root-to-leaf token sequence (for inspection and tests)."""
        stack: list[tuple[TreeNode, list[np.ndarray]]] = [(self.root, [])]
        while stack:
            node, keys = stack.pop()
            keys = keys + [node.key]
            if not node.children and node is not self.root:
                yield np.concatenate(keys)
            stack.extend((c, keys) for c in node.children.values())

    def nodes(self) -> Iterator[TreeNode]:
        """Every node but the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _split(self, child: TreeNode, m: int, stamp: int) -> TreeNode:
        """Cut `child`'s edge after m tokens; the new upper node is returned, `child` keeps the rest.

        Both halves get the time `stamp` (never earlier than `child`'s own): SGLang stamps the node
        it is about to split, so its lower half counts as accessed too. Waiting marks stay on
        `child`, whose depth (where those matches end) is unchanged; a stamp later than its round
        time is its time in this round, as for any access.
        """
        parent = child.parent
        stamp = max(stamp, child.last_access)
        upper = TreeNode(
            key=child.key[:m],
            value=None if child.value is None else child.value[:m],
            parent=parent,
            depth=child.depth - len(child) + m,
            lock_ref=child.lock_ref,
            last_access=stamp,
            priority=child.priority,
        )
        key = self._key(child.key, 0)
        parent.children[key] = upper
        child.key, child.key_bytes = child.key[m:], None
        if child.value is not None:
            child.value = child.value[m:]
        child.parent = upper
        upper.children[self._key(child.key, 0)] = child
        if stamp != child.last_access:
            self._touch(child, stamp)
        self._changed(parent, key)
        self.node_count += 1
        return upper

    def _changed(self, node: TreeNode, key: int | bytes | None) -> None:
        if len(self._log) >= 1 << 16:
            self._log_epoch += 1
            self._log = []
        self._log.append((node, key))

    def __repr__(self) -> str:
        return (
            f"RadixCache(nodes={self.node_count}, evictable={self.evictable_size}, "
            f"protected={self.protected_size}, page_size={self.page_size})"
        )


if (_compiled := core.compiled_module()) is not None:
    RadixCache.register(_compiled.RadixCache)

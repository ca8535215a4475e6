"""A paged KV pool: K and V tensors preallocated on the device, and an allocator of their slots.

A slot holds one token's keys and values in every layer: `k[layer, slot]` is (kv_heads, head_dim).
Slots are handed out and taken back by index; who owns an allocated slot is the engine's business
(the radix cache for cached tokens, a running request for its uncached ones).

Invariant (`check`): every slot is either free (exactly once in the free stack) or allocated, and
`num_free + num_allocated == num_slots`. Allocating more than is free, or freeing a slot that is
already free, raises RuntimeError: with the engine's memory accounting neither can happen, so
either is a bug.
"""

from __future__ import annotations

import numpy as np
import torch


class KVPool:
    """K/V storage of `num_slots` tokens.

    Args:
        num_slots: tokens the pool holds (the engine's `kv_capacity_tokens`).
        num_layers, num_kv_heads, head_dim: the model's shape.
        device, dtype: where and how K/V are stored (the model's).
    """

    def __init__(
        self,
        num_slots: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        shape = (num_layers, num_slots, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.num_slots = num_slots
        # Free slots are _stack[:_top]; allocation pops from the top, freeing pushes.
        self._stack = np.arange(num_slots, dtype=np.int64)[::-1].copy()
        self._top = num_slots
        self._is_free = np.ones(num_slots, dtype=bool)

    @property
    def num_free(self) -> int:
        return self._top

    @property
    def num_allocated(self) -> int:
        return self.num_slots - self._top

    def alloc(self, n: int) -> np.ndarray:
        """Take `n` free slots; returns their int64 indices."""
        if n > self._top:
            raise RuntimeError(f"KV pool exhausted: {n} slots wanted, {self._top} of {self.num_slots} free")
        slots = self._stack[self._top - n : self._top].copy()
        self._top -= n
        self._is_free[slots] = False
        return slots

    def free(self, slots: np.ndarray) -> None:
        """Give back allocated slots."""
        slots = np.asarray(slots, dtype=np.int64)
        if not slots.size:
            return
        if self._is_free[slots].any() or len(np.unique(slots)) != slots.size:
            raise RuntimeError(f"double free of KV slots {slots[self._is_free[slots]][:8].tolist()}")
        self._stack[self._top : self._top + slots.size] = slots
        self._top += slots.size
        self._is_free[slots] = True

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store (n, kv_heads, head_dim) keys and values of n tokens in `slots` (device tensor)."""
        self.k[layer, slots] = k.to(self.k.dtype)
        self.v[layer, slots] = v.to(self.v.dtype)

    def check(self) -> None:
        """Assert the allocator invariant (tests)."""
        stack = self._stack[: self._top]
        assert len(np.unique(stack)) == self._top, "a slot is twice in the free stack"
        assert self._is_free.sum() == self._top and self._is_free[stack].all(), "free stack and flags disagree"

"""Attention over the paged KV pool, as the `attention` callable of `Transformer.forward`.

Each object describes one forward pass: which slots the new tokens' K/V go to, and which cached
slots each request's queries read. Per layer it writes the new K/V into the pool, gathers each
request's K/V by slot index, and runs `scaled_dot_product_attention` with an explicit mask: causal
offset by the cached length in prefill, padding in decode. Grouped-query attention without copies:
the H / G query heads that share one of the G KV heads attend as one block of query rows. Inputs
are 4-D (batch, heads, rows, head_dim): 3-D ones send PyTorch to its slow reference kernel.

Shapes: q (N, H, D), k and v (N, G, D) for the N tokens of the pass.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .kv_pool import KVPool


def _expand(kv: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, G, L, D) -> (B, H, L, D) for grouped-query attention."""
    return kv.repeat_interleave(heads // kv.shape[-3], dim=-3)


class PrefillAttention:
    """A prefill batch: request i has `cached[i]` (slot indices of its cached prefix, attended to
    but not computed) and computes `new_slots[i]` new tokens at positions cached_i, cached_i + 1,
    ...; its rows are consecutive in the pass, in request order. A new token at position p attends
    to positions 0..p (causal mask offset by the cached length).

    The H / G query heads of a KV head attend as one block of rows (token-major), so K/V are
    gathered once and never expanded. Queries go in chunks of `chunk` tokens, each attending to the
    keys up to its last position, so a kernel that cannot skip masked blocks does about
    new * (cached + new / 2) query-key products per head, as the cost model assumes, plus
    new * chunk / 2.
    """

    def __init__(
        self, pool: KVPool, cached: Sequence[np.ndarray], new_slots: Sequence[np.ndarray], chunk: int = 512
    ) -> None:
        self.pool, self.chunk = pool, chunk
        dev = pool.k.device
        self.new = torch.as_tensor(np.concatenate(new_slots)).to(dev)
        self.slots = [torch.as_tensor(np.concatenate([c, s])).to(dev) for c, s in zip(cached, new_slots)]
        self.sizes = [(len(c), len(s)) for c, s in zip(cached, new_slots)]
        self._chunks: list[list[tuple[int, int, int, torch.Tensor]]] | None = None

    def _plan(self, group: int, dtype: torch.dtype) -> list[list[tuple[int, int, int, torch.Tensor]]]:
        """Per request, per chunk: (first row, end row, keys seen, additive mask of its
        chunk * group query rows), built on the first layer and reused by the others."""
        dev, plan, row = self.pool.k.device, [], 0
        for c, n in self.sizes:
            chunks = []
            for a in range(0, n, self.chunk):
                b = min(a + self.chunk, n)
                # Token a + j (position c + a + j) sees key positions 0..c + a + j.
                pos = torch.arange(c + a, c + b, device=dev).repeat_interleave(group)
                mask = torch.zeros(len(pos), c + b, device=dev, dtype=dtype)
                mask.masked_fill_(torch.arange(c + b, device=dev)[None, :] > pos[:, None], float("-inf"))
                chunks.append((row + a, row + b, c + b, mask))
            plan.append(chunks)
            row += n
        return plan

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.pool.write(layer, self.new, k, v)
        out = torch.empty_like(q)
        _, h, d = q.shape
        g = k.shape[1]
        if self._chunks is None:
            self._chunks = self._plan(h // g, self.pool.k.dtype)
        for slots, chunks in zip(self.slots, self._chunks):
            keys = self.pool.k[layer, slots].transpose(0, 1)[None]  # (1, G, S, D)
            vals = self.pool.v[layer, slots].transpose(0, 1)[None]
            for a, b, seen, mask in chunks:
                m = b - a
                # (m, H, D) -> (1, G, m * H/G, D): row t * H/G + j is token t, head g * H/G + j.
                query = q[a:b].view(m, g, h // g, d).transpose(0, 1).reshape(1, g, m * (h // g), d)
                o = F.scaled_dot_product_attention(
                    query.to(keys.dtype), keys[:, :, :seen], vals[:, :, :seen], attn_mask=mask
                )
                out[a:b] = o[0].view(g, m, h // g, d).transpose(0, 1).reshape(m, h, d).to(out.dtype)
        return out


class DecodeAttention:
    """One decode step of B requests of different lengths: request i's new token goes to slot
    `new_slots[i]` and attends to `context[i]` (the slots of its earlier tokens) and itself. Keys
    are gathered into a (B, L_max) slot matrix padded with slot 0 and masked out; the H / G query
    heads of a KV head attend as one block of rows, so K/V are read without expanding them."""

    def __init__(self, pool: KVPool, context: Sequence[np.ndarray], new_slots: np.ndarray) -> None:
        dev = pool.k.device
        lens = np.array([len(c) + 1 for c in context])
        idx = np.zeros((len(context), int(lens.max())), dtype=np.int64)
        for i, (c, s) in enumerate(zip(context, new_slots)):
            idx[i, : len(c)] = c
            idx[i, len(c)] = s
        self.pool = pool
        self.new = torch.as_tensor(np.asarray(new_slots, dtype=np.int64)).to(dev)
        self.idx = torch.as_tensor(idx).to(dev)
        valid = np.arange(idx.shape[1])[None, :] < lens[:, None]
        self.mask = torch.as_tensor(valid).to(dev)[:, None, None, :]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.pool.write(layer, self.new, k, v)
        b, h, d = q.shape
        keys = self.pool.k[layer, self.idx].transpose(1, 2)  # (B, G, L, D)
        vals = self.pool.v[layer, self.idx].transpose(1, 2)
        # The H / G query heads that share a KV head are rows of one query block: no K/V copies.
        query = q.view(b, keys.shape[1], h // keys.shape[1], d).to(keys.dtype)
        o = F.scaled_dot_product_attention(query, keys, vals, attn_mask=self.mask)
        return o.reshape(b, h, d).to(q.dtype)


class DenseCausalAttention:
    """Plain causal attention of one sequence with no pool, as a reference for tests."""

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        heads = q.shape[1]
        q, k, v = (x.transpose(0, 1)[None] for x in (q, k, v))
        o = F.scaled_dot_product_attention(q, _expand(k, heads), _expand(v, heads), is_causal=True)
        return o[0].transpose(0, 1)

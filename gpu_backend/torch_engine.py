"""The real serving engine: `ServingEngine`'s scheduling, memory and radix cache driving a PyTorch
model over a paged KV pool, with measured iteration times on the engine clock.

Slot ownership (checked by `check_slots`): every allocated pool slot belongs to exactly one of
- the radix cache: the per-token values of its nodes (freed by the cache's `on_evict`);
- a running request: the tokens of its sequence the cache does not hold for it (a partial last
  prompt page, and its generated tokens), from `_Seq.tree_len` on.
The pool has `config.kv_capacity_tokens` slots, and the base engine's accounting
(cache.total_size + reserved <= kv_capacity_tokens, every slot counted in one of the two before it
is allocated; retraction makes room for decode) guarantees they suffice; an allocation failure is
a bug and raises. A chunk that is not a request's last hands all its slots to the tree (chunks
end on page boundaries); a retracted request frees its own slots and keeps its output so far, which
its next prefill recomputes.

Outputs: a request whose workload knows its reply (`Request.output_tokens`, e.g. an agentic session
turn that the next turn quotes) is decoded with that reply fed back as input (teacher forcing), so
the cache holds the same tokens as in the simulated engine and later turns hit it; otherwise the
model's greedy tokens are the reply. Either way every step computes the model's logits, so timings
are those of generation. At finish, prompt + output minus the last output token enters the cache:
the last token's K/V is never computed (as in SGLang).

Each decode call runs exactly one step of the whole running batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

import numpy as np
import torch

from auction_gym.engine import Admission, EngineConfig, Running, ServingEngine
from auction_gym.policy import AdmissionPolicy
from auction_gym.radix_cache import TreeNode
from auction_gym.request import Request

from .attention import DecodeAttention, PrefillAttention
from .kv_pool import KVPool
from .model import ModelConfig, Transformer, build_model, model_dtype
from .timer import DeviceTimer, choose_clock

if TYPE_CHECKING:
    from .speed_reference import SpeedReference


@dataclass(slots=True, eq=False)
class _Seq:
    """A running request's sequence on the device."""

    slots: np.ndarray
    """Slot of every token whose K/V is computed (prompt, then generated tokens but the last)."""
    tree_len: int
    """slots[:tree_len] belong to the radix cache, the rest to this request."""
    out: list[int] = field(default_factory=list)
    """Output tokens so far; the last one's K/V is not computed yet."""


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _path_slots(node: TreeNode) -> np.ndarray:
    """Slot indices of the tokens from the root to `node` (its values along the path)."""
    parts = []
    while node.parent is not None:
        parts.append(node.value)
        node = node.parent
    return np.concatenate(parts[::-1]) if parts else np.zeros(0, dtype=np.int64)


def run_prefill(
    model: Transformer, pool: KVPool, cached: list[np.ndarray], new_slots: list[np.ndarray], tokens: list[np.ndarray]
) -> np.ndarray:
    """Prefill a batch: request i attends to its cached slots `cached[i]` and computes `tokens[i]`
    (its uncached suffix) into `new_slots[i]`. Returns each request's greedy next token (B,)."""
    positions = [np.arange(len(c), len(c) + len(t)) for c, t in zip(cached, tokens)]
    last = np.cumsum([len(t) for t in tokens]) - 1
    attention = PrefillAttention(pool, cached, new_slots)
    logits = model(np.concatenate(tokens), np.concatenate(positions), attention, logits_at=last)
    return logits.argmax(-1).cpu().numpy()


def run_decode(
    model: Transformer, pool: KVPool, context: list[np.ndarray], new_slots: np.ndarray, tokens: np.ndarray
) -> np.ndarray:
    """One decode step: request i feeds `tokens[i]` at position len(context[i]) into slot
    `new_slots[i]`, attending to `context[i]`. Returns the greedy next tokens (B,)."""
    positions = np.array([len(c) for c in context])
    logits = model(tokens, positions, DecodeAttention(pool, context, new_slots))
    return logits.argmax(-1).cpu().numpy()


class TorchEngine(ServingEngine):
    """Serving engine that runs a transformer (see module docstring).

    Args:
        scheduler: an `AdmissionPolicy` (`auction_gym.policy`), or the name of one.
        config: capacity limits; `kv_capacity_tokens` is the KV pool's size in slots.
        preset: a `gpu_backend.model.PRESETS` name or a `ModelConfig`.
        device: torch device; None: "cuda" if available, else "cpu".
        dtype: None: bfloat16 on CUDA, float32 elsewhere.
        seed: seed of the random weights.
        weights: a checkpoint to load instead (see `build_model`).
        model: an already built model (tests, benchmarks); overrides preset/seed/weights.
        clock: what an iteration's seconds measure on a CPU device, a `gpu_backend.timer.CLOCKS`
            name: "cpu", the computing thread's CPU time, which does not count waits while other
            processes hold the cores (needs `torch.set_num_threads(1)`); "wall", elapsed time.
            None (default): "cpu" when torch computes on one thread, else "wall" with a one-line
            warning (`gpu_backend.timer.choose_clock`); `timer.clock` says which. On CUDA both are
            CUDA events.
        reference: a `gpu_backend.speed_reference.SpeedReference` that scales each iteration's
            seconds to the machine's nominal speed (None: measured seconds as they are).
    """

    def __init__(
        self,
        scheduler: AdmissionPolicy | str = "fcfs",
        config: EngineConfig | None = None,
        *,
        preset: str | ModelConfig = "tiny",
        device: str | torch.device | None = None,
        dtype: torch.dtype | str | None = None,
        seed: int = 0,
        weights: str | None = None,
        model: Transformer | None = None,
        clock: str | None = None,
        reference: SpeedReference | None = None,
    ) -> None:
        super().__init__(scheduler, config)
        if model is None:
            device = torch.device(device or default_device())
            dtype = model_dtype(dtype, device)
            model = build_model(preset, device=device, dtype=dtype, seed=seed, weights=weights)
        self.model = model
        cfg = model.cfg
        self.pool = KVPool(self.config.kv_capacity_tokens, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim,
                           device=model.device, dtype=model.dtype)
        self.cache.on_evict = self.pool.free
        self.timer = DeviceTimer(model.device, choose_clock(model.device, clock))
        self.reference = reference
        self._seqs: dict[int, _Seq] = {}
        self._retracted: dict[int, list[int]] = {}
        """Output so far of each retracted request, until its next prefill."""
        self.outputs: dict[int, np.ndarray] = {}
        """Output tokens of each finished request, by request id."""

    # Inputs are checked as they are submitted, so a bad request fails at once and cleanly.

    def submit(self, requests: Request | Iterable[Request]) -> None:
        """As `ServingEngine.submit`; raises ValueError for a token id outside the model's
        vocabulary or a request whose prompt + output exceeds the model's context."""
        if isinstance(requests, Request):
            requests = [requests]
        if isinstance(requests, Sequence):
            for r in requests:
                self.validate(r)
            super().submit(requests)
        else:
            super().submit(self._validated(requests))

    def _validated(self, requests: Iterable[Request]) -> Iterator[Request]:
        for r in requests:
            self.validate(r)
            yield r

    def validate(self, r: Request) -> None:
        """Raise ValueError unless the model can serve `r`."""
        self.model.check_tokens(r.tokens, f"request {r.id}: prompt")
        if r.output_tokens is not None:
            self.model.check_tokens(r.output_tokens, f"request {r.id}: output_tokens")
        self.model.check_length(r.prompt_len + r.output_len, f"request {r.id}: prompt + output")

    # Execution.

    def _execute_prefill(self, batch: list[Admission]) -> float:
        cached = [_path_slots(adm.node) for adm in batch]
        assert all(len(c) == adm.cached for c, adm in zip(cached, batch)), "cached prefix and slots disagree"
        new_slots = [self.pool.alloc(adm.extend) for adm in batch]
        tokens = [adm.tokens[adm.cached : adm.end] for adm in batch]
        with self.timer as t:
            first = run_prefill(self.model, self.pool, cached, new_slots, tokens)
        for adm, c, s, greedy in zip(batch, cached, new_slots, first):
            seq = _Seq(np.concatenate([c, s]), adm.cached)
            if adm.last_chunk:
                seq.out = self._retracted.pop(adm.request.id, [])
                seq.out.append(self._next_token(adm.request, adm.generated, int(greedy)))
            self._seqs[adm.request.id] = seq
        return self._seconds(t.seconds)

    def _seconds(self, measured: float) -> float:
        """An iteration's measured seconds, scaled by the speed reference if there is one."""
        return measured if self.reference is None else self.reference.scale(measured)

    def _execute_decode(self) -> tuple[int, float]:
        seqs = [self._seqs[run.request.id] for run in self.running]
        self._make_free(self.rules.decode_tokens(len(seqs)))  # none under "oracle": taken at admission
        new = self.pool.alloc(len(seqs))
        with self.timer as t:
            last = np.array([s.out[-1] for s in seqs])
            greedy = run_decode(self.model, self.pool, [s.slots for s in seqs], new, last)
        for run, seq, slot, g in zip(self.running, seqs, new, greedy):
            seq.slots = np.append(seq.slots, slot)
            seq.out.append(self._next_token(run.request, len(seq.out), int(g)))
        return 1, self._seconds(t.seconds)

    @staticmethod
    def _next_token(r: Request, i: int, greedy: int) -> int:
        return int(r.output_tokens[i]) if r.output_tokens is not None else greedy

    # Cache insertion: hand slots to the tree, free the duplicates.

    def _cache_prompt(self, adm: Admission) -> TreeNode:
        seq = self._seqs[adm.request.id]
        res = self.cache.insert(adm.tokens[: adm.end], value=seq.slots.copy(), priority=adm.priority)
        # Another request of the batch may have inserted part of our prompt first: the tree keeps
        # its slots, ours for [adm.cached, res.cached) are duplicates.
        if res.cached > adm.cached:
            self.pool.free(seq.slots[adm.cached : res.cached])
            seq.slots[: res.cached] = _path_slots(res.last_node)[: res.cached]
        seq.tree_len = res.last_node.depth
        if not adm.last_chunk:
            assert seq.tree_len == adm.end, "a chunk must end on a page boundary"
            del self._seqs[adm.request.id]  # the tree owns every slot until the next chunk
        return res.last_node

    def _release(self, run: Running, generated: int) -> None:
        seq = self._seqs.pop(run.request.id)
        assert len(seq.out) == generated, "decode steps and emitted tokens disagree"
        self.pool.free(seq.slots[seq.tree_len :])
        self._retracted[run.request.id] = seq.out

    def _output_tokens(self, r: Request) -> np.ndarray:
        if r.output_tokens is None and r.id in self._retracted:
            return np.asarray(self._retracted[r.id], dtype=np.int64)
        return super()._output_tokens(r)

    def _cache_finished(self, run: Running) -> None:
        r, seq = run.request, self._seqs.pop(run.request.id)
        self.outputs[r.id] = np.asarray(seq.out, dtype=np.int64)
        tokens = np.concatenate([r.tokens, np.asarray(seq.out[:-1], dtype=np.int64)])
        res = self.cache.insert(tokens, value=seq.slots, priority=run.priority)
        own = seq.slots[seq.tree_len :]
        taken = np.zeros(len(own), dtype=bool)  # slots the insert handed to the tree
        taken[max(res.cached - seq.tree_len, 0) : res.last_node.depth - seq.tree_len] = True
        self.pool.free(own[~taken])

    # Invariants.

    def check_slots(self) -> None:
        """Assert that every pool slot is free or owned exactly once (see module docstring)."""
        self.pool.check()
        owned = [n.value for n in self.cache.nodes() if n.value is not None]
        owned += [s.slots[s.tree_len :] for s in self._seqs.values()]
        owned_all = np.concatenate(owned) if owned else np.zeros(0, dtype=np.int64)
        assert len(np.unique(owned_all)) == len(owned_all), "a KV slot has two owners"
        assert not self.pool._is_free[owned_all].any(), "an owned KV slot is free"
        assert len(owned_all) == self.pool.num_allocated, (
            f"{self.pool.num_allocated - len(owned_all)} KV slots are allocated but owned by nobody"
        )

"""Capacity limits and admission rules of a serving engine (`EngineConfig`).

Defaults are SGLang 0.5.23's for one H100 80GB serving Llama-3-8B; each field says where SGLang
sets the same number, so a study can move one rule at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._checks import check_count
from ..radix_cache import EVICTION_POLICIES
from .cost_model import CostModel
from .rules import RULES

RESERVATIONS = tuple(RULES)
"""The built-in rule sets (`EngineConfig.reservation`; `rules.RULES` holds them and any added)."""

COUNTS = {"kv_capacity_tokens": 1, "max_prefill_tokens": 1, "max_running_requests": 1, "page_size": 1,
          "clip_max_new_tokens": 1, "new_token_ratio_decay_steps": 1, "retract_decode_steps": 0,
          "in_batch_check_threshold": 0, "in_batch_deprioritize_threshold": 1}
"""`EngineConfig`'s counts, each with the least it may be (`chunked_prefill_size`, which may be
None, is checked apart)."""


@dataclass(frozen=True)
class EngineConfig:
    """Capacity limits of the engine. Defaults: one H100 80GB serving Llama-3-8B (cost_model.py):
    80 GB x 0.88 static memory fraction - 16 GB weights = ~54 GB of KV at 128 KiB per token."""

    kv_capacity_tokens: int = 400_000
    max_prefill_tokens: int = 16_384
    """Prompt tokens one prefill batch may compute (SGLang's `max_prefill_tokens`)."""
    max_running_requests: int = 256
    page_size: int = 1
    cost_model: CostModel = field(default_factory=CostModel)
    chunked_prefill_size: int | None = 8192
    """SGLang's `chunked_prefill_size` (8192 for an 80 GB GPU): a prefill batch computes at most
    this many tokens, and the request that does not fit whole computes a chunk and continues in
    the next batches, its finished chunks entering the cache. None: off (the first request of a
    batch is admitted whole, however long, and later ones up to `max_prefill_tokens`)."""
    reservation: str = "sglang"
    """The engine's rule set (`rules.RULES`, built by `rules.rules_for`), named by how output
    memory is set aside. "sglang": a request is admitted if memory holds its uncached prompt plus
    min(max_new_tokens - generated, clip_max_new_tokens), counting the running requests' remaining
    caps scaled by the adaptive new-token ratio; decode tokens are allocated as they are produced,
    and when a decode step does not fit, running requests are retracted (back to the waiting queue,
    their prompts left in the cache). "oracle": the true output length is reserved in full at
    admission, so nothing is ever retracted (the engine knows what a server cannot)."""
    clip_max_new_tokens: int = 4096
    """SGLang's `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`: the most output one request is budgeted for."""
    init_new_token_ratio: float = 0.7
    """SGLang's `SGLANG_INIT_NEW_TOKEN_RATIO` (x schedule_conservativeness 1.0): the share of their
    remaining cap that running requests are assumed to still generate, after an idle engine."""
    min_new_token_ratio: float = 0.098
    """The ratio's floor: init x `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR` (0.14)."""
    new_token_ratio_decay_steps: int = 600
    """Decode steps over which the ratio falls from init to its floor (SGLang's default)."""
    retract_decode_steps: int = 20
    """SGLang's `SGLANG_RETRACT_DECODE_STEPS`: after a retraction, the ratio is re-estimated as if
    every remaining request will run this many more steps, and the cache is evicted down to room
    for that many steps."""
    in_batch_prefix_caching: bool = True
    """SGLang's in-batch prefix sharing (`in_batch.py`), under the policies that sort by it (`lpm`):
    a request sharing an uncached prefix with one ahead of it in the queue goes behind the others.
    False: off."""
    in_batch_check_threshold: int = 32
    """Only requests with at most this many cached prompt tokens are checked (SGLang: 32)."""
    in_batch_deprioritize_threshold: int = 32
    """A checked request sharing at least this many tokens with an earlier checked one goes behind (SGLang: 32)."""
    priority_preemption: bool = False
    """SGLang's priority preemption (`--enable-priority-scheduling` without
    `--disable-priority-preemption`; `PrefillAdder.preempt_to_schedule`): when the running batch is
    full, a waiting request whose priority exceeds running ones' by more than
    `priority_preemption_threshold` sends them back to the waiting queue (docs/engine.md section 4).
    Priorities are the admission policy's (`Decision.priorities`: `sglang_priority`, `qos_lpm`);
    under a policy without them every request has priority 0 and nothing is preempted. False: off,
    SGLang with `--disable-priority-preemption`."""
    priority_preemption_threshold: int = 10
    """SGLang's `--priority-scheduling-preemption-threshold` (default 10): the priority difference a
    waiting request must exceed, strictly, to preempt a running one."""
    radix_eviction_policy: str = "lru"
    """SGLang's `--radix-eviction-policy`: "lru" (its default) or "priority" (the lowest priority
    first, then least recently used; `radix_cache.EVICTION_POLICIES`)."""

    def __post_init__(self) -> None:
        for name, least in COUNTS.items():
            check_count(name, getattr(self, name), least)
        if self.chunked_prefill_size is not None:
            check_count("chunked_prefill_size", self.chunked_prefill_size, self.page_size)
            if self.max_prefill_tokens < self.page_size:  # a chunk must hold a page to make progress
                raise ValueError(f"with chunked prefill, max_prefill_tokens must be >= page_size = {self.page_size}")
        if self.reservation not in RULES:
            raise ValueError(f"reservation must be one of {', '.join(RULES)}, got {self.reservation!r}")
        lo, hi = self.min_new_token_ratio, self.init_new_token_ratio
        if not (isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and 0 <= lo <= hi <= 1):
            raise ValueError(f"need 0 <= min_new_token_ratio <= init_new_token_ratio <= 1, got {lo!r}, {hi!r}")
        for name in ("in_batch_prefix_caching", "priority_preemption"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        threshold = self.priority_preemption_threshold
        if not (isinstance(threshold, int) and not isinstance(threshold, bool) and threshold >= 0):
            raise ValueError("priority_preemption_threshold must be an int >= 0 (SGLang's integer priority "
                             f"difference), got {threshold!r}")
        if self.radix_eviction_policy not in EVICTION_POLICIES:
            raise ValueError(f"radix_eviction_policy must be one of {', '.join(EVICTION_POLICIES)}, "
                             f"got {self.radix_eviction_policy!r}")
        cm = self.cost_model
        if not isinstance(cm, CostModel):  # its coefficients are read below and by every iteration
            raise ValueError("cost_model must be a CostModel (auction_gym.CostModel(...), or CostModel.from_json(path) "
                             f"of a calibration's), got {cm!r}")
        if cm.decode_base + cm.decode_per_request <= 0 or cm.prefill_base + cm.prefill_per_token <= 0:
            raise ValueError("cost model must give every iteration a positive duration")

    @property
    def reads_priorities(self) -> bool:
        """Whether a rule reads the requests' priorities (preemption, or `priority` eviction)."""
        return self.priority_preemption or self.radix_eviction_policy == "priority"

    def paged(self, tokens: int) -> int:
        """`tokens` rounded up to whole pages."""
        return -(-tokens // self.page_size) * self.page_size

    def output_room(self, prompt_len: int) -> int:
        """The most output a request with a `prompt_len`-token prompt is budgeted for: the pool less
        the paged prompt, a page and a token, where SGLang clips `max_new_tokens` (so a lone request fits)."""
        return self.kv_capacity_tokens - self.paged(prompt_len) - self.page_size - 1

    def rejection(self, prompt_len: int, output_len: int) -> str | None:
        """Why a request of `prompt_len` + `output_len` tokens is refused at arrival (None: it is
        not): its true output exceeds `output_room`, where SGLang would cut the reply short."""
        if output_len <= self.output_room(prompt_len):
            return None
        margin = self.kv_capacity_tokens - prompt_len - self.output_room(prompt_len)
        return (f"prompt + output = {prompt_len + output_len} tokens exceeds kv_capacity_tokens = "
                f"{self.kv_capacity_tokens} less {margin} (the prompt's last page rounded up, a page "
                "and a token: SGLang's margin)")

    @property
    def prefill_budget(self) -> int:
        """Tokens one prefill batch computes at most: the chunk size when chunking, else
        `max_prefill_tokens` (which the first request of a batch may exceed)."""
        if self.chunked_prefill_size is None:
            return self.max_prefill_tokens
        return min(self.chunked_prefill_size, self.max_prefill_tokens)

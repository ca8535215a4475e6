"""How long one engine iteration takes (docs/design.md section 4).

    prefill  t = a + b * new_tokens + c * attention
    decode   t = d + e * batch + f * context + g * min(batch, k)

attention = sum over the batch of new_i * (cached_i + new_i / 2), causal attention's query-key
pairs; context = the running requests' lengths summed. The defaults (Llama-3-8B bf16 on one H100,
from the roofline) and their derivation are in docs/engine.md section 4; calibration fits real ones.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class CostModel:
    """Iteration-time model of a serving engine; all coefficients in seconds (per unit named)."""

    prefill_base: float = 4.0e-3
    prefill_per_token: float = 3.25e-5
    prefill_per_attention: float = 1.3e-9
    decode_base: float = 6.0e-3
    decode_per_request: float = 3.0e-5
    decode_per_context_token: float = 4.9e-8
    name: str = "llama-3-8b-bf16/h100-sxm-80gb (roofline)"
    decode_knee: float = 0.0
    """Requests (k): the first `decode_knee` of a decode batch also pay `decode_per_request_to_knee`."""
    decode_per_request_to_knee: float = 0.0
    """Seconds (g) per request of a decode batch, for its first `decode_knee` requests only."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "name":
                continue
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"cost model {f.name} must be a finite number >= 0, got {v!r}")

    def prefill_time(self, new_tokens: int, attention: float) -> float:
        """Seconds for a prefill batch computing `new_tokens` with `attention` query-key pairs."""
        return (
            self.prefill_base
            + self.prefill_per_token * new_tokens
            + self.prefill_per_attention * attention
        )

    def decode_time(self, batch: int, context: int) -> float:
        """Seconds for one decode step of `batch` requests holding `context` tokens in all."""
        return (
            self.decode_base + self.decode_per_request * batch + self.decode_per_context_token * context
            + self.decode_per_request_to_knee * min(batch, self.decode_knee)
        )

    def decode_steps_time(self, steps: int, batch: int, context: int) -> float:
        """Seconds for `steps` decode steps of a fixed batch whose context grows by `batch` a step."""
        return self.decode_steps_after(self.decode_time(batch, context), steps, batch)

    def decode_steps_after(self, first: float, steps: int, batch: int) -> float:
        """`decode_steps_time` given the first step's time `first` (`decode_time`), for a caller
        that tries several step counts of one batch."""
        return steps * first + self.decode_per_context_token * batch * steps * (steps - 1) / 2

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def from_json(cls, path: str | Path) -> CostModel:
        """Load coefficients written by `to_json` (or by `radix-auction calibrate`)."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not a JSON cost model ({e})") from None
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{path}: unknown cost model fields {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)

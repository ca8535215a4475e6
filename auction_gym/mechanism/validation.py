"""Run-time checks of an auction's inputs.

Bids are re-checked at every run: a request's `bid` and `urgency` may be changed after construction,
so `Request.__post_init__` alone does not guarantee them, and a market's round bids multiplier x
urgency, which no request holds.
"""

from __future__ import annotations

import math
from typing import Container, Sequence

import numpy as np

from ..request import TOKEN_DTYPE, Request, token_view

COST_MODELS = ("unit", "tokens")


def validate_cost_model(cost_model: str, request_overhead: float) -> tuple[str, float]:
    """Return (cost_model, request_overhead) checked.

    Raises ValueError on an unknown cost model or a request_overhead that is not finite and >= 0.
    """
    if cost_model not in COST_MODELS:
        raise ValueError(f"unknown cost_model {cost_model!r}; valid: {', '.join(COST_MODELS)}")
    try:
        overhead = float(request_overhead)
    except (TypeError, ValueError):
        raise ValueError(f"request_overhead must be a number, got {request_overhead!r}") from None
    if not math.isfinite(overhead) or overhead < 0:
        raise ValueError(f"request_overhead must be finite and >= 0, got {request_overhead!r}")
    return cost_model, overhead


def validate_requests(
    requests: Sequence[Request], checked: Container[int] = ()
) -> tuple[list[np.ndarray], list[float]]:
    """Check a round's queue; return each request's tokens (read-only int64) and bid (float).

    `checked` holds the ids of token arrays that passed before and are still alive (held by the
    caller, so no other array has their id), whose checks are skipped: an auction's `TokenMemo`.

    Raises ValueError naming the request for a bid that is not a finite number >= 0, a duplicate
    request id, or an empty token sequence.
    """
    # Fast path for the usual queue (no strings built); anything it does not accept, including
    # tokens that need converting, goes through the request-by-request check, which names the
    # culprit.
    seen: set[int] = set()
    tokens: list[np.ndarray] = []
    bids: list[float] = []
    try:
        for r in requests:
            bid, toks = float(r.bid), r.tokens
            if (
                r.id in seen
                or not 0.0 <= bid < math.inf  # also rejects nan
                or id(toks) not in checked
                and (type(toks) is not np.ndarray or toks.dtype != TOKEN_DTYPE or toks.ndim != 1 or toks.size == 0)
            ):
                return _validate_one_by_one(requests)
            seen.add(r.id)
            tokens.append(toks)
            bids.append(bid)
    except (TypeError, ValueError):
        return _validate_one_by_one(requests)
    return tokens, bids


def _validate_one_by_one(requests: Sequence[Request]) -> tuple[list[np.ndarray], list[float]]:
    seen: set[int] = set()
    tokens: list[np.ndarray] = []
    bids: list[float] = []
    for r in requests:
        if r.id in seen:
            raise ValueError(f"request {r.id}: duplicate request id in the queue")
        seen.add(r.id)
        try:
            bid = float(r.bid)
        except (TypeError, ValueError):
            raise ValueError(f"request {r.id}: bid must be a number, got {r.bid!r}") from None
        if not math.isfinite(bid) or bid < 0:
            raise ValueError(f"request {r.id}: bid must be finite and >= 0, got {r.bid!r}")
        toks = token_view(r.tokens, f"request {r.id}: tokens")
        if toks.size == 0:
            raise ValueError(f"request {r.id}: empty token sequence")
        tokens.append(toks)
        bids.append(bid)
    return tokens, bids

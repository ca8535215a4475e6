"""The unit of work: one LLM call with its prompt, its owner and its worth (docs/design.md section 3)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from functools import partial
from numbers import Integral
from operator import attrgetter
from typing import Callable, Sequence

import numpy as np

from . import core
from ._checks import is_int, within_int64

TOKEN_DTYPE = np.int64


def as_tokens(tokens: Sequence[int] | np.ndarray, what: str = "tokens") -> np.ndarray:
    """Return `tokens` as a read-only 1-D int64 array; raise ValueError if they are not token ids.

    A read-only int64 array is returned as is (after the range check), so a workload that freezes
    its arrays hands them to `Request` without a copy."""
    arr = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-D sequence of ints, got shape {arr.shape}")
    if arr.dtype != TOKEN_DTYPE:
        if arr.size and arr.dtype.kind not in "iu":
            raise ValueError(f"{what} must contain integer token ids, got dtype {arr.dtype}")
        arr = arr.astype(TOKEN_DTYPE)
    elif arr.flags.writeable:
        arr = arr.copy()
    if arr.size and _min(arr) < 0:
        raise ValueError(f"{what} must be non-negative token ids")
    arr.flags.writeable = False
    return arr


_min = np.minimum.reduce


def read_only(arr: np.ndarray) -> np.ndarray:
    """Mark `arr` read-only (so are views of it) and return it: an int64 array so marked is what
    `Request` takes without a copy."""
    arr.setflags(write=False)
    return arr


def token_view(tokens: Sequence[int] | np.ndarray, what: str = "tokens") -> np.ndarray:
    """`tokens` for reading: an int64 1-D array is used as is (no copy, no O(n) range check), so
    hot paths can take `Request.tokens`, which the constructor validated, for free; anything else
    goes through `as_tokens`. None is a TypeError (no sequence at all), as the compiled cache's
    bindings refuse it."""
    if isinstance(tokens, np.ndarray) and tokens.ndim == 1 and tokens.dtype == TOKEN_DTYPE:
        return tokens
    if tokens is None:
        raise TypeError(f"{what} must be a 1-D sequence of ints, got None")
    return as_tokens(tokens, what)


@dataclass(eq=False, slots=True)
class Request:
    """One inference call.

    | field          | unit                 | meaning                                                      |
    |----------------|----------------------|--------------------------------------------------------------|
    | id             | -                    | unique within a workload                                     |
    | bidder         | -                    | who pays for it (tenant / agent): an int >= 0, its index in  |
    |                |                      | a market's per-bidder lists (multipliers, budgets)           |
    | tokens         | token ids            | the prompt; any sequence of non-negative ints                |
    | bid            | money / s of latency | reported urgency, what the auction ranks by                  |
    | output_len     | tokens               | tokens the request generates (>= 1: prefill emits the first) |
    | max_new_tokens | tokens               | the client's cap on output (>= output_len; default           |
    |                |                      | output_len). A server knows this, not output_len: the engine |
    |                |                      | reserves memory by it (`EngineConfig.reservation`)           |
    | arrival        | s                    | time the request reaches the server                          |
    | value          | money                | worth of the completed request, V                            |
    | urgency        | money / s of latency | true cost of waiting, w (defaults to `bid`)                  |
    | output_tokens  | token ids            | the reply, if the workload knows it (a later turn of a       |
    |                |                      | session quotes it); otherwise the engine makes one up        |

    Requests compare by identity: two objects are never "the same request" by value.
    """

    id: int
    bidder: int
    tokens: np.ndarray
    bid: float = 0.0
    output_len: int = 1
    arrival: float = 0.0
    value: float = 0.0
    urgency: float | None = None
    output_tokens: np.ndarray | None = field(default=None, repr=False)
    kind: str = ""
    max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        # Called once per request of every workload, so the checks are written out rather than looped.
        rid = self.id
        if isinstance(rid, bool) or not isinstance(rid, Integral) or not within_int64(rid):
            raise ValueError(f"request id must be an int within 64 bits (the engines key their state by it), got {rid!r}")
        bidder = self.bidder
        if isinstance(bidder, bool) or not isinstance(bidder, Integral) or not 0 <= bidder < 2**63:
            # A negative bidder would index a market's per-bidder lists from their end: another's.
            raise ValueError(f"request {rid}: bidder must be an int >= 0 within 64 bits, got {bidder!r}")
        try:
            self.tokens = as_tokens(self.tokens)
            if self.output_tokens is not None:
                self.output_tokens = as_tokens(self.output_tokens, "output_tokens")
        except ValueError as e:
            raise ValueError(f"request {self.id}: {e}") from None
        if self.tokens.size == 0:
            raise ValueError(f"request {self.id}: empty prompt (tokens has length 0)")
        out = self.output_len
        if not is_int(out):
            raise ValueError(f"request {self.id}: output_len must be an int, got {out!r}")
        self.output_len = out = int(out)
        if out < 1:
            raise ValueError(f"request {self.id}: output_len must be >= 1, got {out}")
        self.bid, self.arrival, self.value = bid, arrival, value = float(self.bid), float(self.arrival), float(self.value)
        if not (math.isfinite(bid) and math.isfinite(arrival) and math.isfinite(value)):
            name, v = next((n, v) for n, v in (("bid", bid), ("arrival", arrival), ("value", value)) if not math.isfinite(v))
            raise ValueError(f"request {self.id}: {name} must be finite, got {v}")
        if arrival < 0 or bid < 0:
            raise ValueError(f"request {self.id}: arrival and bid must be >= 0, got {arrival}, {bid}")
        self.urgency = urgency = bid if self.urgency is None else float(self.urgency)
        if not (urgency >= 0 and math.isfinite(urgency)):
            raise ValueError(f"request {self.id}: urgency must be finite and >= 0, got {urgency}")
        cap = self.max_new_tokens
        if cap is None:
            self.max_new_tokens = out
        elif not is_int(cap) or cap < out:
            raise ValueError(f"request {self.id}: max_new_tokens must be an int >= output_len = {out}, got {cap!r}")
        else:
            self.max_new_tokens = int(cap)
        if self.output_tokens is not None and self.output_tokens.size != out:
            raise ValueError(
                f"request {self.id}: output_tokens has {self.output_tokens.size} tokens, output_len is {out}"
            )

    @classmethod
    def _unchecked_many(
        cls, *, first_id: int, bidder: Sequence[int], tokens: Sequence[np.ndarray], bid: Sequence[float],
        output_len: Sequence[int], arrival: Sequence[float], value: Sequence[float], urgency: Sequence[float],
        output_tokens: Sequence[np.ndarray | None], kind: Sequence[str], max_new_tokens: Sequence[int],
    ) -> list[Request]:
        """Requests `first_id`, `first_id` + 1, ... from one sequence per field (equally long), whose
        values a workload generator has already put in their checked form (read-only int64 token
        arrays of non-negative ids, Python ints and finite floats in range), without
        `__post_init__`'s checks, which would otherwise cost a generated request as much as drawing
        it. The generators' tests rebuild their requests through the checked constructor. Every
        field is a keyword: ten of them in a row would be easy to misplace."""
        new, made = object.__new__, []
        append = made.append
        for fields in zip(range(first_id, first_id + len(tokens)), bidder, tokens, bid, output_len, arrival, value,
                          urgency, output_tokens, kind, max_new_tokens, strict=True):
            r = new(cls)
            (r.id, r.bidder, r.tokens, r.bid, r.output_len, r.arrival, r.value, r.urgency, r.output_tokens, r.kind,
             r.max_new_tokens) = fields
            append(r)
        return made

    @property
    def prompt_len(self) -> int:
        return self.tokens.size


def unchecked_many() -> Callable[..., list[Request]]:
    """`Request._unchecked_many` as the core active now runs it, which a workload stream picks
    when it starts: on the compiled core, `_core.unchecked_requests` makes the same requests (the
    same objects in the same slots) in one call, and declines, for the Python loop, what that loop
    must read itself (columns other than lists and tuples, or of unequal lengths)."""
    module = core.compiled_module() if core.active() == "compiled" else None
    return Request._unchecked_many if module is None else partial(_compiled_many, module.unchecked_requests)


_COLUMNS = tuple(f.name for f in dataclass_fields(Request))[1:]
"""`_unchecked_many`'s columns, in Request's order (its slots' after the id, as the compiled call
reads them)."""


def _compiled_many(make: Callable[..., list[Request] | None], *, first_id: int, **columns: Sequence) -> list[Request]:
    made = make(Request, first_id, tuple(columns[name] for name in _COLUMNS))
    return Request._unchecked_many(first_id=first_id, **columns) if made is None else made


fcfs_key: Callable[[Request], tuple[float, int]] = attrgetter("arrival", "id")
"""First come, first served; equal arrivals by id, so every order is deterministic."""

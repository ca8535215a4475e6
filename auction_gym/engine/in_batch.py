"""In-batch prefix sharing: SGLang's rule against computing one uncached prefix twice in a batch.

The cache learns a prompt only when its prefill ends, so two requests of one batch that share an
uncached prefix would each compute it; SGLang puts the later one behind the others. The rule, the
policies that apply it and its measured effect are in docs/sglang-fidelity.md ("In-batch prefix
sharing").
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..request import Request


def prompt_head(tokens: np.ndarray, n: int) -> bytes | None:
    """The first `n` tokens of `tokens` as bytes (what `deprioritized` compares), None when shorter."""
    return tokens[:n].tobytes() if len(tokens) >= n else None


def deprioritized(
    waiting: Sequence[Request], cached: Sequence[int], head: Callable[[Request], bytes | None], check: int,
) -> set[int]:
    """SGLang's `temporary_deprioritized`: ids of the requests of `waiting` (in queue order) with at
    most `check` cached tokens (`cached[i]`, of request i's whole prompt) that share at least the
    deprioritize threshold's tokens of their whole prompt (output so far included) with an earlier
    checked request that was not deprioritized itself. `head(r)` is `prompt_head` of r's whole
    prompt at that threshold (the engine's queue keeps it per request, so a round does not slice
    and copy every checked prompt again).

    SGLang matches each against a radix tree of those earlier prompts (page size 1); sharing at
    least the threshold's tokens with one of them means having the same first tokens, so a set of
    those heads answers the same in O(1) per request."""
    out: set[int] = set()
    heads: set[bytes] = set()
    # Most requests are not checked: pick the others first, then visit only those.
    for i in [i for i, c in enumerate(cached) if c <= check]:
        r = waiting[i]
        h = head(r)
        if h is None:
            continue  # too short to share enough with anything (its prompt cannot hold others back)
        if h in heads:
            out.add(r.id)
        else:
            heads.add(h)
    return out


def behind(order: Sequence[Request], waiting: Sequence[Request], held: set[int]) -> list[Request]:
    """`order` with the requests of `held` moved to its end, in their `waiting` (queue) order, as
    SGLang's stable sort with key +inf for them leaves them."""
    if not held:
        return list(order)
    return [r for r in order if r.id not in held] + [r for r in waiting if r.id in held]

"""In-batch prefix sharing: SGLang's rule against computing one uncached prefix twice in a batch.

The cache learns a prompt only when its prefill ends, so two requests of one prefill batch that
share an uncached prefix would each compute it. SGLang 0.5.23 (`SchedulePolicy._compute_prefix_matches`,
`IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD` and `IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD`, 32
each) walks its waiting list in order; a request whose cached match (of its whole prompt, output so
far included) is at most the check threshold is matched against a tree of the earlier such requests'
whole prompts: sharing at least the deprioritize threshold with them puts it in a
`temporary_deprioritized` set, else its prompt joins the tree. Deprioritized requests are not made
to wait: the policy sorts them behind every other request (`_sort_by_longest_prefix` gives them the
key +inf, so they keep their list order among themselves), and a batch with room left still takes
them.

Only the policies that sort by the set use it: in SGLang, `lpm` (and `hrrn`, not modelled) while it
is cache-aware, i.e. not above its FCFS cut; `dfs-weight` computes the set and ignores it, and
`fcfs` never computes it. Here the engine moves the set to the end of the policy's order
(`ServingEngine._admit_from_queue`) where the policy declares it
(`AdmissionPolicy.in_batch_deprioritizes`): `lpm` (not above its FCFS cut), as in SGLang, and
of the policies SGLang does not have the cache-aware ones, k-LPM and the radix auction (without it
the radix auction on the shared-prefix benchmark at 40k KV tokens keeps 0.52 of its prompts cached
instead of 0.70; README, "The simulated engine"). `fcfs` and `dfs_weight` never apply it, as in
SGLang, nor does strict priority, whose order is blind to the cache like SGLang's `fcfs` with
priorities (the rule would make it cache-aware: its hit rate there would go from 0.23 to 0.67). The
radix auction has it under either cost model: its order follows the queue's prefix tree even where
its cost ignores the cache.
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

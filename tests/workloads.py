"""Small workloads that more than one test file drives engines with."""

from __future__ import annotations

import numpy as np

from auction_gym import Request


def branching_workload(seed: int, n: int = 150) -> list[Request]:
    """Prompts that branch off five random heads at random depths, arriving 3 ms apart."""
    rng = np.random.default_rng(seed)
    heads = [rng.integers(0, 50, 40) for _ in range(5)]
    reqs = []
    for i in range(n):
        h = heads[int(rng.integers(5))][: int(rng.integers(5, 40))]
        reqs.append(Request(i, 0, np.concatenate([h, rng.integers(0, 50, int(rng.integers(1, 30)))]),
                            1.0, output_len=int(rng.integers(1, 20)), arrival=float(i) * 0.003))
    return reqs


def churn_queue(rng: np.random.Generator, queue: list[Request], lens: list[int], arrive) -> None:
    """One round of a waiting queue's churn, in place: up to 3 arrivals (`arrive()` makes each
    request), up to 2 admissions at random places, and about a fifth of the cached prefix lengths
    `lens` (one per queued request) drawn anew, as a cache that grows and shrinks moves them."""
    for _ in range(rng.integers(0, 4)):
        queue.append(arrive())
        lens.append(0)
    for _ in range(min(len(queue), rng.integers(0, 3))):
        k = int(rng.integers(len(queue)))
        del queue[k], lens[k]
    for k in range(len(queue)):
        if rng.random() < 0.2:
            lens[k] = int(rng.integers(0, len(queue[k].tokens) + 1))

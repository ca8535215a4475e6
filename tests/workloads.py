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

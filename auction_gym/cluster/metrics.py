"""What a cluster run measures beyond one engine's metrics: how evenly the replicas were loaded."""

from __future__ import annotations

import math

from .engine import ClusterEngine


def load_imbalance(cluster: ClusterEngine) -> float:
    """max / mean over replicas of the time-averaged number of running requests, from the
    records: replica k's running request-seconds are the sum of (finish - admit) over the
    requests it served (a retracted request's wait before it resumes counts as running). 1.0 is
    perfectly even; N means one replica did all the work. NaN when nothing finished."""
    busy = [0.0] * len(cluster.replicas)
    for rid, k in cluster.assignment.items():
        rec = cluster.records[rid]
        if rec.finished:
            busy[k] += rec.finish - rec.admit
    mean = sum(busy) / len(busy)
    return max(busy) / mean if mean > 0 else math.nan

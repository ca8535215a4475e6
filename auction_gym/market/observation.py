"""A bidder's observation: normalized budget, time, spend and queue features.

| index | name                 | meaning                                                        | scale / range     |
|-------|----------------------|----------------------------------------------------------------|-------------------|
| 0     | budget_left          | remaining budget / budget                                      | [0, 1]            |
| 1     | time_left            | rounds left / horizon                                          | [0, 1]            |
| 2     | spend_vs_target      | (spent / rounds so far) / rho, rho = budget / horizon          | [0, 4], clipped   |
| 3     | last_spend_log       | log1p(spend in the last round / rho) (OGD's gradient signal)   | [0, log1p(T)]     |
| 4     | own_queued           | own waiting requests / 16                                      | [0, 4], clipped   |
| 5     | own_urgency          | log1p(mean urgency of own waiting requests, money/s) / log1p(10) | [0, 2], clipped |
| 6     | total_queue          | all waiting requests / 64                                      | [0, 4], clipped   |
| 7     | clearing_price       | recent mean payment per admitted request / rho                 | [0, 10], clipped  |
| 8     | own_latency          | recent latency of own finished requests / 10 s                 | [0, 10], clipped  |
| 9     | own_ttft             | recent time to first token of own finished requests / 1 s      | [0, 10], clipped  |
| 10    | cache_hit_rate       | recent cached / prompt tokens of admitted requests             | [0, 1]            |
| 11    | prev_multiplier      | multiplier played last round / alpha_max (1 / alpha_max at reset) | [0, 1]         |

Payments are lumpy (a bidder pays only in rounds that admit its requests, sometimes hundreds of
times rho), so the last round's spend enters through log1p: never clipped (a charge is at most the
budget, T x rho), about unit range, and exactly invertible (OGD reads it back with expm1).
"Recent" is an exponential moving average over rounds with weight `EMA` on the newest round,
updated only in rounds that produce the quantity (a round that finishes none of the bidder's
requests leaves its latency as it was). Before the first such round the average is 0.
"""

from __future__ import annotations

import numpy as np

EMA = 0.1
QUEUE_SCALE = 16.0
TOTAL_QUEUE_SCALE = 64.0
LATENCY_SCALE = 10.0
TTFT_SCALE = 1.0
URGENCY_LOG_SCALE = float(np.log1p(10.0))


class Obs:
    """Indices of the observation vector (see the module table)."""

    BUDGET_LEFT = 0
    TIME_LEFT = 1
    SPEND_VS_TARGET = 2
    LAST_SPEND_LOG = 3
    OWN_QUEUED = 4
    OWN_URGENCY = 5
    TOTAL_QUEUE = 6
    CLEARING_PRICE = 7
    OWN_LATENCY = 8
    OWN_TTFT = 9
    CACHE_HIT_RATE = 10
    PREV_MULTIPLIER = 11
    SIZE = 12
    NAMES = (
        "budget_left", "time_left", "spend_vs_target", "last_spend_log", "own_queued",
        "own_urgency", "total_queue", "clearing_price", "own_latency", "own_ttft", "cache_hit_rate",
        "prev_multiplier",
    )
    LOW = np.zeros(SIZE, dtype=np.float32)

    @staticmethod
    def high(horizon: int) -> np.ndarray:
        """Upper bounds of the features for an episode of `horizon` rounds."""
        high = np.array([1, 1, 4, 0, 4, 2, 4, 10, 10, 10, 1, 1], dtype=np.float32)
        high[Obs.LAST_SPEND_LOG] = np.log1p(horizon)
        return high


def ema(old: float, new: float) -> float:
    return old + EMA * (new - old)

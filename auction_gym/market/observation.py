"""A bidder's observation: normalized budget, time, spend and queue features.

| index | name                 | meaning                                                        | scale / range     |
|-------|----------------------|----------------------------------------------------------------|-------------------|
| 0     | budget_left          | remaining budget / budget                                      | [0, 1]            |
| 1     | time_left            | rounds left / horizon                                          | [0, 1]            |
| 2     | spend_vs_target      | (spent / rounds so far) / rho, rho = budget / horizon          | [0, 4], clipped   |
| 3     | last_spend_log       | log1p(spend in the last round / rho) (OGD's gradient signal)   | [0, log1p(T)]     |
| 4     | own_queued           | log1p(own waiting requests / 16)                               | [0, log1p(2^16)]  |
| 5     | own_urgency          | log1p(mean urgency of own waiting requests, money/s) / log1p(10) | [0, 2], clipped |
| 6     | total_queue          | log1p(all waiting requests / 64)                               | [0, log1p(2^14)]  |
| 7     | clearing_price       | recent mean payment per admitted request / rho                 | [0, 10], clipped  |
| 8     | own_latency          | log1p(recent latency of own finished requests / 10 s)          | [0, log1p(1000)], clipped |
| 9     | own_ttft             | log1p(recent time to first token of own finished requests / 1 s) | [0, log1p(1000)], clipped |
| 10    | cache_hit_rate       | recent cached / prompt tokens of admitted requests             | [0, 1]            |
| 11    | prev_multiplier      | multiplier played last round / alpha_max (1 / alpha_max at reset) | [0, 1]         |

Payments are lumpy (a bidder pays only in rounds that admit its requests, sometimes hundreds of
times rho), so the last round's spend enters through log1p: never clipped (a charge is at most the
budget, T x rho), about unit range, and exactly invertible (OGD reads it back with expm1).
The queue lengths enter through log1p too: in the default scenario the load is above the engine's
capacity, so over a long episode the queue grows without bound (about 500 waiting by round 2,000,
7,000 by round 20,000); a linear feature saturates, a log one keeps telling 500 from 5,000. For
short queues log1p(n / scale) is about n / scale (the linear feature it replaced). The bounds are
log1p(QUEUE_MAX / scale), QUEUE_MAX = 2^20 waiting requests, which no episode reaches in practice.
Latency and TTFT grow with the queue, so they are log-scaled for the same reason (linear, they
clipped at 100 s and 10 s by round 2,000-9,000 of a long default episode); they clip at 1,000 times
their scale.
"Recent" is an exponential moving average over rounds with weight `EMA` on the newest round,
updated only in rounds that produce the quantity (a round that finishes none of the bidder's
requests leaves its latency as it was). Before the first such round the average is 0.
"""

from __future__ import annotations

import numpy as np

EMA = 0.1
QUEUE_SCALE = 16.0
"""Own waiting requests at which own_queued = log(2)."""
TOTAL_QUEUE_SCALE = 64.0
"""All waiting requests at which total_queue = log(2)."""
QUEUE_MAX = 2.0**20
"""Waiting requests beyond which the queue features clip (150x a 20,000-round default episode's)."""
LATENCY_SCALE = 10.0
"""Latency (s) at which own_latency = log(2)."""
TTFT_SCALE = 1.0
"""Time to first token (s) at which own_ttft = log(2)."""
DELAY_MAX_SCALES = 1000.0
"""own_latency and own_ttft clip at log1p(this): 10,000 s and 1,000 s."""
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
        high = np.array([1, 1, 4, 0, 0, 2, 0, 10, 0, 0, 1, 1], dtype=np.float32)
        high[Obs.LAST_SPEND_LOG] = np.log1p(horizon)
        high[Obs.OWN_LATENCY] = high[Obs.OWN_TTFT] = np.log1p(DELAY_MAX_SCALES)
        high[Obs.OWN_QUEUED] = np.log1p(QUEUE_MAX / QUEUE_SCALE)
        high[Obs.TOTAL_QUEUE] = np.log1p(QUEUE_MAX / TOTAL_QUEUE_SCALE)
        return high


def ema(old: float, new: float) -> float:
    """The moving average `old` updated with the newest value `new` (weight EMA)."""
    return old + EMA * (new - old)

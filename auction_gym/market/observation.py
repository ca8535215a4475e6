"""A bidder's observation: normalized budget, time, spend and queue features.

`FEATURES` is the one definition of the observation: its order is the vector's, and each entry
names a feature, says what it measures and bounds it. `Obs` (indices, names, bounds) and the tables
in this docstring, in `RadixAuctionEnv`'s and in the README come from it (`feature_table`; a test
checks the README's). Every feature is >= 0 and `Market.observations` clips it to its bound.

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

import math
from dataclasses import dataclass
from typing import Callable

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
URGENCY_SCALE = 10.0
"""Mean urgency (money/s) at which own_urgency = 1."""
URGENCY_LOG_SCALE = float(np.log1p(URGENCY_SCALE))
"""own_urgency's divisor, log1p(URGENCY_SCALE)."""


@dataclass(frozen=True)
class Feature:
    """One entry of the observation vector."""

    name: str
    """Its name (`Obs.NAMES`); `Obs.<NAME>` (upper case) is its index."""
    meaning: str
    """What it measures, as the formula `Market.observations` computes."""
    high: float | Callable[[int], float]
    """Its upper bound, or the bound as a function of the horizon (rounds); the lower bound is 0."""
    high_text: str = ""
    """How tables write a bound that depends on the horizon."""

    def bound(self, horizon: int) -> float:
        """The upper bound in an episode of `horizon` rounds."""
        return self.high(horizon) if callable(self.high) else self.high

    def range_text(self) -> str:
        """The range as the tables show it, e.g. "[0, 1]", "[0, 11.09]", "[0, log1p(horizon)]"."""
        high = self.high
        text = self.high_text or (f"{high:g}" if float(high).is_integer() else f"{high:.2f}")
        return f"[0, {text}]"


FEATURES: tuple[Feature, ...] = (
    Feature("budget_left", "remaining budget / budget", 1.0),
    Feature("time_left", "rounds left / T (T: horizon, or budget_rounds when set)", 1.0),
    Feature("spend_vs_target", "(spent / rounds so far) / rho, rho = budget / T", 4.0),
    Feature("last_spend_log", "log1p(spend in the last round / rho) (OGD's gradient signal)",
            math.log1p, "log1p(horizon)"),
    Feature("own_queued", f"log1p(own waiting requests / {QUEUE_SCALE:g})", math.log1p(QUEUE_MAX / QUEUE_SCALE)),
    Feature("own_urgency", f"log1p(mean urgency of own waiting requests, money/s) / log1p({URGENCY_SCALE:g})",
            2.0),
    Feature("total_queue", f"log1p(all waiting requests / {TOTAL_QUEUE_SCALE:g})",
            math.log1p(QUEUE_MAX / TOTAL_QUEUE_SCALE)),
    Feature("clearing_price", "recent mean payment per admitted request / rho", 10.0),
    Feature("own_latency", f"log1p(recent latency of own finished requests / {LATENCY_SCALE:g} s)",
            math.log1p(DELAY_MAX_SCALES)),
    Feature("own_ttft", f"log1p(recent time to first token of own finished requests / {TTFT_SCALE:g} s)",
            math.log1p(DELAY_MAX_SCALES)),
    Feature("cache_hit_rate", "recent cached / prompt tokens of admitted requests", 1.0),
    Feature("prev_multiplier", "multiplier played last round / alpha_max (1 / alpha_max at reset)", 1.0),
)


class Obs:
    """Indices, names and bounds of the observation vector, all from `FEATURES`.

    `Obs.BUDGET_LEFT` ... `Obs.PREV_MULTIPLIER`: the index of each feature (its name in upper case).
    """

    NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)
    SIZE = len(FEATURES)
    LOW = np.zeros(SIZE, dtype=np.float32)

    @staticmethod
    def high(horizon: int) -> np.ndarray:
        """Upper bounds of the features for an episode of `horizon` rounds (float32)."""
        return np.array([f.bound(horizon) for f in FEATURES], dtype=np.float32)


for _index, _feature in enumerate(FEATURES):
    setattr(Obs, _feature.name.upper(), _index)
del _index, _feature


def feature_table() -> str:
    """The observation as a Markdown table (index, name, meaning, range), one line per feature."""
    rows = [("index", "name", "meaning", "range")]
    rows += [(str(i), f.name, f.meaning, f.range_text()) for i, f in enumerate(FEATURES)]
    widths = [max(len(row[c]) for row in rows) for c in range(4)]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def ema(old: float, new: float) -> float:
    """The moving average `old` updated with the newest value `new` (weight EMA)."""
    return old + EMA * (new - old)


if __doc__ is not None:  # None under python -OO
    __doc__ += "\n" + feature_table() + "\n"

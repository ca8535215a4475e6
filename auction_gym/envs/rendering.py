"""The `rgb_array` frames of both envs: bars drawn with numpy alone (no plotting library at run
time), so rendering costs microseconds and works in any worker process."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..market import Obs
from ..market.observation import TOTAL_QUEUE_SCALE

RENDER_HEIGHT = 64
"""Height of an `rgb_array` frame (pixels)."""
BAR_WIDTH, BAR_GAP = 12, 4
"""Width of a bar and of the gap before each (pixels): a frame with k bars is 4 + 16 k wide."""
QUEUE_BAR_FULL = 4096
"""Waiting requests at which the queue bar is full; it is on a log scale (the total_queue feature's)."""
TRACK, BUDGET, FOCAL_BUDGET = (48, 48, 48), (60, 180, 75), (240, 200, 40)
QUEUE, MULTIPLIER = (220, 60, 50), (70, 130, 230)
"""RGB colours: a bar's empty track (grey), budget left (green; the focal bidder's yellow), queue
(red), multiplier (blue)."""


def bar_frame(bars: Sequence[tuple[float, tuple[int, int, int]]]) -> np.ndarray:
    """An RGB frame, uint8 of shape (RENDER_HEIGHT, BAR_GAP + len(bars) x (BAR_WIDTH + BAR_GAP), 3):
    on black, one vertical bar per (fraction, colour), filled from the bottom to the fraction
    (clipped to [0, 1]) of the height over a grey track, left to right."""
    frame = np.zeros((RENDER_HEIGHT, BAR_GAP + len(bars) * (BAR_WIDTH + BAR_GAP), 3), dtype=np.uint8)
    for k, (fraction, colour) in enumerate(bars):
        left = BAR_GAP + k * (BAR_WIDTH + BAR_GAP)
        filled = round(min(max(fraction, 0.0), 1.0) * RENDER_HEIGHT)
        frame[:, left:left + BAR_WIDTH] = TRACK
        frame[RENDER_HEIGHT - filled:, left:left + BAR_WIDTH] = colour
    return frame


def market_frame(obs: np.ndarray, focal: int | None = None) -> np.ndarray:
    """The `rgb_array` frame of a market from its observations (num_bidders x Obs.SIZE): a bar per
    bidder for the budget left (the focal bidder's in yellow), the queue (red), then the multiplier
    played last round / alpha_max (blue) of the focal bidder, or of every bidder when focal is None."""
    queue = float(obs[0, Obs.TOTAL_QUEUE]) / math.log1p(QUEUE_BAR_FULL / TOTAL_QUEUE_SCALE)
    budgets = [(float(row[Obs.BUDGET_LEFT]), FOCAL_BUDGET if i == focal else BUDGET) for i, row in enumerate(obs)]
    shown = range(len(obs)) if focal is None else [focal]
    return bar_frame(budgets + [(queue, QUEUE)] + [(float(obs[i, Obs.PREV_MULTIPLIER]), MULTIPLIER) for i in shown])

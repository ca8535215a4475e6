"""Confidence intervals for the tables of evaluations and experiments (numpy only, light to import)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

# Two-sided 95% quantiles of Student's t with 1..30 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of its 95% confidence interval (Student's t; 0 for a single value).

    NaNs are left out; with no value left both are NaN."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return math.nan, math.nan
    if len(x) < 2:
        return float(x.mean()), 0.0
    t = _T95[len(x) - 2] if len(x) - 1 <= len(_T95) else 1.96
    return float(x.mean()), float(t * x.std(ddof=1) / math.sqrt(len(x)))


def format_ci(mean: float, half_width: float) -> str:
    """`mean ± half-width` as the README prints it: the mean to 4 significant digits, the
    half-width to 2, both in positional notation (3182 ± 130, 0.2054 ± 0.078); "nan" for NaN."""
    return f"{_plain(mean, 4)} ± {_plain(half_width, 2)}"


def _plain(x: float, digits: int) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    return np.format_float_positional(x, precision=digits, unique=False, fractional=False, trim="-")

"""Confidence intervals for the tables of evaluations and experiments (numpy only, light to import)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

# Two-sided 95% quantiles of Student's t with 1..30 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)
_RESOLUTION = 1e-12
"""Relative size under which a mean or half-width is rounding error of the values (float64 keeps
about 16 digits; summing n values loses up to log10(n) of them)."""


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of its 95% confidence interval (Student's t).

    A single value has no interval: its half-width is NaN (`format_ci` then prints the mean alone).
    NaNs are left out; with no value left both are NaN. A mean or half-width below the float
    resolution of the values themselves (1e-12 of the largest magnitude: what summing them in
    another order can leave) is 0, so identical or cancelling values print 0, not float noise.
    ValueError for values of more than one dimension (seeds x episodes, say), which would be pooled
    into one sample as if independent: pass one number per unit, e.g. each row's mean."""
    x = np.asarray(values, dtype=float)
    if x.ndim > 1:
        raise ValueError(f"values must be one number per sample (1-D), got shape {x.shape}")
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan
    t = _T95[len(x) - 2] if len(x) - 1 <= len(_T95) else 1.96
    half = float(t * x.std(ddof=1) / math.sqrt(len(x)))
    resolution = _RESOLUTION * float(np.abs(x).max())
    return (0.0 if abs(mean) < resolution else mean), (0.0 if half < resolution else half)


def format_ci(mean: float, half_width: float) -> str:
    """`mean ± half-width` as the tables print it: the mean to 4 significant digits, the
    half-width to 2, both in positional notation (3182 ± 130, 0.2054 ± 0.078); the mean alone when
    the half-width is NaN (a single value, `mean_ci`); "nan" for a NaN mean."""
    if math.isnan(half_width):
        return _plain(mean, 4)
    return f"{_plain(mean, 4)} ± {_plain(half_width, 2)}"


def summary_lines(results: Sequence[dict[str, float]], metrics: Sequence[str]) -> list[str]:
    """One line per metric: its name and `format_ci` of its mean over `results` (episodes), with
    "(95% CI)" when there is an interval, i.e. more than one episode."""
    suffix = " (95% CI)" if len(results) > 1 else ""
    return [f"  {m:18s} {format_ci(*mean_ci([r[m] for r in results]))}{suffix}" for m in metrics]


def _plain(x: float, digits: int) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    return np.format_float_positional(x, precision=digits, unique=False, fractional=False, trim="-")

"""The environments' action: its two types, and the one map between a normalized action and the
bid multiplier.

`action_type="normalized"` (the default): `Box(-1, 1, (1,), float32)`, mapped piecewise linearly to
the multiplier alpha, exact at the ends and at truthful bidding:

    alpha = 1 + a                    for -1 <= a <= 0   (a = -1: alpha = 0, bid nothing; a = 0: truthful)
    alpha = 1 + a (alpha_max - 1)    for  0 <  a <= 1   (a = +1: alpha = alpha_max)

It is continuous and increasing (alpha_max must be > 1), and a = 0, the mean of a fresh Gaussian
policy (PPO, A2C) and the centre of a tanh-squashed one (SAC, TD3), is truthful. Two slopes rather
than one, alpha = (a + 1) alpha_max / 2, because that puts truthful at a = 0 only for
alpha_max = 2.

`action_type="log"`: `Box(-1, 1, (1,), float32)` on a log scale, exact at the ends and at truthful:

    alpha = LOG_ALPHA_MIN ** (-a)    for -1 <= a <= 0   (a = -1: alpha = 0.001; a = 0: truthful)
    alpha = alpha_max ** a           for  0 <  a <= 1   (a = +1: alpha = alpha_max)

Equal steps of a are equal ratios of alpha, so the multipliers a budget pushes a bidder to (0.01 to
0.5 in the calibrated pacing scenario) take half the box instead of a sliver next to a = -1, and a
fresh Gaussian policy explores them. It cannot bid exactly 0: a multiplier below LOG_ALPHA_MIN
plays LOG_ALPHA_MIN.

`action_type="multiplier"`: `Box(0, alpha_max, (1,), float32)`, the multiplier itself (v0 before
issue 14).

Out-of-range actions are clipped to the box; NaN or inf raise ValueError.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

ACTION_TYPES = ("normalized", "log", "multiplier")
"""The action types, in the order docs list them (`_MAPS` has each one's maps)."""
DEFAULT_ACTION_TYPE = "normalized"
LOG_ALPHA_MIN = 1e-3
"""The smallest multiplier of the "log" action type (a = -1)."""
_LOG_SPAN = math.log(1.0 / LOG_ALPHA_MIN)


def clip(x: float, low: float, high: float) -> float:
    """`x` clipped to [low, high] (low <= high): min(max(x, low), high), NaN passing through as
    there, written out because the builtins' calls cost about four times the comparisons, and the
    environments clip a few multipliers, and the pacers their lambdas, every step."""
    return low if low > x else high if high < x else x


def to_multiplier(a: float, alpha_max: float) -> float:
    """The bid multiplier alpha of a normalized action `a` (clipped to [-1, 1] first)."""
    a = clip(a, -1.0, 1.0)
    return 1.0 + a if a <= 0.0 else 1.0 + a * (alpha_max - 1.0)


def to_action(alpha: float, alpha_max: float) -> float:
    """The normalized action of a bid multiplier `alpha` (clipped to [0, alpha_max] first), the
    inverse of `to_multiplier`. For alpha <= 1 (every built-in policy's but a fixed one above 1)
    `to_multiplier(to_action(alpha))` is exactly alpha when alpha is a float32 (the built-ins' dtype)
    computed in float64: alpha - 1 then needs no more than float64's bits."""
    alpha = clip(alpha, 0.0, alpha_max)
    return alpha - 1.0 if alpha <= 1.0 else (alpha - 1.0) / (alpha_max - 1.0)


def log_to_multiplier(a: float, alpha_max: float) -> float:
    """The bid multiplier of a "log" action `a` (clipped to [-1, 1] first)."""
    a = clip(a, -1.0, 1.0)
    return math.exp(a * _LOG_SPAN) if a <= 0.0 else alpha_max ** a


def log_to_action(alpha: float, alpha_max: float) -> float:
    """The "log" action of a bid multiplier `alpha` (clipped to [LOG_ALPHA_MIN, alpha_max] first),
    the inverse of `log_to_multiplier` up to rounding."""
    alpha = clip(alpha, LOG_ALPHA_MIN, alpha_max)
    return math.log(alpha) / _LOG_SPAN if alpha <= 1.0 else math.log(alpha) / math.log(alpha_max)


def clip_multiplier(alpha: float, alpha_max: float) -> float:
    """A bid multiplier clipped to [0, alpha_max]."""
    return clip(alpha, 0.0, alpha_max)


_MAPS = {"normalized": (to_multiplier, to_action), "log": (log_to_multiplier, log_to_action),
         "multiplier": (clip_multiplier, clip_multiplier)}
"""Each action type's (action -> multiplier, multiplier -> action) pair; keys are ACTION_TYPES."""


def multiplier_of(a: float, action_type: str, alpha_max: float) -> float:
    """The bid multiplier of action `a` of `action_type` (clipped to its box)."""
    return _MAPS[action_type][0](a, alpha_max)


def action_of(alpha: float, action_type: str, alpha_max: float) -> float:
    """The action of `action_type` that plays multiplier `alpha` (the inverse of `multiplier_of`)."""
    return _MAPS[action_type][1](alpha, alpha_max)


def check_action_type(action_type: str, alpha_max: float) -> None:
    """ValueError unless `action_type` is one of ACTION_TYPES and, when normalized, alpha_max > 1
    (so that a > 0 bids above truthful); the same for "log"."""
    if action_type not in ACTION_TYPES:
        raise ValueError(f"action_type must be one of {list(ACTION_TYPES)}, got {action_type!r}")
    if action_type != "multiplier" and not alpha_max > 1.0:
        raise ValueError(f"alpha_max must be > 1 with action_type={action_type!r} (a = +1 bids alpha_max, "
                         f"a = 0 truthful), got {alpha_max!r}; use action_type='multiplier' for alpha_max <= 1")


def action_box(action_type: str, alpha_max: float) -> spaces.Box:
    """The action space of `action_type` (see the module docstring)."""
    if action_type in ("normalized", "log"):
        return spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    return spaces.Box(0.0, float(alpha_max), shape=(1,), dtype=np.float32)


def parse_action(action: Any, action_type: str, alpha_max: float, what: str = "action") -> float:
    """The bid multiplier of an action of `action_type`: one finite number, clipped to its box."""
    if isinstance(action, np.ndarray) and action.size == 1:
        a = float(action.item())
    elif np.size(action) != 1:
        raise ValueError(f"{what} must hold one number, got shape {np.shape(action)}")
    else:
        a = float(action[0] if np.ndim(action) else action)
    if not math.isfinite(a):
        raise ValueError(f"{what} must be finite, got {a}")
    return multiplier_of(a, action_type, alpha_max)

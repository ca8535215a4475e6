"""The environments' action: its types, and the maps between an action and the bid multiplier.

Five types (`ACTION_MEANINGS` states each map): "normalized" and "log" put truthful bidding at
a = 0, the centre of a fresh policy; "multiplier" is alpha itself; "delta" and "residual" change
the multiplier played last or a built-in pacer's. `ActionMap` gives every type one interface,
`multiplier(a, obs, prev_alpha)` and its inverse `action(alpha, obs, prev_alpha)`, so an env has
one code path. Why each map is as it is: docs/environment.md, "Action types".
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces

ACTION_TYPES = ("normalized", "log", "multiplier", "delta", "residual")
"""The action types, in the order docs list them (`action_map` builds each one's map)."""
DEFAULT_ACTION_TYPE = "normalized"
ACTION_MEANINGS = {
    "normalized": "alpha = 1 + a for a <= 0, 1 + a (alpha_max - 1) for a > 0: a = -1 bids nothing, 0 truthful, "
                  "+1 alpha_max",
    "log": "alpha = 0.001^(-a) for a <= 0, alpha_max^a for a > 0: equal steps are equal ratios, a = 0 truthful",
    "multiplier": "alpha = a",
    "delta": "alpha = alpha_prev x exp(delta_bound x a), clipped to [0.001, alpha_max]: a = 0 holds the multiplier "
             "played last",
    "residual": "alpha = base(obs) x exp(residual_scale x a), clipped to [0.001, alpha_max]: a = 0 plays the base "
                "pacer (residual_base)",
}
"""Each action type's map from its action a to the bid multiplier alpha, in words: what
`ActionMap.meaning` says, and the environment reference's table of action types."""
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
"""Each stateless action type's (action -> multiplier, multiplier -> action) pair."""


def multiplier_of(a: float, action_type: str, alpha_max: float) -> float:
    """The bid multiplier of action `a` of a stateless `action_type` (clipped to its box)."""
    return _MAPS[action_type][0](a, alpha_max)


class BasePacer(Protocol):
    """What "residual" needs of its base: a built-in policy's multipliers of observation rows
    (`auction_gym.pacing.MultiplierPolicy.multipliers`)."""

    def multipliers(self, rows: list[list[float]]) -> list[float]: ...


class ActionMap:
    """One action type's map between an action a (one float, in `space`) and the multiplier
    alpha, and its inverse, given the bidder's current observation `obs` (one row, as floats) and
    the multiplier `prev_alpha` it played last round; a stateless type ignores both."""

    def __init__(self, action_type: str, alpha_max: float) -> None:
        self.action_type, self.alpha_max = action_type, float(alpha_max)
        self.space = action_box(action_type, alpha_max)

    def reset(self, alpha: float) -> float:
        """The `prev_alpha` of an episode's first step, given the market's multiplier at reset."""
        return alpha

    def multiplier(self, a: float, obs: list[float], prev_alpha: float) -> float:
        """The multiplier that action `a` plays (a clipped to the box first)."""
        return _MAPS[self.action_type][0](a, self.alpha_max)

    def action(self, alpha: float, obs: list[float], prev_alpha: float) -> float:
        """The action that plays multiplier `alpha`, up to rounding and the box's clip."""
        return _MAPS[self.action_type][1](alpha, self.alpha_max)

    @property
    def meaning(self) -> str:
        """What an action means, in one line: its type, its box and its map to the multiplier
        alpha (ACTION_MEANINGS) with this map's parameters."""
        box = f"[{float(self.space.low[0]):g}, {float(self.space.high[0]):g}]"
        params = ", ".join(f"{k} = {v:g}" for k, v in self.parameters().items())
        return (f"action_type {self.action_type!r}: one number a in {box} sets the bidder's bid multiplier "
                f"alpha for the next round; {ACTION_MEANINGS[self.action_type]} ({params})")

    def parameters(self) -> dict[str, float]:
        """The map's numeric parameters by argument name."""
        return {"alpha_max": self.alpha_max}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.action_type!r}, alpha_max={self.alpha_max})"


class DeltaMap(ActionMap):
    """"delta": alpha = clip(prev_alpha * exp(delta_bound * a), LOG_ALPHA_MIN, alpha_max), with
    prev_alpha = `delta_start` before the first round."""

    def __init__(self, alpha_max: float, delta_bound: float, delta_start: float) -> None:
        super().__init__("delta", alpha_max)
        self.delta_bound, self.delta_start = float(delta_bound), float(delta_start)

    def reset(self, alpha: float) -> float:
        return self.delta_start

    def parameters(self) -> dict[str, float]:
        return {**super().parameters(), "delta_bound": self.delta_bound, "delta_start": self.delta_start}

    def multiplier(self, a: float, obs: list[float], prev_alpha: float) -> float:
        return clip(prev_alpha * math.exp(self.delta_bound * clip(a, -1.0, 1.0)), LOG_ALPHA_MIN, self.alpha_max)

    def action(self, alpha: float, obs: list[float], prev_alpha: float) -> float:
        """The change to `alpha` in units of delta_bound; a change beyond it clips to +-1."""
        alpha = clip(alpha, LOG_ALPHA_MIN, self.alpha_max)
        return clip(math.log(alpha / prev_alpha) / self.delta_bound, -1.0, 1.0)


class ResidualMap(ActionMap):
    """"residual": alpha = clip(base(obs) * exp(residual_scale * a), LOG_ALPHA_MIN, alpha_max),
    base(obs) the base pacer's multiplier on the observation."""

    def __init__(self, alpha_max: float, base: BasePacer, residual_scale: float) -> None:
        super().__init__("residual", alpha_max)
        self.base, self.residual_scale = base, float(residual_scale)

    def parameters(self) -> dict[str, float]:
        return {**super().parameters(), "residual_scale": self.residual_scale}

    def multiplier(self, a: float, obs: list[float], prev_alpha: float) -> float:
        base = self.base.multipliers([obs])[0]
        return clip(base * math.exp(self.residual_scale * clip(a, -1.0, 1.0)), LOG_ALPHA_MIN, self.alpha_max)

    def action(self, alpha: float, obs: list[float], prev_alpha: float) -> float:
        """The correction of the base's multiplier to `alpha`; one beyond exp(+-residual_scale)
        clips to +-1, and so does any alpha when the base plays 0."""
        base = self.base.multipliers([obs])[0]
        alpha = clip(alpha, LOG_ALPHA_MIN, self.alpha_max)
        if base <= 0.0:
            return 1.0
        return clip(math.log(alpha / base) / self.residual_scale, -1.0, 1.0)


def action_map(action_type: str, alpha_max: float, delta_bound: float = 0.3, delta_start: float = 1.0,
               residual_base: BasePacer | None = None, residual_scale: float = 1.0) -> ActionMap:
    """The ActionMap of `action_type`; ValueError for a bad type or parameter (delta_bound and
    residual_scale checked whatever the type; delta_start, whose range is alpha_max's, under
    "delta")."""
    check_action_type(action_type, alpha_max)
    for name, value in (("delta_bound", delta_bound), ("residual_scale", residual_scale)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    if action_type == "delta" and not LOG_ALPHA_MIN <= delta_start <= alpha_max:
        raise ValueError(f"delta_start must be in [LOG_ALPHA_MIN, alpha_max] = [{LOG_ALPHA_MIN}, {alpha_max}], "
                         f"got {delta_start!r}")
    if action_type == "delta":
        return DeltaMap(alpha_max, delta_bound, delta_start)
    if action_type == "residual":
        if residual_base is None:
            raise ValueError("action_type='residual' needs a residual_base pacer")
        return ResidualMap(alpha_max, residual_base, residual_scale)
    return ActionMap(action_type, alpha_max)


def check_action_type(action_type: str, alpha_max: float) -> None:
    """ValueError unless `action_type` is one of ACTION_TYPES and, for every type but "multiplier",
    alpha_max > 1 (so that a > 0 can bid above truthful)."""
    if action_type not in ACTION_TYPES:
        raise ValueError(f"action_type must be one of {list(ACTION_TYPES)}, got {action_type!r}")
    if action_type != "multiplier" and not alpha_max > 1.0:
        raise ValueError(f"alpha_max must be > 1 with action_type={action_type!r} (a = +1 bids alpha_max, "
                         f"a = 0 truthful), got {alpha_max!r}; use action_type='multiplier' for alpha_max <= 1")


def action_box(action_type: str, alpha_max: float) -> spaces.Box:
    """The action space of `action_type` (`ACTION_MEANINGS` says what an action means)."""
    if action_type != "multiplier":
        return spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    return spaces.Box(0.0, float(alpha_max), shape=(1,), dtype=np.float32)


def action_value(action: Any, what: str = "action") -> float:
    """The one finite number of an action (an array or sequence of one number, or a number)."""
    if isinstance(action, np.ndarray) and action.size == 1:
        a = float(action.item())
    elif np.size(action) != 1:
        raise ValueError(f"{what} must hold one number, got shape {np.shape(action)}")
    else:
        try:
            a = float(action[0] if np.ndim(action) else action)
        except (TypeError, ValueError):  # a nested list ([[0.5]]) read whole; None, a dict, ... named
            array = np.asarray(action)
            if array.dtype.kind not in "biuf":
                raise TypeError(f"{what} must be a number or an array of one number, got {action!r:.80}") from None
            a = float(array.item())
    if not math.isfinite(a):
        raise ValueError(f"{what} must be finite, got {a}")
    return a


def parse_action(action: Any, action_type: str, alpha_max: float, what: str = "action") -> float:
    """The bid multiplier of an action of a stateless `action_type`: one finite number, clipped to
    its box."""
    return multiplier_of(action_value(action, what), action_type, alpha_max)

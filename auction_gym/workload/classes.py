"""Urgency classes: how much a request is worth and how much its owner minds waiting.

Every workload labels a request with one of three classes (`Request.kind`) and draws its urgency w,
value V and output length from that class. All three are lognormal (heavy right tail, always
positive), parametrized by median and log-space sigma: X = median * exp(sigma * N(0, 1)).

V is drawn as V = w * H, where the "horizon" H (seconds) is the break-even latency: a request served
within H seconds has positive realized utility V - w * latency. So V exceeds the latency cost of a
normal wait, and V scales with w (an urgent call is worth more than a rollout).

| class       | urgency w (money/s) | horizon H = V/w (s) | value V (money)    | output_len (tokens) |
|-------------|---------------------|---------------------|--------------------|---------------------|
| urgent      | median 10, s 0.5    | median 3, s 0.5     | median 30, s 0.71  | median 32, s 0.6    |
| interactive | median 1, s 0.6     | median 10, s 0.6    | median 10, s 0.85  | median 128, s 0.8   |
| background  | median 0.02, s 0.8  | median 120, s 0.8   | median 2.4, s 1.13 | median 256, s 0.8   |

(s = sigma of the log; V's sigma is sqrt(s_w^2 + s_H^2). Means are median * exp(s^2 / 2): w means
11.3, 1.20, 0.028. Output lengths are rounded and clipped to [1, output_max]: 256, 2048, 4096.)

`output_max` is the class's clients' cap on output, the `Request.max_new_tokens` they send: a
request drawn from the class carries max_new_tokens = output_max (the agentic workload), and its
output, clipped to output_max, is what generation under that cap produces (it stops at the cap). At
the medians above the cap is 8x (urgent) and 16x the median output, 3.5 log-sigmas above it, so about
0.03% of outputs reach it; a server reserving by the cap reserves 8-16x the median output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np


@dataclass(frozen=True)
class RequestClass:
    """Distributions of one urgency class (see the module table for units)."""

    name: str
    urgency_median: float
    urgency_sigma: float
    horizon_median: float
    horizon_sigma: float
    output_median: float
    output_sigma: float
    output_max: int
    """The clients' cap on output (tokens): output lengths are clipped to it, and a request drawn
    from the class carries it as `max_new_tokens` (module docstring)."""

    def sample(
        self, rng: np.random.Generator, size: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw `size` requests' (urgency, value, output_len) arrays; float, float, int64."""
        return self.from_normals(rng.standard_normal((3, size)))

    def from_normals(
        self, z: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`sample`'s result from its standard normal draws `z`, shape (3, size): urgency from z[0],
        horizon from z[1], output length from z[2] (rounded, clipped to [1, output_max], int64)."""
        return _from_normals(self.urgency_median, self.urgency_sigma, self.horizon_median, self.horizon_sigma,
                             self.output_median, self.output_sigma, self.output_max, z)


_PARAMETERS = ("urgency_median", "urgency_sigma", "horizon_median", "horizon_sigma", "output_median",
               "output_sigma", "output_max")
"""The fields of RequestClass that its draws depend on, in `_from_normals`' order (`ClassMix`)."""


def _from_normals(urgency_median, urgency_sigma, horizon_median, horizon_sigma, output_median, output_sigma,
                  output_max, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`RequestClass.from_normals` of parameters that are scalars (one class) or arrays (one
    request's class each): the same arithmetic element by element, so the same floats either way."""
    w = urgency_median * np.exp(urgency_sigma * z[0])
    h = horizon_median * np.exp(horizon_sigma * z[1])
    out = np.rint(output_median * np.exp(output_sigma * z[2]))
    return w, w * h, np.minimum(np.maximum(out, 1), output_max).astype(np.int64)


class ClassMix:
    """Draws of requests of several classes at once: request i is of class `names[which[i]]`."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self._parameters = np.array([[getattr(CLASSES[n], p) for n in names] for p in _PARAMETERS])

    def from_normals(self, which: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each request's `RequestClass.from_normals` (its class's) from its column of `z`, in one pass."""
        return _from_normals(*self._parameters[:, which], z)


def class_laws(of: RequestClass | ClassMix) -> tuple[Callable[..., tuple], list[tuple[float, ...]] | None]:
    """`of.from_normals`, and the parameters of each class it draws in `_from_normals`' order (one
    class's, or each of a mix's names'), for a compiled twin to draw as `_from_normals` does; None
    where `of` draws otherwise (a subclass, or `from_normals` or `_from_normals` replaced), and the
    twin calls its `from_normals`."""
    if (RequestClass.from_normals, ClassMix.from_normals, _from_normals) != _PLAIN_DRAWS:
        return of.from_normals, None
    if type(of) is RequestClass:
        return of.from_normals, [tuple(getattr(of, p) for p in _PARAMETERS)]
    if type(of) is ClassMix:
        return of.from_normals, [tuple(law) for law in of._parameters.T.tolist()]
    return of.from_normals, None


_PLAIN_DRAWS = (RequestClass.from_normals, ClassMix.from_normals, _from_normals)
"""The draws `class_laws` names: this module's own."""

URGENT = RequestClass("urgent", 10.0, 0.5, 3.0, 0.5, 32.0, 0.6, 256)
INTERACTIVE = RequestClass("interactive", 1.0, 0.6, 10.0, 0.6, 128.0, 0.8, 2048)
BACKGROUND = RequestClass("background", 0.02, 0.8, 120.0, 0.8, 256.0, 0.8, 4096)

CLASSES: dict[str, RequestClass] = {c.name: c for c in (URGENT, INTERACTIVE, BACKGROUND)}
"""The classes by name."""

DEFAULT_CLASS_MIX: dict[str, float] = {"urgent": 0.1, "interactive": 0.6, "background": 0.3}
"""Class probabilities for traces that carry no class (Mooncake replay)."""


def get_class(cls: RequestClass | str) -> RequestClass:
    """Return the class object for a class or its name; ValueError for an unknown name."""
    if isinstance(cls, RequestClass):
        return cls
    try:
        return CLASSES[cls]
    except KeyError:
        raise ValueError(f"unknown request class {cls!r}; known: {sorted(CLASSES)}") from None


def draw_request_params(
    cls: RequestClass | str, rng: np.random.Generator
) -> tuple[float, float, int]:
    """Draw one request's (urgency w, value V, output_len) from class `cls`."""
    w, v, out = get_class(cls).sample(rng, 1)
    return float(w[0]), float(v[0]), int(out[0])


def normalize_mix(mix: Mapping[str, float], what: str = "class mix") -> tuple[list[str], np.ndarray]:
    """Check a {name: weight} mix (weights >= 0, positive sum) and return names and probabilities."""
    names = list(mix)
    weights = [float(mix[k]) for k in names]
    p = np.array(weights)
    # Checked on the Python floats: a mix has a handful of entries, and each env reset checks two.
    if not all(0 <= x < math.inf for x in weights) or p.sum() <= 0:
        raise ValueError(f"{what} must have non-negative weights with a positive sum, got {dict(mix)}")
    return names, p / p.sum()


def checked_max_new_tokens(cap: object, least: int, why: str, none_means: str) -> int | None:
    """A workload's `max_new_tokens` argument checked: None (the workload's own rule, `none_means`)
    or an int >= `least` tokens (`why`: the longest output the workload draws), as a Python int;
    ValueError otherwise."""
    if cap is None:
        return None
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < least:
        raise ValueError(f"max_new_tokens must be None ({none_means}) or an int >= {least} ({why}); got {cap!r}")
    return int(cap)


def checked_class_mix(mix: Mapping[str, float], what: str = "class_mix") -> tuple[list[str], np.ndarray]:
    """`normalize_mix` of a mix over the urgency classes: also rejects names not in CLASSES."""
    names, p = normalize_mix(mix, what)
    if unknown := set(names) - set(CLASSES):
        raise ValueError(f"unknown classes {sorted(unknown)} in {what}; known: {sorted(CLASSES)}")
    return names, p

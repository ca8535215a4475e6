"""The one test of "is an integer count" that requests, the cache, the engine's config, the schedulers
and the market's config share, of "is a real number" for the market's and the envs' numbers, the
one range check of a number setting (the routers', the workloads'), and the 64-bit bound the
compiled core holds integers in. It imports nothing of the package, so any module may use it."""

from __future__ import annotations

import math
import numbers
import operator


def is_int(x: object) -> bool:
    """Whether `x` is an integer value: an int (numpy's too) or an integral float such as 5.0, not a
    bool. inf, nan and non-numbers (strings, None) are not (False, not an error)."""
    try:
        return not isinstance(x, bool) and math.isfinite(x) and int(x) == x
    except (TypeError, OverflowError):
        return False


def is_real(x: object) -> bool:
    """Whether `x` is a real number: an int or a float, Python's or numpy's (np.float32 too), not a
    bool (True is no budget or rate). inf and nan are (test them with math.isfinite after this);
    strings and None are not."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_count(name: str, value: object, least: int = 1) -> int:
    """`value` as an int; raise ValueError naming `name` unless it is an integer value >= `least`
    ("must be a positive int" when `least` is 1, "must be an int >= least" otherwise)."""
    if not is_int(value) or value < least:
        need = "a positive int" if least == 1 else f"an int >= {least}"
        raise ValueError(f"{name} must be {need}, got {value!r}")
    return int(value)


def is_int_typed(x: object) -> bool:
    """Whether `x` is an int object, Python's or numpy's (not a bool): unlike `is_int`, not an
    integral float, for numbers handed to numpy as sizes and bounds, which a float breaks or truncates."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_int(name: str, value: object, least: int, most: int | None = None) -> int:
    """`value` as a Python int; ValueError naming `name` unless it is an int object (`is_int_typed`)
    >= `least` (and <= `most`, if given)."""
    if not is_int_typed(value) or value < least or (most is not None and value > most):
        within = f">= {least}" if most is None else f"in [{least}, {most}]"
        raise ValueError(f"{name} must be an int {within}, got {value!r}")
    return int(value)


def check_number(name: str, value: object, least: float = -math.inf, most: float = math.inf, *,
                 above: bool = False, finite: bool = False, unit: str = "") -> object:
    """`value` unchanged; raise ValueError naming `name` unless it is a real number, not a bool (a
    flag given for a number is a mistake), >= `least` (> `least` if `above`) and <= `most`, and
    finite if `finite`. NaN fails, which every comparison would let pass. `unit`, e.g. "(s)",
    ends the message."""
    ok = (is_real(value)
          and (value > least if above else value >= least) and value <= most
          and (not finite or math.isfinite(value)))
    if not ok:
        if least > -math.inf and most < math.inf:
            bound = f" in {'(' if above else '['}{least:g}, {most:g}]"
        elif least > -math.inf:
            bound = f" {'>' if above else '>='} {least:g}"
        else:
            bound = f" <= {most:g}" if most < math.inf else ""
        raise ValueError(f"{name} must be a {'finite ' if finite else ''}number{bound}{f' {unit}' if unit else ''}, "
                         f"got {value!r}")
    return value


def config_or_default(name: str, config: object, cls: type) -> object:
    """`config`, or `cls()` for None; TypeError naming `name` for anything that is not a `cls`: a
    dict of its fields, a config of another kind or one given in another argument's place (a
    config where a scheduler goes) would otherwise fail later on a missing attribute."""
    if config is None:
        return cls()
    if isinstance(config, cls):
        return config
    hint = f"; build one with {cls.__name__}(**fields)" if isinstance(config, dict) else ""
    raise TypeError(f"{name} must be an instance of {cls.__name__} (None: its defaults), got {type(config).__name__}{hint}")


def within_int64(n: int) -> bool:
    """Whether the int `n` fits a signed 64-bit integer, what the compiled core holds request ids,
    the engine's counts and round priorities in."""
    return -2**63 <= n < 2**63


def as_int64(name: str, value: object) -> int:
    """`value` as an int, where it is one (numpy's ints and bools too, as `operator.index` takes
    them) within 64 bits; TypeError naming `name` otherwise (a float included, even an integral
    one), as the compiled core's bindings refuse it."""
    if type(value) is int and within_int64(value):  # the hot path: an int that fits
        return value
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None
    if not within_int64(n):
        raise TypeError(f"{name} must be an int within 64 bits, got {value!r}")
    return n

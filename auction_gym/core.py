"""Which implementation of the simulator's core a component is built on: the pure-Python reference
or the compiled core, the extension module `auction_gym._core` (docs/design.md section 8).
Both give bit-identical results; the compiled one is faster, the Python one is the reference and
the fallback when the extension is not built.

The choice is made when a component is constructed (`active()`), from, in order: a `use(core)`
block around the construction, the environment variable AUCTION_GYM_CORE ("python" or
"compiled"), else "compiled" when the extension imports and "python" (with a warning, once) when
it does not.
"""

from __future__ import annotations

import copyreg
import importlib
import os
import warnings
from contextlib import contextmanager
from functools import cache
from types import ModuleType
from typing import Any, Iterator

CORES = ("python", "compiled")
"""The implementations: the pure-Python reference and the compiled extension `auction_gym._core`."""
ENV_VAR = "AUCTION_GYM_CORE"
"""The environment variable that picks the core for a whole process."""

_chosen: list[str] = []  # the cores of the `use` blocks entered, innermost last
_fallback_warned = False


class EitherCore:
    """Base of a class whose constructor gives its compiled twin on the compiled core (its
    `__new__` asks `active()`): a copy or an unpickling of an instance built in Python rebuilds it
    in Python (`python_instance`), whatever core is active then, where `copy.deepcopy` and pickle
    would call that `__new__` and get the twin."""

    __slots__ = ()

    def __reduce_ex__(self, protocol: Any) -> Any:
        reduced = super().__reduce_ex__(protocol)
        if isinstance(reduced, tuple) and reduced[0] is copyreg.__newobj__:
            return (python_instance, *reduced[1:])
        return reduced


def python_instance(cls: type, *args: object) -> Any:
    """A bare instance of `cls` itself, its state set afterwards by copy or pickle (`EitherCore`)."""
    return object.__new__(cls)


class CoreUnavailable(RuntimeError):
    """The compiled core was asked for but `auction_gym._core` is not built (or does not import)."""


@cache
def compiled_module() -> ModuleType | None:
    """The extension module `auction_gym._core`, or None when it is not built (looked for once)."""
    try:
        return importlib.import_module(f"{__package__}._core")
    except ImportError:
        return None


def check_core(core: str) -> str:
    """`core` if it names a core that can run here; ValueError for an unknown name, CoreUnavailable
    for "compiled" when the extension is not built."""
    if core not in CORES:
        raise ValueError(f"core must be one of {', '.join(CORES)}, got {core!r}")
    if core == "compiled" and compiled_module() is None:
        raise CoreUnavailable(
            "the compiled core (auction_gym._core) is not built: install the project with a C++ compiler "
            "(bash setup.sh, or pip install -e .), or choose the Python core (AUCTION_GYM_CORE=python)"
        )
    return core


def active() -> str:
    """The core a component constructed now is built on (module docstring)."""
    if _chosen:
        return _chosen[-1]
    asked = os.environ.get(ENV_VAR)
    if asked:
        return check_core(asked)
    if compiled_module() is not None:
        return "compiled"
    global _fallback_warned
    if not _fallback_warned:
        _fallback_warned = True
        warnings.warn(
            "auction_gym._core is not built: the simulator runs on its Python core, about 5x slower a step "
            "than the compiled one (`radix-auction bench --benches cores` measures it)", RuntimeWarning, stacklevel=2)
    return "python"


@contextmanager
def use(core: str) -> Iterator[str]:
    """Build the components constructed inside the block on `core` (what tests use to run a piece on
    each core); checked first (`check_core`)."""
    _chosen.append(check_core(core))
    try:
        yield core
    finally:
        _chosen.pop()

"""Which draws a workload generator makes: numpy's calls from Python (the reference), or the same
draws from C++, the extension module `auction_gym._workload` (docs/design.md section 8).

The C++ draws call numpy's own random library on the Python generator's state, so they give the
same numbers only with the numpy they were built against and on a plain `numpy.random.Generator`;
they run where the compiled core is active (`core.active()`), the extension imports and both hold,
and where the configuration's numbers are plain Python ints and floats (the twin declines others).
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType
from typing import Any, Callable, TypeVar

import numpy as np

from .. import core

G = TypeVar("G")


@cache
def _module() -> ModuleType | None:
    """`auction_gym._workload` where it imports and was built against this numpy, else None."""
    try:
        module = importlib.import_module(f"{core.__package__}._workload")
    except ImportError:
        return None
    return module if module.NUMPY_VERSION == np.__version__ else None


def compiled_module() -> ModuleType | None:
    """`auction_gym._workload` where the compiled core is active and the extension runs here, else None."""
    return _module() if core.active() == "compiled" else None


def compiled_draws(rng: np.random.Generator) -> ModuleType | None:
    """The extension that draws on `rng` as its own methods would, or None where the Python
    generator draws (the module docstring's conditions)."""
    return compiled_module() if type(rng) is np.random.Generator else None


def compiled_twin(gen: G, build: Callable[[ModuleType], Any]) -> G | Any:
    """`build(module)`, the compiled twin of the Python generator `gen` (which draws the same
    chunks), or `gen` itself where the compiled draws do not run or the twin declines its
    configuration (a TypeError, raised before any draw)."""
    module = compiled_draws(gen.rng)
    if module is None:
        return gen
    try:
        return build(module)
    except TypeError:
        return gen

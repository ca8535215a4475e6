"""Old public names kept as aliases of their new ones: each warns once (DeprecationWarning) the
first time it is read, so code written against the old name keeps working and learns the new one.
It imports nothing of the package, so any module may use it."""

from __future__ import annotations

import warnings
from typing import Any, Callable


def deprecated_aliases(module: str, aliases: dict[str, tuple[str, Callable[[], Any]]]) -> Callable[[str], Any]:
    """A module `__getattr__` for `module` answering each old name of `aliases` (old name ->
    (new name, a function returning the new object)) with a DeprecationWarning the first time it
    is read, and AttributeError for any other name."""
    warned: set[str] = set()

    def __getattr__(name: str) -> Any:
        if name not in aliases:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new, value = aliases[name]
        if name not in warned:
            warned.add(name)
            warnings.warn(f"{module}.{name} is deprecated; use {new}", DeprecationWarning, stacklevel=2)
        return value()

    return __getattr__

"""Griffe extension for the API reference: a docstring with a table placeholder is read from the
running code.

Some docstrings (`RadixAuctionEnv`'s) carry placeholder lines such as `{mechanism_table}`, which
the module fills at import time from the registries (`auction_gym.registry.with_table`), so that
each table has one definition. mkdocstrings reads docstrings from the source without importing it
and would show the raw placeholders; this extension swaps such a docstring for the imported
object's `__doc__`, the text `help()` and the environment reference page show. Docstrings without
a placeholder are left as the source has them. mkdocs.yml lists it under the python handler's
`extensions`.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import griffe

PLACEHOLDER = re.compile(r"^\s*\{[a-z_]+\}\s*$", re.MULTILINE)
"""A line that is only `{name}`: what `with_table` and its kind replace."""


def runtime_docstring(path: str) -> str | None:
    """The cleaned `__doc__` of the object at the dotted `path`: its longest importable module
    prefix, imported, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        return inspect.cleandoc(target.__doc__) if target.__doc__ else None
    raise ImportError(f"no module of {path!r} imports")


class FilledDocstrings(griffe.Extension):
    """Replaces a docstring holding a placeholder line by the imported object's docstring."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None or not PLACEHOLDER.search(obj.docstring.value):
            return
        filled = runtime_docstring(obj.path)
        if filled is None or PLACEHOLDER.search(filled):
            raise ValueError(f"{obj.path}: the imported docstring still has a placeholder line")
        obj.docstring.value = filled

"""Argument types of the command line: each turns a string into a checked value or raises
argparse.ArgumentTypeError, which argparse prints as one line naming the option (exit status 2).

Light to import (the standard library only), so every subcommand can use them without loading torch or SB3."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def json_dict(text: str) -> dict[str, Any]:
    """A JSON object, e.g. '{"horizon": 200}'."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1; accepts 2e4."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0; accepts 1e3."""
    return _int_at_least(text, 0)


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def unit_share(text: str) -> float:
    """A share strictly between 0 and 1."""
    value = _float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def trace_file(text: str) -> Path:
    """The path of an existing file (a Mooncake JSONL trace)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"not a file: {text} (expected a Mooncake JSONL trace)")
    return path


def _int_at_least(text: str, minimum: int) -> int:
    value = _float(text)
    if value != int(value):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {int(value)}")
    return int(value)


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value

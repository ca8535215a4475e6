"""Argument types of the command line: each turns a string into a checked value or raises
argparse.ArgumentTypeError, which argparse prints as one line naming the option (exit status 2).

Light to import (the standard library only), so every subcommand can use them without loading torch or SB3."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Callable


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


SEED_LIMIT = 2**32
"""Seeds run from 0 to SEED_LIMIT - 1: numpy's legacy seeding, which SB3 seeds through, takes no
other; gymnasium refuses a negative seed only when an episode resets, after a training run."""


def random_seed(text: str) -> int:
    """A random seed: an integer from 0 to SEED_LIMIT - 1."""
    value = non_negative_int(text)
    if value >= SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be < 2**32, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_floats(text: str) -> list[float]:
    """Comma-separated distinct finite numbers > 0, e.g. 0.7,1,1.4 (a sweep's loads)."""
    return _distinct_items(text, positive_float)


def non_negative_floats(text: str) -> list[float]:
    """Comma-separated distinct finite numbers >= 0, e.g. 0,0.5,2."""
    return _distinct_items(text, non_negative_float)


def positive_ints(text: str) -> list[int]:
    """Comma-separated distinct integers >= 1, e.g. 1,4,8."""
    return _distinct_items(text, positive_int)


def names(text: str) -> list[str]:
    """Comma-separated distinct names, e.g. fcfs,lpm, spaces around each dropped (the command checks
    that it knows each); no part empty, and a repeat refused by name: a command would run it twice."""
    return _distinct_items(text, str.strip, "names")


def optional_names(text: str) -> list[str]:
    """`names`, or none for an empty text (an option whose list may be empty, e.g. no baselines)."""
    return names(text) if text.strip() else []


def unit_share(text: str) -> float:
    """A share strictly between 0 and 1."""
    value = _float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def trace_file(text: str) -> Path:
    """The path of an existing file (a Mooncake JSONL trace)."""
    return _existing_file(text, "a Mooncake JSONL trace")


def cost_model_file(text: str) -> Path:
    """The path of an existing file (a cost model's JSON)."""
    return _existing_file(text, "a cost model JSON, as radix-auction calibrate writes")


def existing_folder(text: str) -> Path:
    """The path of an existing folder (an earlier run's output folder)."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{'not a folder' if path.exists() else 'no such folder'}: {text}")
    return path


def output_folder(text: str) -> Path:
    """A folder to write into: an existing one, or one that can be made (no file in its way). Checked
    here because a command writes its outputs after its work, which may take hours."""
    path = Path(text)
    if blocker := _file_in_the_way(path):
        raise argparse.ArgumentTypeError(f"{blocker} is a file, not a folder")
    return path


def output_file(text: str) -> Path:
    """A file to write (after the work, like `output_folder`): not a folder, in a folder that is one
    or can be made."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if blocker := _file_in_the_way(path.parent):
        raise argparse.ArgumentTypeError(f"{blocker} is a file, not a folder")
    return path


def _file_in_the_way(folder: Path) -> Path | None:
    """The file that `folder` or its nearest existing parent is, if that is a file rather than a folder."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    return existing if existing is not None and not existing.is_dir() else None


def _existing_file(text: str, expected: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"not a file: {text} (expected {expected})")
    return path


def _distinct_items(text: str, item: Callable[[str], Any], what: str = "values") -> list:
    """`text` split at commas, each part read by the argument type `item`; no part empty, and a
    repeated value refused by name (a sweep would run a repeated point twice)."""
    parts = text.split(",")
    if not all(part.strip() for part in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}")
    values = [item(part) for part in parts]
    if repeats := sorted({v for v in values if values.count(v) > 1}):
        raise argparse.ArgumentTypeError(f"{', '.join(map(str, repeats))} named more than once in {text!r}")
    return values


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

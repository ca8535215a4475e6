"""Where a results page came from: the machine, the date and the full command that made it, as the
first lines of the Markdown pages `reproduce` and `cluster` write (the documentation site's results
pages are those files); and the hashes that tie a result to its scenario and to the simulator's
code (`scenario_hash`, `code_hash`), which the leaderboard records and checks."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
from datetime import datetime, timezone
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

from auction_gym import core


def machine() -> str:
    """One line: the OS and architecture, the CPU model and the cores this process may use, Python,
    and the simulator's core (`auction_gym.core.active()`: the results are the same on both, the
    speed is not)."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = f"{model}, " if model else ""
    return (f"{platform.system()} {platform.machine()}, {cpu}{cores} cores, Python {platform.python_version()}, "
            f"{core.active()} core")


def command_line(args: argparse.Namespace) -> str:
    """`radix-auction COMMAND` with every option as parsed, defaults included, so the line re-runs
    what ran: a flag when true, lists comma-separated (paths space-separated), unset options left out."""
    words = ["radix-auction", getattr(args, "command", None) or "?"]
    for key, value in vars(args).items():
        if key == "command" or value is None or value is False or value == []:
            continue
        words.append("--" + key.replace("_", "-"))
        if value is True:
            continue
        if isinstance(value, (list, tuple)):
            paths = all(isinstance(v, Path) for v in value)
            words.append((" " if paths else ",").join(map(str, value)))
        else:
            words.append(str(value))
    return " ".join(words)


def made_by(args: argparse.Namespace, when: datetime | None = None) -> str:
    """The Markdown lines that say what made a page: the command, the machine and the date (UTC)."""
    when = when or datetime.now(timezone.utc)
    return (f"Made by `{command_line(args)}` on {when:%Y-%m-%d %H:%M} UTC, on {machine()}.\n")


def figure_links(paths: list[Path], page: Path) -> str:
    """Markdown images of `paths`, relative to the page's folder (where the command writes both)."""
    return "\n".join(f"![{p.stem.replace('_', ' ')}]({os.path.relpath(p, page.parent)})" for p in paths) + "\n"


SIMULATOR_PACKAGE = Path(__file__).resolve().parent.parent / "auction_gym"
"""The simulator's code that `code_hash` covers by default: the package `auction_gym` (the market,
the engine, the workloads and their data, the envs and the built-in pacers). The evaluation loop
(`agents.evaluation`) and the baselines' grids (`agents.baselines`) are outside it: the leaderboard's
re-scoring test checks what they produce."""


def code_hash(root: Path = SIMULATOR_PACKAGE) -> str:
    """sha256 of every file under `root` (compiled `__pycache__` files and built extension modules
    left out: the compiled core gives the Python core's results bit for bit, docs/design.md section
    8), in the order of their paths relative to `root`: each path and its content's sha256, so a
    renamed, added, removed or edited file changes it, and where the package is installed does not."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and not p.name.endswith(tuple(EXTENSION_SUFFIXES))):
        digest.update(f"{path.relative_to(root).as_posix()}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n"
                      .encode())
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """`value` as canonical JSON: keys sorted, no spaces, so equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def scenario_hash(env_id: str, env_kwargs: dict[str, Any]) -> str:
    """sha256 of a scenario: the env id and its keyword arguments as `canonical_json`."""
    return hashlib.sha256(canonical_json({"env_id": env_id, "env_kwargs": env_kwargs}).encode()).hexdigest()

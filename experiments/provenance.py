"""Where a results page came from: the machine, the date and the full command that made it, as the
first lines of the Markdown pages `reproduce` and `cluster` write (the documentation site's results
pages are those files)."""

from __future__ import annotations

import argparse
import os
import platform
from datetime import datetime, timezone
from pathlib import Path


def machine() -> str:
    """One line: the OS and architecture, the CPU model and the cores this process may use, Python."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = f"{model}, " if model else ""
    return f"{platform.system()} {platform.machine()}, {cpu}{cores} cores, Python {platform.python_version()}"


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

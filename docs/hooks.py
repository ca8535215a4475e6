"""MkDocs hook: the reference tables generated at build time from the registries and docstrings.

A page asks for a table with a line `<!-- generated: NAME -->`; NAME is a key of GENERATORS. The
tables come from the one definition of each fact (the observation's FEATURES, the mechanism,
workload and policy registries and the experiments' sweeps of the workloads, the scenarios, the env's docstring), so the site cannot drift from the code.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Callable

MARKER = re.compile(r"^<!-- generated: ([a-z0-9_]+) -->$", re.MULTILINE)


def _rows(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def observation_features() -> str:
    from auction_gym.market.observation import feature_table

    return feature_table()


def mechanisms() -> str:
    from auction_gym.registry import get_mechanism, mechanism_names

    rows = []
    for name in mechanism_names():
        entry = get_mechanism(name)
        target = entry.target if isinstance(entry.target, str) else repr(entry.target)
        rows.append((f"`{name}`", entry.summary, "VCG" if entry.is_auction else "posted prices" if entry.charges else "no",
                     "yes" if entry.in_batch else "no", f"`{target}`"))
    return _rows(("name", "what it does", "charges", "in-batch prefix check", "class"), rows)


def policies() -> str:
    from auction_gym.pacing import POLICIES

    rows = []
    for name, entry in POLICIES.items():
        cls = entry.policy_class()
        rows.append((f"`{name}`", entry.summary, " or ".join(f"`{form}`" for form in entry.forms()),
                     f"`{cls.__module__}:{cls.__qualname__}`"))
    return _rows(("name", "what it does", "written", "class"), rows)


def workloads() -> str:
    from auction_gym.workload.registry import get_workload, workload_names
    from experiments.sweeps import load_sweep, replica_scale

    rows = []
    for name in workload_names():
        entry = get_workload(name)
        rows.append((f"`{name}`", entry.summary, f"`{entry.intensity}`",
                     "yes" if load_sweep(name) is not None else "no", "yes" if replica_scale(name) is not None else "no",
                     f"`{entry.target}`"))
    return _rows(("name", "what it is", "intensity argument", "in `reproduce`", "in `cluster`", "stream"), rows)


def scenarios() -> str:
    from auction_gym.scenarios import DEFAULT_SCENARIO, SCENARIOS

    rows = [(f"`{name}`" + (" (default)" if name == DEFAULT_SCENARIO else ""),
             ", ".join(f"`{key}={value!r}`" for key, value in kwargs.items()))
            for name, kwargs in SCENARIOS.items()]
    return _rows(("scenario", "env arguments"), rows)


def v2_defaults() -> str:
    from auction_gym.scenarios import V2_KWARGS

    return _rows(("argument", "RadixAuction-v2 default"), [(f"`{k}`", f"`{v!r}`") for k, v in V2_KWARGS.items()])


def action_types() -> str:
    from auction_gym.action import ACTION_MEANINGS, ACTION_TYPES, DEFAULT_ACTION_TYPE, action_box

    rows = [(f"`{name}`" + (" (default)" if name == DEFAULT_ACTION_TYPE else ""),
             f"`{action_box(name, 2.0)}`", ACTION_MEANINGS[name]) for name in ACTION_TYPES]
    return _rows(("action_type", "action space (alpha_max = 2)", "multiplier alpha of action a"), rows)


def env_docstring() -> str:
    """`RadixAuctionEnv`'s docstring as the running code has it (its tables filled in from the
    registries), its headings moved one level down to sit under the page's own."""
    from auction_gym import RadixAuctionEnv

    doc = inspect.cleandoc(RadixAuctionEnv.__doc__ or "")
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", doc, flags=re.MULTILINE)


def changelog() -> str:
    """The repository's CHANGELOG.md without its title (the page has its own)."""
    text = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text()
    return text.split("\n", 1)[1].lstrip("\n")


GENERATORS: dict[str, Callable[[], str]] = {
    "observation_features": observation_features,
    "mechanisms": mechanisms,
    "workloads": workloads,
    "policies": policies,
    "scenarios": scenarios,
    "action_types": action_types,
    "v2_defaults": v2_defaults,
    "env_docstring": env_docstring,
    "changelog": changelog,
}


def expand(markdown: str) -> str:
    """`markdown` with every generated-table marker replaced; ValueError for an unknown name."""
    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated table {name!r}; valid: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, **_: object) -> str:
    return expand(markdown)

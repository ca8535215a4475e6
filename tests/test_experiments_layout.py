"""experiments/: every module imports (a benchmark or study no test runs still must), and no module
of a package imports one that imports it back."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import experiments

ROOT = Path(experiments.__file__).parent
MODULES = sorted(m.name for m in pkgutil.walk_packages([str(ROOT)], "experiments."))


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name):
    if name == "experiments.bench.rllib":
        pytest.importorskip("ray")
    importlib.import_module(name)


def _imports(path: Path, package: str) -> set[str]:
    """The experiments modules `path` imports, at any depth of its code (absolute names)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found |= {f"{base}.{a.name}" for a in node.names} | {base}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {name for name in found if name in MODULES}


def test_no_import_cycle():
    graph = {}
    for name in MODULES:
        path = ROOT.joinpath(*name.split(".")[1:])
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = _imports(path, package) - {name}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start] - seen:
            seen.add(nxt)
            if nxt == goal or reaches(nxt, goal, seen):
                return True
        return False

    cycles = sorted(name for name in MODULES if reaches(name, name, set()))
    assert cycles == []


def test_no_subcommand_imports_another():
    """What two commands share lives in a module of its own (`experiments.options`, the commands'
    `*_report` and `calibration` modules), so a command is never another's library."""
    from experiments.cli import COMMANDS

    commands = {module for module, _ in COMMANDS.values()}
    for name in commands:
        path = ROOT.joinpath(*name.split(".")[1:]).with_suffix(".py")
        imported = _imports(path, name.rpartition(".")[0]) & commands
        assert not imported - {name}, f"{name} imports the command(s) {sorted(imported - {name})}"

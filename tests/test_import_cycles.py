"""No import cycle between the modules of the four top-level packages (auction_gym, agents,
experiments, gpu_backend), counting imports inside functions; only imports under `TYPE_CHECKING`,
which never run, may close one (docs/engine.md section 2)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("auction_gym", "agents", "experiments", "gpu_backend")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that `module`'s code imports, wherever the import stands (bar under
    `if TYPE_CHECKING:`); `from p import m` counts the submodule p.m when it is one, else p."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.update(_within(alias.name, known))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.update([sub] if sub in known else _within(base, known))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(module)
    return found


def _within(name: str, known: set[str]) -> list[str]:
    """`name` or its closest enclosing module among `known` (none outside the packages)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return [name] if name else []


def import_graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(p, root): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}
    known = set(files)
    graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[module] = imported(tree, module, path.name == "__init__.py", known)
    # Importing p.m runs p/__init__.py first: a module importing p.m depends on p too.
    for module, deps in graph.items():
        for dep in list(deps):
            parent = dep.rpartition(".")[0]
            while parent:
                if parent in known and parent != module and not module.startswith(parent + "."):
                    deps.add(parent)
                parent = parent.rpartition(".")[0]
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (its modules in import order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)) is not None:
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_no_import_cycle_between_the_packages_modules():
    cycle = find_cycle(import_graph(ROOT))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("inside_function", [False, True])
def test_a_cycle_is_found_even_through_an_import_inside_a_function(tmp_path, inside_function):
    (tmp_path / "auction_gym").mkdir()
    for pkg in PACKAGES[1:]:
        (tmp_path / pkg).mkdir()
    (tmp_path / "auction_gym" / "__init__.py").write_text("")
    (tmp_path / "auction_gym" / "a.py").write_text("from .b import x\n")
    body = "def f():\n    from .a import y\n" if inside_function else "from auction_gym.a import y\n"
    (tmp_path / "auction_gym" / "b.py").write_text(body)
    (tmp_path / "auction_gym" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import z\n")
    cycle = find_cycle(import_graph(tmp_path))
    assert cycle == ["auction_gym.a", "auction_gym.b", "auction_gym.a"]


def test_an_import_under_type_checking_closes_no_cycle(tmp_path):
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
    (tmp_path / "agents" / "a.py").write_text("from agents import b\n")
    (tmp_path / "agents" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agents import a\n")
    assert find_cycle(import_graph(tmp_path)) is None


def test_the_policy_folders_import_one_way():
    """Orders (`scheduler/`), auctions (`mechanism/`) and posted-price designs (`pricing/`) each
    build on the interface (`auction_gym.policy`) and the cache (the prefix matcher is the cache's,
    `auction_gym.prefix_matcher`), never on one another (docs/engine.md section 2)."""
    folders = ("auction_gym.scheduler", "auction_gym.mechanism", "auction_gym.pricing")
    reaches: dict[str, set[str]] = {f: set() for f in folders}
    for module, deps in import_graph(ROOT).items():
        here = next((f for f in folders if module == f or module.startswith(f + ".")), None)
        if here is None:
            continue
        reaches[here] |= {f for f in folders if f != here for d in deps if d == f or d.startswith(f + ".")}
    assert reaches == {"auction_gym.scheduler": set(), "auction_gym.mechanism": set(), "auction_gym.pricing": set()}

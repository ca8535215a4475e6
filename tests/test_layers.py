"""The layers of docs/design.md section 2, checked on the source: a lower layer never imports a
higher one (`auction_gym` < `gpu_backend` < `agents` < `experiments`), the engine, the market,
the mechanisms and the schedulers never import the envs, and no module imports another module's
underscored name (what a module keeps to itself)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
LAYERS = ("auction_gym", "gpu_backend", "agents", "experiments")
"""Lowest first: each may import those before it, never those after it."""
BELOW_THE_ENVS = ("auction_gym.engine", "auction_gym.market", "auction_gym.mechanism", "auction_gym.pricing",
                  "auction_gym.scheduler")


def _modules() -> dict[str, Path]:
    found = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def imports(name: str, path: Path) -> list[tuple[str, str | None]]:
    """(module, name) for every import in `path` at any depth (name None for `import module`),
    relative imports resolved against module `name`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found += [(base, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
    return found


def _layer(module: str) -> int | None:
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_lower_layer_imports_a_higher_one(name):
    own = _layer(name)
    for module, attr in imports(name, MODULES[name]):
        target = module if attr is None or f"{module}.{attr}" not in MODULES else f"{module}.{attr}"
        layer = _layer(target)
        assert layer is None or layer <= own, f"{name} imports {target}, a higher layer"
        if name.startswith(BELOW_THE_ENVS):
            assert not target.startswith("auction_gym.envs"), f"{name} imports the envs ({target})"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_another_ones_underscored_name(name):
    for module, attr in imports(name, MODULES[name]):
        if attr is not None and attr.startswith("_") and not attr.startswith("__") and module != name:
            assert f"{module}.{attr}" in MODULES, f"{name} imports {attr} from {module}, a name kept to it"


def test_the_checks_can_fail(tmp_path):
    """The walk sees what the tests must refuse: a relative import up a layer's package, an
    underscored name from a sibling module."""
    path = tmp_path / "market.py"
    path.write_text("from ..envs import common\nfrom .observation import _row\nimport experiments.cli\n")
    found = imports("auction_gym.market.market", path)
    assert ("auction_gym.envs", "common") in found and ("auction_gym.market.observation", "_row") in found
    assert _layer("experiments.cli") > _layer("auction_gym.market.market")

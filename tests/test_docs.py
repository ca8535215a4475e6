"""The documentation site: its navigation names pages that exist, its generated tables come from
the registries and docstrings, every "design.md section N" the code cites resolves to a page, and
no page carries issue numbers or commit hashes. (`mkdocs build --strict` in .ci/run checks links.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from auction_gym.market.observation import feature_table
from auction_gym.pacing import builtin_policy_names
from auction_gym.registry import mechanism_names
from auction_gym.scenarios import SCENARIOS
from auction_gym.workload import workload_names

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages(nav) -> list[str]:
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_navigation_names_every_page_and_only_pages_that_exist():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = _nav_pages(config["nav"])
    assert all((DOCS / page).is_file() for page in pages), [p for p in pages if not (DOCS / p).is_file()]
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert on_disk == set(pages), on_disk ^ set(pages)


def test_the_environment_reference_is_generated_from_the_registries():
    page = _hooks().expand((DOCS / "environment.md").read_text())
    assert "<!-- generated:" not in page
    assert feature_table() in page
    for name in (*mechanism_names(), *workload_names(), *SCENARIOS, *builtin_policy_names()):
        assert f"`{name}`" in page, name
    assert "## Action Space" in page  # the env's docstring, its headings one level down
    assert "| `action_type` | `'residual'` |" in page and "| `tie_break` | `'cached_prefix'` |" in page  # v2's defaults


def test_every_generated_table_marker_is_expanded():
    for path in DOCS.rglob("*.md"):
        assert "<!-- generated:" not in _hooks().expand(path.read_text()), path


def test_an_unknown_generated_table_is_refused():
    with pytest.raises(ValueError, match="unknown generated table 'nope'; valid: observation_features"):
        _hooks().expand("<!-- generated: nope -->")


def test_every_design_section_the_code_cites_resolves_to_a_page():
    sources = [p for package in ("auction_gym", "agents", "experiments", "gpu_backend", "tests")
               for p in (REPO / package).rglob("*.py")]
    sections = {int(n) for p in sources for n in re.findall(r"design\.md,? section ([0-9]+)", p.read_text())}
    assert sections, "no citation found"
    index = (DOCS / "design.md").read_text()
    for n in sections:
        row = re.search(rf"(?m)^\| {n} \|.*\]\(([a-z-]+\.md)#([a-z0-9-]+)\) \|$", index)
        assert row, f"section {n} is not in design.md's index"
        page, anchor = row.groups()
        heading = re.search(rf"(?m)^## {n}\. (.+)$", (DOCS / page).read_text())
        assert heading and anchor.startswith(f"{n}-"), (n, page, anchor)


@pytest.mark.parametrize("path", sorted(str(p.relative_to(REPO)) for p in [REPO / "README.md", *DOCS.rglob("*.md")]))
def test_no_issue_numbers_or_commit_hashes_in_the_documentation(path):
    text = (REPO / path).read_text()
    assert not re.search(r"\bissues? [0-9]+", text, re.IGNORECASE), path
    assert not re.search(r"\b(?:commit|at|on) [0-9a-f]{7,40}\b", text), path


def _docstrings(obj) -> dict[str, str]:
    """{path: docstring} of `obj` and every member defined under it (aliases left out)."""
    found = {obj.path: obj.docstring.value} if obj.docstring else {}
    for member in obj.members.values():
        if not member.is_alias:
            found |= _docstrings(member)
    return found


def test_the_api_reference_reads_docstrings_with_their_tables_filled():
    """mkdocstrings reads the source; a placeholder a module fills at import time (`{mechanism_table}`)
    would show raw, so docs/griffe_filled_docstrings.py hands griffe the running docstring."""
    griffe = pytest.importorskip("griffe")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    plugin = next(p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    options = plugin["handlers"]["python"]["options"]
    extensions = griffe.load_extensions(*(str(REPO / e) for e in options["extensions"]))
    placeholder = re.compile(r"^\s*\{[a-z_]+\}\s*$", re.MULTILINE)
    raw = _docstrings(griffe.load("auction_gym", search_paths=[str(REPO)]))
    assert placeholder.search(raw["auction_gym.envs.radix_auction_env.RadixAuctionEnv"])  # what the check is for
    read = _docstrings(griffe.load("auction_gym", search_paths=[str(REPO)], extensions=extensions))
    assert not [path for path, doc in read.items() if placeholder.search(doc)]
    assert "| radix_vcg " in read["auction_gym.envs.radix_auction_env.RadixAuctionEnv"]


def test_the_economic_model_quotes_the_reproduced_hit_rates():
    """economic-model.md quotes the shared-prefix hit rates at 40k KV tokens (the `unit` cost model's
    and the cache-aware one's share of LPM's) that the generated reproducing-the-paper.md reports."""
    def prose(page: str) -> str:
        return " ".join((DOCS / page).read_text().split())

    ratio = r"([0-9.]+-[0-9.]+)"
    quoted = re.search(rf"it keeps {ratio} of LPM's hit rate at 40k KV tokens, the cache-aware one {ratio};",
                       prose("economic-model.md"))
    generated = prose("reproducing-the-paper.md")
    tokens = re.search(rf"The cache-aware radix auction keeps .*? \({ratio} at 40k KV tokens\)", generated)
    unit = re.search(rf"`unit` model keeps {ratio} of the hit rate at 40k KV tokens", generated)
    assert quoted and tokens and unit, "a quoted sentence changed: update the pattern with it"
    assert quoted.groups() == (unit.group(1), tokens.group(1))

"""The pages state what the code does: every fact a page counts or quotes that the code defines
(the commands, `--quick`'s sizes, the learners `compare` trains, the extras `setup.sh` installs,
the default env id and the hyperparameter files' keys) is read here from the code and found on the
page."""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml

from agents.sb3 import ENV_ID, HYPERPARAMS_DIR, load_hyperparams
from experiments.cli import COMMANDS
from experiments.commands.compare import BUDGETS, DEFAULT_ALGOS

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def text(page: str) -> str:
    """The page with its lines joined, so that a sentence reads the same wherever it wraps."""
    return re.sub(r"\s*\n\s*", " ", (DOCS / page).read_text())


def test_getting_started_quotes_compare_quicks_sizes_and_the_steps_its_models_record():
    quick, page = BUDGETS["quick"], text("getting-started.md")
    hp = load_hyperparams("ppo", env_id=ENV_ID)
    rollout = hp["n_envs"] * hp["n_steps"]
    recorded = math.ceil(quick["timesteps"] / rollout) * rollout
    assert (f"{quick['seeds']} training seeds x {quick['timesteps']:,} steps asked" in page)
    assert f"rollouts of {hp['n_envs']} envs x {hp['n_steps']} steps, so its models record {recorded:,}" in page
    assert f"{quick['episodes']} evaluation episodes, {quick['tuning_episodes']} tuning episodes" in page


def test_getting_started_names_the_learners_compare_trains():
    assert DEFAULT_ALGOS == ("ppo", "cmaes"), "update getting-started.md's 'Two commands'"
    assert "by PPO and by a CMA-ES policy search" in text("getting-started.md")


def test_the_extras_setup_sh_installs_are_pyprojects_and_the_page_names_them():
    installed = re.search(r'-e "\.\[([a-z,]+)\]"', (REPO / "setup.sh").read_text()).group(1).split(",")
    # pyproject.toml's [project.optional-dependencies] keys (tomllib is Python 3.11+)
    section = (REPO / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = re.findall(r"(?m)^([a-z]+) = \[", section)
    assert sorted(installed) == sorted(extras)
    names = ", ".join(f"`{e}`" for e in installed[:-1]) + f" and `{installed[-1]}`"
    assert f"with {NUMBERS[len(installed)]} extras: {names}" in text("getting-started.md")


def test_the_pacing_page_lists_every_command():
    listed = re.search(r"`radix-auction ([a-z|-]+) --help`", (DOCS / "pacing" / "pacing.md").read_text()).group(1)
    assert listed.split("|") == list(COMMANDS)


def test_the_hyperparameter_files_are_keyed_as_the_pages_say():
    for path in HYPERPARAMS_DIR.glob("*.yml"):
        table = yaml.safe_load(path.read_text())
        assert set(table) == {"RadixAuction-v0", "RadixAuction-v1", "RadixAuction-v2"}, path
        assert table["RadixAuction-v2"] == table["RadixAuction-v1"], path  # v1's settings, as the files say
    assert "each file has a `RadixAuction-v0`, a `RadixAuction-v1` and a `RadixAuction-v2` entry" in text(
        "pacing/pacing.md")
    assert f"(default `{ENV_ID}`;" in text("learners.md")


def test_the_install_commands_install_the_cpu_build_first():
    command = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    for page in (DOCS / "getting-started.md", REPO / "README.md"):
        assert command in page.read_text(), page
    assert "torch==2.13.0" in (REPO / "setup.sh").read_text()  # the version the commands name

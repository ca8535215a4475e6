"""The envs name their observation's features and say what an action means, from the one definition
of each (`FEATURES`, the action maps), and the environment reference's examples that use them run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import auction_gym  # noqa: F401  (registers the envs)
from auction_gym import parallel_env
from auction_gym.action import ACTION_MEANINGS, ACTION_TYPES
from auction_gym.market.observation import FEATURES

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


@pytest.mark.parametrize("env_id", ["RadixAuction-v0", "RadixAuction-v2"])
def test_the_observation_names_match_the_space_through_gym_make(env_id):
    env = gym.make(env_id)
    names = env.metadata["observation_names"]
    assert names == env.unwrapped.observation_names == tuple(f.name for f in FEATURES)
    assert len(names) == env.observation_space.shape[0] == len(set(names))
    assert env.metadata["action_meaning"] == env.unwrapped.action_meaning


def test_the_parallel_env_names_every_agents_features():
    env = parallel_env("v1")
    agent = env.possible_agents[0]
    assert env.observation_names == env.metadata["observation_names"]
    assert len(env.observation_names) == env.observation_space(agent).shape[0]
    assert "'residual'" in env.action_meaning and env.metadata["action_meaning"] == env.action_meaning


@pytest.mark.parametrize("action_type", ACTION_TYPES)
def test_the_action_meaning_names_its_type_box_map_and_parameters(action_type):
    env = gym.make("RadixAuction-v0", action_type=action_type, alpha_max=3.0).unwrapped
    low, high = env.action_space.low[0], env.action_space.high[0]
    meaning = env.action_meaning
    assert f"action_type {action_type!r}" in meaning and f"[{low:g}, {high:g}]" in meaning
    assert ACTION_MEANINGS[action_type] in meaning and "alpha_max = 3" in meaning
    # Two types' meanings differ (none is a copy of another's).
    assert len(set(ACTION_MEANINGS.values())) == len(ACTION_TYPES)


@pytest.mark.parametrize("page", ["environment.md", "index.md"])
def test_the_pages_examples_run(page):
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    assert page != "environment.md" or any("SelectFeatures" in b for b in blocks), "the wrapper example is gone"
    assert blocks and all(re.search(r'make(_vec)?\("RadixAuction-v2"', b) for b in blocks)  # every example is v2's
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    for code in blocks:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "budget_left" in done.stdout

"""A newcomer's mechanism: its own file and one registry entry, nothing else, and it runs through
the env (charged when it is an auction) and through `reproduce --quick`'s code path."""

from __future__ import annotations

import csv
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

import auction_gym  # noqa: F401  (registers RadixAuction-v0)
from auction_gym import registry
from auction_gym.registry import MechanismEntry, register_mechanism
from experiments.cli import main
from experiments.commands import reproduce, reproduce_trace
from experiments.commands.reproduce import Sweep

TOY_FILE = '''
"""Toy policies of a newcomer: last come, first served, and a strict auction under another name."""
from auction_gym.mechanism import StrictPriorityAuction
from auction_gym.scheduler import fcfs_key


class LastComeFirstServed:
    name = "toy_lcfs"

    def order(self, queue, cache):
        return sorted(queue, key=fcfs_key, reverse=True)


class ToyAuction(StrictPriorityAuction):
    name = "toy_auction"
'''


@pytest.fixture
def toys(tmp_path, monkeypatch):
    """The toy file on sys.path and its two registry entries, removed again after the test."""
    (tmp_path / "toy_policies.py").write_text(textwrap.dedent(TOY_FILE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_ENTRIES", dict(registry._ENTRIES))
    register_mechanism(MechanismEntry("toy_lcfs", "toy_policies:LastComeFirstServed", "last come, first served"))
    register_mechanism(MechanismEntry("toy_auction", "toy_policies:ToyAuction", "strict priority; VCG payments"))
    yield
    sys.modules.pop("toy_policies", None)


def _revenue(mechanism: str, steps: int = 60) -> float:
    env = gym.make("RadixAuction-v0", mechanism=mechanism, horizon=steps)
    env.reset(seed=0)
    revenue = 0.0
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(np.zeros(1, dtype=np.float32))
        revenue += info["revenue"]
        if terminated or truncated:
            break
    env.close()
    return revenue


def test_the_toys_run_in_the_env_and_only_the_auction_charges(toys):
    assert "toy_lcfs" in auction_gym.scheduler_names()
    assert set(registry.auction_names()) == {"strict_vcg", "radix_vcg", "toy_auction"}
    assert _revenue("toy_lcfs") == 0.0
    assert _revenue("toy_auction") > 0.0  # charged with no other edit: it is an AuctionMechanism


def test_an_unknown_mechanism_lists_the_registered_ones(toys):
    with pytest.raises(ValueError, match="valid: fcfs, .*toy_lcfs, toy_auction"):
        gym.make("RadixAuction-v0", mechanism="toy_missing")


def test_the_toys_run_through_reproduce_quick(toys, tmp_path, monkeypatch, capsys):
    tiny = Sweep(loads=(1.0,), agentic_kv=(15_000,), agentic_duration=5.0, mooncake_kv=(), mooncake_lines=0)
    monkeypatch.setattr(reproduce, "QUICK", tiny)
    monkeypatch.setattr(reproduce_trace, "DEFAULT_TRACES", (tmp_path / "none.jsonl",))
    main(["reproduce", "--quick", "--seeds", "1", "--jobs", "1", "--out", str(tmp_path)])
    with (tmp_path / "reproduce.csv").open() as f:
        rows = {r["policy"]: r for r in csv.DictReader(f)}
    assert {"toy_lcfs", "toy_auction"} <= set(rows)
    # The toy auction is strict priority under another name: every figure is strict_vcg's.
    same = {k: v for k, v in rows["strict_vcg"].items() if k != "policy"}
    assert {k: v for k, v in rows["toy_auction"].items() if k != "policy"} == same
    assert rows["toy_lcfs"]["mean_latency"] != rows["fcfs"]["mean_latency"]
    assert "toy_lcfs" in (tmp_path / "reproduce.md").read_text()

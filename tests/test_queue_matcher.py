"""k-LPM's and DFS-weight's matchers told the engine's queue changes (`scheduler/queue_matcher.py`)
against the same policies comparing the queues each round: the same engine runs, record by record,
over random workloads and configs that retract (a request leaves and comes back between rounds)."""

from __future__ import annotations

import numpy as np
import pytest
from test_core_engine import burst_workload, random_config

from auction_gym import SimEngine
from auction_gym.policy import WaitingRound
from auction_gym.registry import make_scheduler
from auction_gym.scheduler.dfs_weight import DFSWeight
from auction_gym.scheduler.klpm import KLPM

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator


def comparing(base: type) -> type:
    """`base` whose rounds come without their changes: its matcher compares the queues each time."""

    class Comparing(base):
        def order_round(self, round: WaitingRound) -> list:
            return super().order_round(WaitingRound(round.queue, round.cache, length_of=round.length_of))

    return Comparing


class Recording:
    """A policy's `QueueMatcher` that records, per round, whether it was told the round's changes."""

    def __init__(self, matcher) -> None:
        self.matcher, self.told = matcher, []

    def update(self, round: WaitingRound):
        match, changes = self.matcher.update(round)
        self.told.append(changes is not None)
        return match, changes


def run(policy, requests, config) -> list[tuple]:
    engine = SimEngine(policy, config)
    engine.submit(requests)
    engine.run()
    return [(r.id, r.admit, r.finish, r.cached_tokens) for r in sorted(engine.records.values(), key=lambda r: r.id)]


@pytest.mark.parametrize("name,base", [("klpm", KLPM), ("dfs_weight", DFSWeight)])
@pytest.mark.parametrize("seed", range(12))
def test_told_changes_give_the_compared_queues_runs(name, base, seed):
    rng = np.random.default_rng(seed)
    requests = burst_workload(rng)
    config = random_config(rng, requests)
    policy = make_scheduler(name)
    policy._matcher = recording = Recording(policy._matcher)
    assert run(policy, requests, config) == run(comparing(base)(), burst_workload(np.random.default_rng(seed)), config)
    told = recording.told
    assert told[0] is False and sum(told) >= len(told) // 2  # the first round compares; most are told

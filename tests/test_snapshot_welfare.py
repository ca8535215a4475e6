"""`snapshot_welfare` gives each policy the model welfare of the straightforward computation (a
fresh cache, round and policy per snapshot and per policy, each cost added in Python) on random
queues that change from snapshot to snapshot (requests admitted, arrived and matched again), on
both cores."""

from __future__ import annotations

import operator
import random

import numpy as np
import pytest

from auction_gym import RadixCache
from auction_gym.mechanism.queue_tree import build_queue_tree, completion_times
from auction_gym.policy import AdmissionPolicy, WaitingRound
from auction_gym.request import Request
from auction_gym.scheduler import make_scheduler
from experiments.commands.reproduce import first_order, policies, snapshot_welfare, split_policy


def random_snapshots(rng: random.Random, count: int) -> list[list[tuple[Request, int]]]:
    """`count` waiting queues (request, cached length), each the one before with some requests
    admitted, some arrived and some cached lengths matched again; prompts share prefixes."""
    heads = [rng.choices(range(6), k=rng.randint(0, 30)) for _ in range(4)]
    made = 0

    def arrival() -> list:
        nonlocal made
        made += 1
        tokens = rng.choice(heads) + rng.choices(range(6), k=rng.randint(1, 12))
        r = Request(id=made, bidder=rng.randrange(3), tokens=np.array(tokens, dtype=np.int64),
                    bid=rng.choice([0.0, 0.5, 1.0, rng.random()]), urgency=rng.random())
        return [r, rng.randint(0, len(tokens) - 1)]

    queue = [arrival() for _ in range(rng.randint(2, 12))]
    snapshots = []
    for _ in range(count):
        queue = [q for q in queue if rng.random() > 0.2] + [arrival() for _ in range(rng.randint(0, 4))]
        for q in queue:
            if rng.random() < 0.2:
                q[1] = rng.randint(0, len(q[0].tokens) - 1)
        snapshots.append([(r, cached) for r, cached in queue])
    return snapshots


def straightforward(snapshots: list, names: tuple[str, ...], cost_model: str) -> dict[str, float]:
    """Each policy's mean model welfare, everything built afresh per snapshot and per policy."""
    totals = dict.fromkeys(names, 0.0)
    for snapshot in snapshots:
        queue = [r for r, _ in snapshot]
        lens = None if cost_model == "unit" else [cached for _, cached in snapshot]
        tree = build_queue_tree([r.tokens for r in queue], lens)
        position = {r: i for i, r in enumerate(queue)}
        for policy in names:
            cache = RadixCache()
            for r, cached in snapshot:
                if cached:
                    cache.insert(r.tokens[:cached])
            scheduler = AdmissionPolicy.adopt(make_scheduler(*split_policy(policy, cost_model)))
            order, _ = scheduler.admit(WaitingRound(queue, cache))
            done = completion_times(tree, [position[r] for r in order], 1.0)
            totals[policy] -= sum(map(operator.mul, [r.urgency for r in queue], done))
    return {p: total / len(snapshots) for p, total in totals.items()}


@pytest.mark.both_cores
@pytest.mark.parametrize("cost_model", ["tokens", "unit"])
@pytest.mark.parametrize("seed", range(4))
def test_snapshot_welfare_is_the_straightforward_computation(cost_model, seed):
    snapshots = random_snapshots(random.Random(seed), 25)
    names = policies(cost_model)
    got = snapshot_welfare(snapshots, names, len(snapshots), cost_model)
    assert got == straightforward(snapshots, names, cost_model)
    assert len(set(got.values())) > 2  # the policies' orders differ


def _round(snapshot: list) -> tuple[WaitingRound, list]:
    """A snapshot's round as `snapshot_welfare` makes it, and each whole prompt's split peek."""
    queue = [r for r, _ in snapshot]
    cache = RadixCache()
    cache.insert_prefixes([r.tokens for r in queue], [cached for _, cached in snapshot])
    matched = cache.peek_prefixes([r.tokens for r in queue], split=True)
    return WaitingRound(queue, cache, length_of={r: n for r, (n, _) in zip(queue, matched)}), matched


@pytest.mark.both_cores
@pytest.mark.parametrize("policy", ["klpm", "dfs_weight", "lpm", "strict_vcg"])
@pytest.mark.parametrize("seed", range(4))
def test_first_order_is_a_fresh_policys_round(policy, seed):
    """`first_order` (k-LPM's and DFS-weight's rounds made without their matchers,
    `first_round_order`) gives the order of a fresh policy's round over a cache of its own,
    snapshot by snapshot."""
    for snapshot in random_snapshots(random.Random(seed), 12):
        waiting, matched = _round(snapshot)
        scheduler = make_scheduler(policy, "tokens")
        if policy in ("klpm", "dfs_weight"):
            assert scheduler.first_round_order(waiting, matched) is not None
        got = first_order(scheduler, waiting, matched)
        fresh = RadixCache()  # a cache that no peek split
        fresh.insert_prefixes([r.tokens for r in waiting.queue], [cached for _, cached in snapshot])
        assert got == make_scheduler(policy, "tokens").admit(WaitingRound(waiting.queue, fresh))[0]


@pytest.mark.parametrize("policy", ["klpm", "dfs_weight"])
def test_a_subclass_that_orders_otherwise_is_asked_its_round(policy):
    """`first_round_order` stands in for the class's own order only: a subclass gets None, and
    `first_order` asks its `admit`."""
    base = type(make_scheduler(policy, "tokens"))
    reversed_order = type("Reversed", (base,), {"order_round": lambda self, round: base.order_round(self, round)[::-1]})
    waiting, matched = _round(random_snapshots(random.Random(0), 1)[0])
    assert reversed_order().first_round_order(waiting, matched) is None
    assert first_order(reversed_order(), waiting, matched) == first_order(base(), waiting, matched)[::-1]

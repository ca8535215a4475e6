"""The cluster engine and its routers: known answers, conservation, memory, one replica = one engine."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import EngineConfig, Request, SimEngine
from auction_gym.cluster import ROUTERS, ClusterEngine, load_imbalance, make_router
from auction_gym.envs.radix_auction_env import RadixAuctionEnv
from auction_gym.market import Market, MarketConfig
from auction_gym.workload import AgenticConfig, agentic_workload

SMALL = EngineConfig(kv_capacity_tokens=6_000, max_running_requests=8)


def req(i: int, tokens, arrival: float = 0.0, output_len: int = 4) -> Request:
    return Request(id=i, bidder=0, tokens=np.asarray(tokens, dtype=np.int64), bid=1.0, arrival=arrival,
                   output_len=output_len)


def engines(n: int, config: EngineConfig = SMALL) -> list[SimEngine]:
    return [SimEngine("lpm", config) for _ in range(n)]


def queue_on(engine: SimEngine, count: int, first_id: int) -> None:
    """Give a replica `count` in-flight requests (routed, not yet let in) without running it."""
    for i in range(count):
        engine.submit([req(first_id + i, [9] * 4, arrival=1e9)])


def workload(seed: int = 3, rate: float = 60.0, duration: float = 8.0) -> list[Request]:
    return agentic_workload(AgenticConfig(num_bidders=3, rate=rate, duration=duration), seed=seed)


def test_round_robin_and_least_load():
    reps = engines(3)
    rr = make_router("round_robin")
    assert [rr.route(req(i, [1]), reps, 0.0) for i in range(5)] == [0, 1, 2, 0, 1]
    queue_on(reps[0], 2, 100)
    queue_on(reps[2], 1, 200)
    assert make_router("least_load").route(req(0, [1]), reps, 0.0) == 1
    p2 = make_router("power_of_two", seed=0)
    picks = {p2.route(req(0, [1]), reps, 0.0) for _ in range(50)}
    assert 0 not in picks  # the most loaded loses to whichever other replica is drawn with it


def test_prefix_hash_is_sticky_and_spreads():
    reps = engines(4)
    router = make_router("prefix_hash", prefix_tokens=4)
    a = router.route(req(0, [1, 2, 3, 4, 50, 60]), reps, 0.0)
    assert router.route(req(1, [1, 2, 3, 4, 70]), reps, 0.0) == a  # same first block, same replica
    spread = {router.route(req(i, [i, i + 1, i + 2, i + 3]), reps, 0.0) for i in range(200)}
    assert spread == {0, 1, 2, 3}


def test_cache_aware_follows_its_tree_until_the_balance_fallback():
    reps = engines(2)
    router = make_router("cache_aware")
    prompt = list(range(100))
    first = router.route(req(0, prompt), reps, 0.0)
    assert (first, router.last_decision) == (0, "low_match")  # empty trees: least loaded
    queue_on(reps[0], 10, 100)  # replica 0 busier, but within the thresholds (10 <= 64)
    assert router.route(req(1, prompt[:50] + [999] * 50), reps, 0.0) == 0
    assert router.last_decision == "cache"  # 50/100 matched > 0.3
    assert router.route(req(2, prompt[:20] + [999] * 80), reps, 0.0) == 1  # 20% < 0.3: least loaded
    assert router.last_decision == "low_match"
    queue_on(reps[0], 60, 200)  # 70 vs 0..: difference > 64 and ratio > 1.5
    assert router.route(req(3, prompt), reps, 0.0) == 1
    assert router.last_decision == "imbalanced"


def test_cache_aware_relative_threshold_keeps_cache_affinity():
    reps = engines(2)
    router = make_router("cache_aware")
    prompt = list(range(100))
    router.route(req(0, prompt), reps, 0.0)  # -> replica 0's tree
    queue_on(reps[0], 200, 100)
    queue_on(reps[1], 150, 400)  # difference 50 < 64 (and 200 < 1.5 x 150): balanced
    assert router.route(req(1, prompt), reps, 0.0) == 0 and router.last_decision == "cache"
    queue_on(reps[0], 20, 600)  # 220 - 150 = 70 > 64 but 220 < 1.5 x 150 = 225: still balanced
    assert router.route(req(2, prompt), reps, 0.0) == 0 and router.last_decision == "cache"


def test_kv_overlap_and_oracle_read_the_actual_caches():
    reps = engines(3)
    prompt = np.arange(1000, 1320)
    reps[2].cache.insert(prompt[:256])
    reps[1].cache.insert(prompt[:64])
    kv = make_router("kv_overlap")
    costs = kv.costs(req(0, prompt), reps)
    assert costs == [20 + 20, 16 + 20, 4 + 20]  # prefill blocks (16 tokens each) + the prompt's decode blocks
    assert kv.route(req(0, prompt), reps, 0.0) == 2
    queue_on(reps[2], 1, 100)
    reps[2].arrivals.pending_requests()[0].tokens = np.zeros(320, dtype=np.int64)  # 20 more active blocks
    assert kv.route(req(0, prompt), reps, 0.0) == 1  # 44 > 36: load outweighs the overlap
    assert make_router("oracle_prefix").route(req(0, prompt), reps, 0.0) == 2  # load ignored
    hot = make_router("kv_overlap", temperature=1.0, seed=1)
    assert {hot.route(req(0, prompt), reps, 0.0) for _ in range(40)} == {0, 1, 2}


def test_unknown_router_lists_the_valid_ones():
    with pytest.raises(ValueError, match="cache_aware"):
        make_router("nope")
    with pytest.raises(ValueError, match="needs a router"):
        MarketConfig(replicas=2)


def test_one_replica_reproduces_the_single_engine_exactly():
    single = SimEngine("lpm", SMALL)
    single.run(workload())
    cluster = ClusterEngine(engines(1), make_router("cache_aware"))
    cluster.run(workload())
    def key(recs):
        return {i: (r.admit, r.first_token, r.finish, r.cached_tokens, r.computed_tokens, r.retractions)
                for i, r in recs.items()}

    assert key(cluster.records) == key(single.records)
    assert cluster.now == single.now


@pytest.mark.parametrize("name", list(ROUTERS))
def test_conservation_and_memory_bound_on_every_replica(name):
    requests = workload(rate=120.0)
    cluster = ClusterEngine(engines(3), make_router(name))
    cluster.submit(requests)
    cap = SMALL.kv_capacity_tokens
    while (it := cluster.step()) is not None:
        rep = cluster.replicas[it.replica]
        assert rep.used_tokens <= cap
    served = [set(e.records) for e in cluster.replicas]
    assert sum(len(s) for s in served) == len(requests)  # each request on exactly one replica
    assert set().union(*served) == {r.id for r in requests}
    for rid, k in cluster.assignment.items():
        assert rid in served[k]
    m = cluster.metrics()
    assert m.finished + m.rejected == len(requests) and m.unfinished == 0
    assert load_imbalance(cluster) >= 1.0


def test_market_over_a_cluster_charges_from_each_replica_and_keeps_budgets_global():
    config = MarketConfig(replicas=3, router="cache_aware", horizon=60, warmup=2.0,
                          workload_kwargs={"rate": 150.0})
    market = Market(config)
    market.reset(seed=1)
    replicas_seen = set()
    while not market.done:
        report = market.step([1.0] * config.num_bidders)
        assert np.all(market.spent <= market.budget + 1e-12) and np.all(report.payments >= 0)
        if report.admitted:
            replicas_seen.add(market.engine.assignment[report.admitted[0]])
    assert replicas_seen == {0, 1, 2} and market.spent.sum() > 0


def test_env_takes_replicas_and_router():
    env = RadixAuctionEnv(replicas=2, router="round_robin", horizon=5)
    env.reset(seed=0)
    for _ in range(5):
        terminated = env.step(env.action_space.sample())[2]
    assert terminated and len(env.market.engine.replicas) == 2


def test_cluster_experiment_writes_its_outputs(tmp_path):
    from experiments.cli import main

    main(["cluster", "--quick", "--size", "16", "--replicas", "1,2", "--routers", "cache_aware,round_robin",
          "--policies", "lpm,radix_vcg", "--workloads", "shared_prefix", "--out", str(tmp_path)])
    names = {p.name for p in tmp_path.iterdir()}
    assert {"cluster.csv", "cluster.md", "cluster_hit_rate.png", "cluster_latency.png"} <= names
    rows = (tmp_path / "cluster.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 + 4  # header, one replica per policy, 2 routers x 2 policies

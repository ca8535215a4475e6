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


def test_cluster_experiment_kv_weight_rows_and_merge(tmp_path):
    from experiments.cli import main
    from experiments.commands.cluster import read_csv

    main(["cluster", "--size", "16", "--replicas", "2", "--routers", "kv_overlap", "--kv-weights", "0,4",
          "--policies", "lpm", "--workloads", "shared_prefix", "--loads", "1", "--out", str(tmp_path / "a")])
    main(["cluster", "--size", "16", "--replicas", "1,2", "--routers", "kv_overlap,round_robin", "--policies",
          "lpm", "--workloads", "shared_prefix", "--loads", "1", "--out", str(tmp_path / "b")])
    a, b = read_csv(tmp_path / "a/cluster.csv"), read_csv(tmp_path / "b/cluster.csv")
    assert [p.router for p in a] == ["kv_overlap", "kv_overlap(w=0)", "kv_overlap(w=4)"]
    assert {k: v for k, v in vars(a[0]).items() if k != "wall_s"} == \
        {k: v for k, v in vars(next(p for p in b if p.router == "kv_overlap")).items() if k != "wall_s"}
    main(["cluster", "--merge", str(tmp_path / "a/cluster.csv"), str(tmp_path / "b/cluster.csv"),
          "--out", str(tmp_path / "m")])
    merged = read_csv(tmp_path / "m/cluster.csv")
    assert [p.router for p in merged] == ["kv_overlap", "kv_overlap(w=0)", "kv_overlap(w=4)", "-", "round_robin"]


def test_cluster_targets_read_the_ratios_off_the_rows():
    from experiments.commands.cluster import Point, targets

    def point(policy, router, replicas, hit, latency=1.0, throughput=1.0, imbalance=1.0):
        return Point("shared_prefix", policy, router, replicas, 1.0, 10, hit, 0.1, latency, throughput, imbalance,
                     0.0, 0.0, 0.0)

    points = [point("lpm", "-", 1, 0.8, throughput=2.0), point("lpm", "oracle_prefix", 8, 0.8),
              point("lpm", "cache_aware", 8, 0.72, throughput=15.0, imbalance=1.2),
              point("radix_vcg", "cache_aware", 8, 0.684, latency=2.0), point("strict_vcg", "cache_aware", 8, 0.7,
                                                                                   latency=3.0)]
    lines = targets(points)
    assert "cache_aware 0.90 (imb 1.20)" in lines[0]
    assert lines[1].endswith("15.00 / 2.00 req/s = 7.50x")
    assert lines[2].endswith("0.684 / 0.720 = 0.950")
    assert lines[3].endswith("latency strict / radix auction: cache_aware 1.50")


def test_market_over_a_cluster_of_torch_engines():
    torch = pytest.importorskip("torch")
    from gpu_backend import TorchEngine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the torch engine's default cpu clock times one thread
    try:
        _cluster_of_torch_engines(TorchEngine)
    finally:
        torch.set_num_threads(threads)


def _cluster_of_torch_engines(engine_class: type) -> None:

    config = MarketConfig(backend="torch", backend_kwargs={"preset": "tiny", "device": "cpu"}, replicas=2,
                          router="cache_aware", mechanism="radix_vcg", horizon=10**6, warmup=0.0,
                          workload="shared_prefix", workload_kwargs={
                              "num_groups": 2, "prompts_per_group": 3, "system_prompt_len": 48, "question_len": 8,
                              "output_len": 3, "rate": 1000.0}, engine_kwargs={"kv_capacity_tokens": 4_000})
    market = Market(config)
    market.reset(seed=0)
    while not market.done:
        market.step([1.0] * config.num_bidders)
    cluster = market.engine
    assert all(isinstance(e, engine_class) for e in cluster.replicas)
    assert cluster.metrics().finished == 6 and set(cluster.assignment.values()) == {0, 1}
    for e in cluster.replicas:
        e.check_slots()
    # Each group's system prompt is computed once and then read from that replica's cache.
    assert sum(r.cached_tokens for r in cluster.records.values()) >= 2 * 2 * 48


@pytest.mark.parametrize("name", list(ROUTERS))
def test_a_router_given_no_replica_says_so(name):
    router = make_router(name)
    with pytest.raises(ValueError, match="a router needs at least one replica"):
        router.route(req(0, [1, 2, 3]), [], 0.0)
    assert router.route(req(0, [1, 2, 3]), engines(2), 0.0) in (0, 1)  # nothing was left half done


@pytest.mark.parametrize("name,kwargs,named", [
    ("cache_aware", {"cache_threshold": "0.3"}, "cache_threshold"),
    ("cache_aware", {"cache_threshold": None}, "cache_threshold"),
    ("cache_aware", {"balance_rel_threshold": "1.5"}, "balance_rel_threshold"),
    ("cache_aware", {"eviction_interval": "120"}, "eviction_interval"),
    ("kv_overlap", {"overlap_weight": "1"}, "overlap_weight"),
    ("kv_overlap", {"overlap_weight": float("inf")}, "overlap_weight"),
    ("kv_overlap", {"temperature": None}, "temperature"),
])
def test_router_settings_that_are_not_numbers_in_range_are_named(name, kwargs, named):
    with pytest.raises(ValueError, match=named):
        make_router(name, **kwargs)

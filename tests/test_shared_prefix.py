"""SGLang's generated-shared-prefix workload: shape, SGLang's parameters, arrivals, determinism."""

from __future__ import annotations

import itertools
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest

import auction_gym  # noqa: F401  (registers RadixAuction-v0)
from auction_gym import EngineConfig, SimEngine
from auction_gym.workload import SharedPrefixConfig, iter_shared_prefix, shared_prefix_workload
from auction_gym.workload.agentic import in_burst


def fingerprint(reqs) -> list[tuple]:
    return [(r.id, r.bidder, r.arrival, r.tokens.tobytes(), r.output_len, r.urgency, r.value, r.kind) for r in reqs]


def test_sglang_defaults_and_group_structure():
    cfg = SharedPrefixConfig()
    assert (cfg.num_groups, cfg.prompts_per_group, cfg.system_prompt_len, cfg.question_len,
            cfg.output_len, cfg.range_ratio) == (64, 16, 2048, 128, 256, 1.0)
    reqs = shared_prefix_workload(cfg, seed=3)
    assert len(reqs) == 1024 and [r.id for r in reqs] == list(range(1024))
    assert all(r.prompt_len == 2048 + 128 and r.output_len == 256 for r in reqs)
    groups = Counter(r.tokens[:2048].tobytes() for r in reqs)
    assert len(groups) == 64 and set(groups.values()) == {16}
    # A prompt shares exactly its system prompt with its group: questions differ from the start.
    by_group: dict[bytes, list] = {}
    for r in reqs:
        by_group.setdefault(r.tokens[:2048].tobytes(), []).append(r)
    for members in by_group.values():
        questions = {r.tokens[2048:2049].tobytes() for r in members}
        assert len(questions) > 1
        assert len({r.bidder for r in members}) == 1  # a group belongs to one bidder


def test_arrivals_are_shuffled_poisson_at_the_rate():
    reqs = shared_prefix_workload(SharedPrefixConfig(rate=5.0, num_groups=32, prompts_per_group=64), seed=0)
    t = np.array([r.arrival for r in reqs])
    assert np.all(np.diff(t) >= 0)
    rate = (len(t) - 1) / (t[-1] - t[0])
    assert 4.7 < rate < 5.3
    gaps = np.diff(t)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.1  # exponential gaps
    # Shuffled: consecutive arrivals mostly from different groups (1/32 chance each to match).
    heads = [r.tokens[:8].tobytes() for r in reqs]
    assert np.mean([a == b for a, b in zip(heads, heads[1:])]) < 0.1


def test_bidders_own_groups_modulo_and_classes_follow_the_mix():
    cfg = SharedPrefixConfig(num_groups=12, prompts_per_group=200, num_bidders=5,
                             class_mix={"urgent": 0.5, "background": 0.5})
    reqs = shared_prefix_workload(cfg, seed=1)
    per_bidder = Counter(r.bidder for r in reqs)
    # Groups 0..11 to bidders g mod 5: bidders 0 and 1 own three groups, the others two.
    assert sorted(per_bidder.values()) == [400, 400, 400, 600, 600]
    kinds = Counter(r.kind for r in reqs)
    assert set(kinds) == {"urgent", "background"} and abs(kinds["urgent"] / len(reqs) - 0.5) < 0.05
    assert all(r.bid == r.urgency > 0 and r.value > 0 for r in reqs)
    urgent = np.median([r.urgency for r in reqs if r.kind == "urgent"])
    assert 8 < urgent < 12  # the urgent class's median urgency is 10


def test_range_ratio_draws_lengths_as_sglang():
    cfg = SharedPrefixConfig(num_groups=8, prompts_per_group=50, range_ratio=0.5)
    reqs = shared_prefix_workload(cfg, seed=2)
    outs = np.array([r.output_len for r in reqs])
    assert outs.min() >= 128 and outs.max() <= 256 and len(set(outs)) > 50
    prompts = np.array([r.prompt_len for r in reqs])
    assert prompts.min() >= 1024 + 64 and prompts.max() <= 2048 + 128


def test_max_new_tokens_is_the_output_len_as_bench_serving_sends_it():
    """By default each request's cap is its own (drawn) output length; a configured cap replaces it
    for all, and the draws are the same."""
    shape = dict(num_groups=8, prompts_per_group=50, range_ratio=0.5)
    reqs = shared_prefix_workload(SharedPrefixConfig(**shape), seed=4)
    assert len({r.output_len for r in reqs}) > 50
    assert all(type(r.max_new_tokens) is int and r.max_new_tokens == r.output_len for r in reqs)
    capped = shared_prefix_workload(SharedPrefixConfig(**shape, max_new_tokens=np.int64(256)), seed=4)
    assert {(type(r.max_new_tokens), r.max_new_tokens) for r in capped} == {(int, 256)}
    assert fingerprint(capped) == fingerprint(reqs)


def test_stream_equals_list_and_seed_decides():
    cfg = SharedPrefixConfig(num_groups=16, prompts_per_group=40, burst_period=4.0, burst_duration=1.0)
    assert fingerprint(iter_shared_prefix(cfg, seed=9)) == fingerprint(shared_prefix_workload(cfg, seed=9))
    assert fingerprint(shared_prefix_workload(cfg, seed=9)) != fingerprint(shared_prefix_workload(cfg, seed=10))
    first = list(itertools.islice(iter_shared_prefix(cfg, seed=9), 30))
    assert fingerprint(first) == fingerprint(shared_prefix_workload(cfg, seed=9)[:30])


def test_bursts_raise_arrivals_inside_windows():
    cfg = SharedPrefixConfig(num_groups=40, prompts_per_group=100, rate=4.0, burst_period=20.0,
                             burst_duration=5.0, burst_factor=5.0)
    t = np.array([r.arrival for r in shared_prefix_workload(cfg, seed=0)])
    inside = in_burst(t, cfg)
    assert (inside.sum() / 5.0) / ((~inside).sum() / 15.0) > 3.5


@pytest.mark.parametrize("bad", [
    dict(num_groups=0), dict(prompts_per_group=1.5), dict(rate=0.0), dict(rate=float("inf")),
    dict(range_ratio=0.0), dict(range_ratio=1.5), dict(burst_period=2.0, burst_duration=3.0),
    dict(class_mix={"vip": 1.0}), dict(class_mix={"urgent": 0.0}), dict(vocab_size=1),
    dict(max_new_tokens=255), dict(output_len=512, max_new_tokens=300), dict(max_new_tokens=256.0),
    dict(max_new_tokens=True), dict(vocab_size=2.5), dict(burst_period=float("nan")),
    dict(burst_period=10.0, burst_factor=float("inf")),  # drew every arrival at time 0, without end
])
def test_bad_configs_raise(bad):
    with pytest.raises(ValueError):
        iter_shared_prefix(SharedPrefixConfig(**bad))


def test_cache_aware_policies_keep_the_system_prompts_where_fcfs_does_not():
    """The benchmark's point: with 40k KV tokens for 64 system prompts of 2k, the order decides the
    hit rate."""
    reqs = shared_prefix_workload(SharedPrefixConfig(rate=20.0), seed=0)
    hit = {name: SimEngine(name, EngineConfig(kv_capacity_tokens=40_000)).run(reqs).hit_rate
           for name in ("fcfs", "lpm", "radix_vcg")}
    assert hit["lpm"] > 2 * hit["fcfs"]
    assert hit["radix_vcg"] > 0.9 * hit["lpm"]


def test_usable_from_both_envs():
    env = gym.make("RadixAuction-v0", workload="shared_prefix", horizon=20,
                   workload_kwargs={"num_groups": 8, "prompts_per_group": 64, "rate": 20.0})
    obs, _ = env.reset(seed=0)
    total, terminated, truncated = 0, False, False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(np.array([1.0], dtype=np.float32))
        total += info["admitted"]
    assert terminated and total >= 20 and env.observation_space.contains(obs)
    par = auction_gym.parallel_env(workload="shared_prefix", horizon=5, workload_kwargs={"num_groups": 4})
    observations, _ = par.reset(seed=0)
    assert set(observations) == set(par.possible_agents)
    with pytest.raises(ValueError, match="unknown workload_kwargs"):
        gym.make("RadixAuction-v0", workload="shared_prefix", workload_kwargs={"groups": 4})

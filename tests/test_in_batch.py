"""In-batch prefix sharing (SGLang 0.5.23's rule, `auction_gym/engine/in_batch.py`): under `lpm` (and
the policies SGLang does not have) a request that shares an uncached prefix with one ahead of it in
the queue goes behind the others (a batch with room still takes it); `fcfs` and `dfs_weight` keep
their order."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import EngineConfig, Request, SimEngine, scheduler_names
from auction_gym.engine.in_batch import behind, deprioritized, prompt_head
from auction_gym.registry import find_mechanism, get_mechanism
from auction_gym.scheduler.base import in_batch_applies, make_scheduler

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator

SHARED = np.arange(1000, 1600)  # 600 tokens


def siblings(n: int = 2, tail: int = 40) -> list[Request]:
    """n requests arriving together that share SHARED and differ after it."""
    return [Request(i, i % 2, np.concatenate([SHARED, np.arange(tail) + 10_000 * (i + 1)]), 1.0 + i,
                    output_len=5) for i in range(n)]


def with_stranger(prompt: int = 100) -> list[Request]:
    """Two siblings (ids 0, 1) and, arriving after them, a request sharing nothing (id 2)."""
    return [*siblings(), Request(2, 0, np.arange(prompt) + 90_000, 1.0, output_len=5, arrival=0.0)]


def test_lpm_takes_the_sibling_last_in_a_batch_with_room():
    """SGLang: B (sharing 600 uncached tokens with A, ahead of it) sorts behind C; the batch has
    room for all three, so B still computes the shared prefix in the same batch."""
    engine = SimEngine("lpm", EngineConfig())
    engine.submit(with_stranger())
    assert engine.step().admitted == [0, 2, 1]
    assert engine.records[1].cached_tokens == 0


def test_lpm_sibling_behind_the_budget_waits_and_hits_the_cache():
    """Without chunking and with room for two prompts per batch, C goes in with A and B waits for
    the next batch, where A's prompt is cached."""
    engine = SimEngine("lpm", EngineConfig(chunked_prefill_size=None, max_prefill_tokens=800))
    engine.submit(with_stranger())
    assert engine.step().admitted == [0, 2]
    assert engine.step().admitted == [1]
    assert engine.records[1].cached_tokens == len(SHARED)


@pytest.mark.parametrize("name", ["fcfs", "dfs_weight", "strict_vcg"])
def test_fcfs_dfs_weight_and_strict_priority_never_deprioritize(name):
    """SGLang's `fcfs` (with priorities too, strict priority's analogue) never computes the set and
    its `dfs-weight` ignores it: the batch is the one without the rule."""
    assert first_batch(name, True) == first_batch(name, False) and sorted(first_batch(name, True)) == [0, 1, 2]


@pytest.mark.parametrize("name", ["klpm", "radix_vcg"])
def test_cache_aware_policies_sglang_does_not_have_deprioritize_as_lpm_does(name):
    """k-LPM and the radix auction get the rule in `lpm`'s form: the later sibling (1) goes behind."""
    on = first_batch(name, True)
    assert on[-1] == 1 and sorted(on) == [0, 1, 2] and on != first_batch(name, False)


def first_batch(name: str, rule: bool) -> list[int]:
    engine = SimEngine(name, EngineConfig(in_batch_prefix_caching=rule))
    engine.submit(with_stranger())
    return engine.step().admitted


def test_off_and_above_lpms_fcfs_cut_nothing_is_deprioritized():
    for scheduler, config in (("lpm", EngineConfig(in_batch_prefix_caching=False)),
                              (_lpm_cut(2), EngineConfig())):
        engine = SimEngine(scheduler, config)
        engine.submit(with_stranger())
        assert engine.step().admitted == [0, 1, 2]


def _lpm_cut(n: int):
    from auction_gym.scheduler import make_scheduler

    return make_scheduler("lpm", fcfs_above=n)


def test_the_set_compares_whole_prompts_with_earlier_checked_requests():
    """SGLang's `_compute_prefix_matches`: checked when at most `check` tokens are cached; held when
    sharing at least `deprioritize` tokens of its whole prompt with an earlier checked request that
    was not held itself."""
    p = list(range(100, 131))  # 31 tokens
    a, b = Request(0, 0, p + [7], 1.0), Request(1, 0, p + [7, 8], 1.0)

    def head(n):
        return lambda r: prompt_head(r.tokens, n)

    assert deprioritized([a, b], [0, 0], head(32), 32) == {1}  # shares 32 = P + [7]: whole prompts
    assert deprioritized([a, b], [0, 33], head(32), 32) == set()  # b has enough cached: not checked
    assert deprioritized([a, b], [33, 0], head(32), 32) == set()  # a not checked, so not in the tree
    c = Request(2, 0, p + [7, 8, 9], 1.0)
    assert deprioritized([a, b, c], [0, 0, 0], head(33), 32) == {2}  # b shares 32 < 33: it joins, c 33
    assert deprioritized([a, b, c], [0, 0, 0], head(32), 32) == {1, 2}
    assert prompt_head(np.arange(31), 32) is None and prompt_head(np.arange(40), 32) == np.arange(32).tobytes()
    order = [c, b, a]
    assert [r.id for r in behind(order, [a, b, c], {1, 2})] == [0, 1, 2]  # held ones in queue order


@pytest.mark.parametrize("name", scheduler_names())
def test_conservation_and_memory_bound_hold_with_the_rule(name):
    rng = np.random.default_rng(0)
    heads = [rng.integers(0, 32000, 300) for _ in range(5)]
    reqs = [Request(i, i % 3, np.concatenate([heads[i % 5], rng.integers(0, 32000, int(rng.integers(1, 60)))]),
                    float(rng.uniform(0.1, 3.0)), output_len=int(rng.integers(1, 40)), arrival=0.003 * i)
            for i in range(150)]
    engine = SimEngine(name, EngineConfig(kv_capacity_tokens=3000, max_prefill_tokens=1024, max_running_requests=16))
    engine.submit(reqs)
    admitted = []
    while (it := engine.step()) is not None:
        assert engine.used_tokens <= engine.config.kv_capacity_tokens
        admitted += it.admitted
    assert sorted(admitted) == list(range(150))
    for r in reqs:
        rec = engine.records[r.id]
        assert rec.finished and rec.cached_tokens + rec.computed_tokens == r.prompt_len
    assert engine.reserved == 0 and engine.cache.protected_size == 0


@pytest.mark.parametrize("bad", [
    dict(in_batch_check_threshold=-1), dict(in_batch_deprioritize_threshold=0),
    dict(in_batch_prefix_caching=1), dict(in_batch_check_threshold=2.5),
])
def test_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        EngineConfig(**bad)


def test_every_policy_says_whether_the_rule_applies():
    """Each policy declares it (`AdmissionPolicy.in_batch`): SGLang's cache-aware sort (lpm) and the
    cache-aware policies SGLang does not have, not its fcfs or dfs-weight nor strict priority."""
    applies = {name for name in scheduler_names() if make_scheduler(name).in_batch_deprioritizes(5)}
    assert applies == {"lpm", "klpm", "lpm_aging", "radix_vcg"}  # lpm_aging: SGLang's lpm with a new key



def test_the_engine_reads_the_rule_from_the_policy_or_its_registry_entry():
    """`in_batch_applies`: a policy's own `in_batch_deprioritizes` (lpm: not above its FCFS cut of
    128); False for a policy written to the older protocol that declares none."""

    class Unregistered:
        name = "not_a_registered_policy"

        def order(self, queue, cache):
            return list(queue)

    assert [in_batch_applies(make_scheduler(name), 5) for name in ("radix_vcg", "fcfs", "strict_vcg")] == [
        True, False, False]
    cut = make_scheduler("lpm", fcfs_above=128)
    assert in_batch_applies(cut, 128) and not in_batch_applies(cut, 129) and in_batch_applies(make_scheduler("lpm"), 129)
    assert not in_batch_applies(Unregistered(), 5)
    assert find_mechanism(Unregistered.name) is None and find_mechanism("lpm") is get_mechanism("lpm")

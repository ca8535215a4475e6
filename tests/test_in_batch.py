"""In-batch prefix sharing (SGLang's rule): a request that would compute a prefix another request
of the same prefill batch computes waits for the next batch, under every policy."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import EngineConfig, Request, SimEngine, scheduler_names
from auction_gym.engine.in_batch import BatchPrefixes

SHARED = np.arange(1000, 1600)  # 600 tokens


def siblings(n: int = 2, tail: int = 40) -> list[Request]:
    """n requests arriving together that share SHARED and differ after it."""
    return [Request(i, i % 2, np.concatenate([SHARED, np.arange(tail) + 10_000 * (i + 1)]), 1.0 + i,
                    output_len=5) for i in range(n)]


@pytest.mark.parametrize("name", scheduler_names())
def test_shared_uncached_prefix_is_computed_once_over_two_batches(name):
    engine = SimEngine(name, EngineConfig())
    reqs = siblings()
    engine.submit(reqs)
    first = engine.step()
    assert first.kind == "prefill" and len(first.admitted) == 1  # the sibling waits
    second = engine.step()
    assert second.kind == "prefill" and len(second.admitted) == 1
    (a,), (b,) = first.admitted, second.admitted
    ra, rb = engine.records[a], engine.records[b]
    assert ra.cached_tokens == 0 and ra.computed_tokens == ra.prompt_len
    assert rb.cached_tokens == len(SHARED) and rb.computed_tokens == rb.prompt_len - len(SHARED)
    engine.run()
    assert all(rec.finished for rec in engine.records.values())


def test_off_computes_the_prefix_twice_in_one_batch():
    engine = SimEngine("fcfs", EngineConfig(in_batch_prefix_caching=False))
    engine.submit(siblings())
    it = engine.step()
    assert len(it.admitted) == 2
    assert all(engine.records[i].cached_tokens == 0 for i in it.admitted)


def test_thresholds_decide_who_is_checked_and_who_waits():
    """Checked only with at most `check` cached tokens; held only when sharing at least
    `deprioritize` tokens beyond them."""
    batch = BatchPrefixes(check=32, deprioritize=32, page_size=1)
    taken = np.arange(100)
    assert not batch.holds(taken, cached=0)  # the first of a batch is never held
    batch.add(taken)
    assert batch.holds(np.arange(100), cached=0)
    assert batch.holds(np.concatenate([np.arange(40), [7, 7]]), cached=8)  # 40 - 8 = 32 beyond
    assert not batch.holds(np.concatenate([np.arange(39), [7, 7]]), cached=8)  # 31 beyond
    assert not batch.holds(np.arange(100), cached=33)  # enough is cached: not checked
    batch.add(np.arange(500, 600))
    assert batch.holds(np.arange(500, 560), cached=0)  # prompts added after the tree was built count
    # With pages only whole shared pages count: 45 shared tokens are 2 pages of 16, 32 < 40.
    paged, flat = (BatchPrefixes(check=32, deprioritize=40, page_size=p) for p in (16, 1))
    for b in (paged, flat):
        b.add(np.arange(100))
    assert flat.holds(np.concatenate([np.arange(45), [7]]), cached=0)
    assert not paged.holds(np.concatenate([np.arange(45), [7]]), cached=0)
    assert paged.holds(np.concatenate([np.arange(48), [7]]), cached=0)


def test_a_short_shared_prefix_does_not_hold():
    prefix = np.arange(20)
    reqs = [Request(i, 0, np.concatenate([prefix, [100 + i] * 50]), 1.0, output_len=3) for i in range(2)]
    engine = SimEngine("fcfs", EngineConfig())
    engine.submit(reqs)
    assert len(engine.step().admitted) == 2  # 20 shared tokens < 32: both in one batch


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

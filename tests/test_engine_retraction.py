"""Retraction and chunked prefill keep the engine's books (serving_engine.py): under every scheduler,
on random workloads in a pool small enough that decode runs out of memory, the memory invariant
holds after every step, no token is counted twice, the cache's locks are exactly those of the
requests in flight, no request is lost or in two places, and a retracted request keeps its first
token time. The "oracle" reservation is the control: it never retracts. A TorchEngine run checks
the same on real KV slots, with outputs known in advance so they must come out exact."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from auction_gym import Request
from auction_gym.engine import EngineConfig, Iteration, ServingEngine
from auction_gym.engine.sim_engine import PythonSimEngine
from auction_gym.radix_cache import TreeNode
from auction_gym.scheduler import scheduler_names

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator

VOCAB = 32_000  # the tiny preset's vocabulary, so the same requests run on the torch engine
MAX_STEPS = 20_000  # a run of these workloads takes a few hundred steps; more means a livelock


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Request], EngineConfig]:
    """A few requests whose prompts branch off shared random prefixes, with outputs long enough,
    and a KV pool small enough, that a running batch outgrows memory; caps are the true output
    (the ratio then under-reserves) or above it."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    page = draw(st.sampled_from([1, 4]))
    prefixes = [rng.integers(0, VOCAB, int(rng.integers(0, 40))) for _ in range(draw(st.integers(1, 3)))]
    # A burst (all at 0) packs the batch, as retraction needs; otherwise arrivals overlap a little.
    gap = draw(st.sampled_from([0.0, 0.002, 0.02]))
    base_out = draw(st.integers(30, 80))
    requests, own = [], []
    # Sizes come from the seed, not from hypothesis, which favours the smallest (one request at a
    # time never retracts).
    for i in range(int(rng.integers(3, 17))):
        unique = rng.integers(0, VOCAB, int(rng.integers(1, 12)))
        prompt = np.concatenate([prefixes[rng.integers(len(prefixes))], unique])
        # Retraction needs long outputs of similar length (short ones finish and free memory);
        # a few short ones still come and go.
        out = int(rng.integers(1, 10)) if rng.random() < 0.1 else base_out + int(rng.integers(-5, 5))
        cap = out if rng.random() < 0.7 else out + int(rng.integers(1, 40))
        requests.append(Request(id=i, bidder=int(rng.integers(3)), tokens=prompt, bid=float(rng.random()),
                                output_len=out, max_new_tokens=cap, arrival=float(rng.exponential(gap) * i),
                                value=float(rng.random())))
        own.append(len(unique) + out)
    # The ratio's 30% under-reservation only overflows memory when some 4 or more requests run
    # together, so the pool holds several requests' own tokens (beyond the shared prefixes); now
    # and then one request does not fit at all, so rejection is exercised too.
    longest = max(r.prompt_len + r.output_len for r in requests)
    capacity = max(int(np.mean(own) * rng.uniform(3, 9)), longest - 10, 8)
    chunk = draw(st.sampled_from([None, 8, 16, 32]))
    if chunk is not None:
        chunk = max(chunk - chunk % page, page)
    config = EngineConfig(kv_capacity_tokens=capacity, page_size=page, chunked_prefill_size=chunk,
                          max_prefill_tokens=draw(st.integers(max(page, 16), 128)),
                          max_running_requests=int(rng.choice([16, 8, 3])),
                          retract_decode_steps=draw(st.integers(0, 20)))
    return requests, config


def _path(node: TreeNode) -> list[TreeNode]:
    """The nodes from `node` up to the root's child."""
    path = []
    while node.parent is not None:
        path.append(node)
        node = node.parent
    return path


@dataclass
class Ledger:
    """What the checker remembers between steps: times that may be set only once, and retractions."""

    admit: dict[int, float] = field(default_factory=dict)
    first_token: dict[int, float] = field(default_factory=dict)
    retracted: set[int] = field(default_factory=set)
    retractions: int = 0


def check_books(engine: ServingEngine, it: Iteration, ledger: Ledger) -> None:
    """The engine's state after a step is consistent (see module docstring)."""
    cfg, cache = engine.config, engine.cache
    assert cache.total_size + engine.reserved <= cfg.kv_capacity_tokens
    sglang = cfg.reservation == "sglang"
    # What each running request holds outside the cache, from its sequence and its node alone: the
    # tokens past the cached prefix (a partial last page), the decode tokens allocated since it
    # joined (sglang), or its whole output from admission on (oracle).
    expected = 0
    for run in engine.running:
        r, recomputed = run.request, run.emitted - 1
        outside = r.prompt_len + recomputed - run.node.depth
        assert 0 <= outside < cfg.page_size and run.node.alive
        if sglang:
            expected += outside + engine._steps - run.first_step
        else:
            expected += outside + r.output_len - recomputed
    chunked = engine._chunked
    if chunked is not None:  # its chunks are in the cache; under oracle its output is held already
        assert chunked.end < len(chunked.tokens) and chunked.node.depth == chunked.end
        expected += chunked.held
    assert engine.reserved == expected, "a token is reserved twice, or reserved by nobody"
    # Locks: exactly one reference per running request, and one for the chunked request, on each
    # node of its path.
    # Keyed by node, not id(): a compiled cache's node is the same Python object only while one is held.
    refs: dict = {}
    holders = [run.node for run in engine.running] + ([chunked.node] if chunked is not None else [])
    for node in holders:
        for n in _path(node):
            refs[n] = refs.get(n, 0) + 1
    for n in cache.nodes():
        assert n.lock_ref == refs.get(n, 0), "a lock is held by no request in flight, or missing"
    cache.check()  # sizes (protected = locked edges), lock counts along paths, eviction heaps
    engine.queue.check()
    # Every request in at most one place; every one not done is somewhere.
    waiting = [r.id for r in engine.waiting]
    running = [run.request.id for run in engine.running]
    flight = [chunked.request.id] if chunked is not None else []
    places = waiting + running + flight
    assert len(places) == len(set(places)), "a request is in two places"
    assert len(running) <= cfg.max_running_requests
    sent_back = it.retracted + it.preempted  # a priority preemption is a retraction, as in SGLang
    assert set(sent_back) <= set(waiting), "a retracted request is not waiting again"
    assert set(it.resumed) <= ledger.retracted, "a request resumed that was never retracted"
    ledger.retracted |= set(sent_back)
    ledger.retractions += len(sent_back)
    for rid, rec in engine.records.items():
        for name, seen in (("admit", ledger.admit), ("first_token", ledger.first_token)):
            t = getattr(rec, name)
            if not math.isnan(t):
                assert seen.setdefault(rid, t) == t, f"request {rid}: {name} set twice"


def replay(engine: ServingEngine, requests: list[Request]) -> Ledger:
    """Step `engine` through `requests`, checking its books after every step, and its end state."""
    engine.submit(requests)
    ledger = Ledger()
    for _ in range(MAX_STEPS):
        it = engine.step()
        if it is None:
            break
        check_books(engine, it, ledger)
    else:
        raise AssertionError(f"no end after {MAX_STEPS} steps")
    assert engine.reserved == 0 and engine.cache.protected_size == 0
    assert not engine.waiting and not engine.running and engine._chunked is None
    for rec in engine.records.values():
        if rec.rejected is not None:
            assert rec.rejected and math.isnan(rec.admit)
            continue
        assert rec.finished, f"request {rec.id} was lost"
        assert rec.arrival <= rec.admit <= rec.first_token <= rec.finish
        assert rec.first_token == ledger.first_token[rec.id]
    assert engine.metrics().retractions == ledger.retractions == sum(r.retractions for r in engine.records.values())
    return ledger


RETRACTED: list[bool] = []
"""Whether each sglang run of the property test retracted (a share of them must)."""


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_books_balance_under_retraction_for_every_scheduler(workload):
    requests, config = workload
    for scheduler in scheduler_names():
        for reservation in ("sglang", "oracle"):
            cfg = replace(config, reservation=reservation)
            ledger = replay(PythonSimEngine(scheduler, cfg), requests)
            if reservation == "oracle":
                assert ledger.retractions == 0
            else:
                RETRACTED.append(ledger.retractions > 0)
                note(f"{scheduler}: {ledger.retractions} retractions")


def test_property_runs_exercise_retraction():
    """The property test is only as good as its share of runs that retract (runs after it): about
    7% of 600 (with the waiting-prefix refresh; 16% before it), so 4% leaves room for chance."""
    if not RETRACTED:
        pytest.skip("run together with the property test")
    assert sum(RETRACTED) >= 0.04 * len(RETRACTED), f"{sum(RETRACTED)} of {len(RETRACTED)} runs retracted"


def _crowded(n: int = 6, prompt: int = 20, out: int = 50, seed: int = 0) -> list[Request]:
    """n requests at once whose outputs, as the ratio under-reserves them, outgrow a 250-token pool."""
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, VOCAB, prompt // 2)
    return [Request(id=i, bidder=i % 2, tokens=np.concatenate([shared, rng.integers(0, VOCAB, prompt - prompt // 2)]),
                    bid=1.0 + i, output_len=out, output_tokens=rng.integers(0, VOCAB, out)) for i in range(n)]


@pytest.mark.parametrize("scheduler", scheduler_names())
def test_crowded_pool_retracts_and_finishes(scheduler):
    cfg = EngineConfig(kv_capacity_tokens=250, chunked_prefill_size=8, max_prefill_tokens=64)
    engine = PythonSimEngine(scheduler, cfg)
    ledger = replay(engine, _crowded())
    assert ledger.retractions > 0 and engine.metrics().retractions == ledger.retractions
    assert engine.metrics().finished == 6
    oracle = PythonSimEngine(scheduler, replace(cfg, reservation="oracle"))
    assert replay(oracle, _crowded()).retractions == 0


def test_torch_engine_retracts_chunks_and_reproduces_known_outputs():
    """Real KV slots: retracted requests recompute prompt + output so far in chunks, and their
    teacher-forced outputs come out exactly, with every slot owned once after every step."""
    torch = pytest.importorskip("torch")
    from gpu_backend import TorchEngine, build_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls on a shared CPU: one thread is fastest
    try:
        model = build_model("tiny", device="cpu", dtype=torch.float32, seed=0)
        requests = _crowded(n=6, prompt=40, out=60, seed=1)
        cfg = EngineConfig(kv_capacity_tokens=300, page_size=4, chunked_prefill_size=16, max_prefill_tokens=64)
        engine = TorchEngine("lpm", cfg, model=model)
        engine.submit(requests)
        ledger, chunks = Ledger(), 0
        while (it := engine.step()) is not None:
            engine.check_slots()
            check_books(engine, it, ledger)
            chunks += engine._chunked is not None
    finally:
        torch.set_num_threads(threads)
    assert ledger.retractions > 0 and chunks > 0
    assert engine.metrics().finished == len(requests) and engine.reserved == 0
    for r in requests:
        np.testing.assert_array_equal(engine.outputs[r.id], r.output_tokens)

"""The compiled engine (`auction_gym.engine.sim_engine.CompiledSimEngine`, csrc/engine*.cpp) against the Python
one, step by step: random configs (both rule sets, chunked prefill on and off, pages of 1 and 4
tokens, pools small enough to retract and evict, in-batch on and off, LRU and priority eviction,
small and large running batches) x random workloads x policies (without money, an auction with
random multipliers each step, posted prices, a priority order, a Python policy of the test's own).

The reference is the Python engine built on the same compiled cache and waiting prefixes
(`PythonSimEngine`), so every cache node's fields can be compared
after every step; a run of the Python core whole checks the records end to end."""

from __future__ import annotations

import math
from dataclasses import astuple, fields

import numpy as np
import pytest
from workloads import branching_workload

from auction_gym import Request, core
from auction_gym.engine import CostModel, EngineConfig, Iteration, SimEngine
from auction_gym.engine.sim_engine import CompiledSimEngine, PythonSimEngine
from auction_gym.policy import AdmissionPolicy, WaitingRound
from auction_gym.registry import make_scheduler
from auction_gym.workload import AgenticConfig, agentic_workload

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core is not built")

BIDDERS = 3
MAX_STEPS = 20_000


class LongestFirst(AdmissionPolicy):
    """A policy of the test's own: longest prompt first, sorted in place, in-batch rule on."""

    name = "longest_first"
    sorts_in_place = True
    in_batch = True

    def order_round(self, round: WaitingRound) -> list[Request]:
        lens = dict(zip(map(id, round.queue), round.prefix_lens))
        return sorted(round.queue, key=lambda r: (lens[id(r)] - r.prompt_len, r.id))


def burst_workload(rng: np.random.Generator) -> list[Request]:
    """Requests branching off shared prefixes in a burst, with long outputs of similar length: a
    batch that outgrows a small pool and retracts (caps at or above the true output)."""
    prefixes = [rng.integers(0, 500, int(rng.integers(0, 40))) for _ in range(int(rng.integers(1, 4)))]
    gap, base_out, out = float(rng.choice([0.0, 0.002, 0.02])), int(rng.integers(30, 80)), []
    for i in range(int(rng.integers(6, 24))):
        prompt = np.concatenate([prefixes[rng.integers(len(prefixes))], rng.integers(0, 500, int(rng.integers(1, 12)))])
        n = int(rng.integers(1, 10)) if rng.random() < 0.1 else base_out + int(rng.integers(-5, 5))
        cap = n if rng.random() < 0.7 else n + int(rng.integers(1, 40))
        known = rng.integers(0, 500, n) if rng.random() < 0.3 else None
        out.append(Request(id=i, bidder=int(rng.integers(BIDDERS)), tokens=prompt, bid=float(rng.random()),
                           output_len=n, max_new_tokens=cap, arrival=float(rng.exponential(gap) * i),
                           value=float(rng.random()), output_tokens=known))
    return out


def random_config(rng: np.random.Generator, requests: list[Request]) -> EngineConfig:
    page = int(rng.choice([1, 4]))
    chunk = rng.choice([0, 8, 16, 32])
    own = np.mean([r.output_len + 8 for r in requests])  # beyond the shared prefixes, roughly
    longest = max(r.prompt_len + r.output_len for r in requests)
    return EngineConfig(
        kv_capacity_tokens=max(int(own * rng.uniform(3, 9)), longest - 10, 8 * page),
        page_size=page, chunked_prefill_size=None if not chunk else max(int(chunk) - int(chunk) % page, page),
        max_prefill_tokens=int(rng.integers(max(page, 16), 128)),
        max_running_requests=int(rng.choice([3, 8, 16, 256])),
        reservation="sglang" if rng.random() < 0.7 else "oracle", retract_decode_steps=int(rng.integers(0, 20)),
        in_batch_prefix_caching=bool(rng.random() < 0.5), in_batch_check_threshold=int(rng.choice([0, 8, 32])),
        in_batch_deprioritize_threshold=int(rng.choice([4, 32])),
        radix_eviction_policy=str(rng.choice(["lru", "priority"])), clip_max_new_tokens=int(rng.choice([30, 4096])),
        cost_model=CostModel(decode_per_context_token=float(rng.choice([4.9e-8, 0.0, 3e-6])),
                             decode_knee=float(rng.choice([0.0, 4.0, 64.0])), decode_per_request_to_knee=2e-4),
    )


def policy(name: str):
    return LongestFirst() if name == "longest_first" else make_scheduler(name)


def same_decision(a, b) -> None:
    assert type(a) is type(b)
    if a is None:
        return
    assert [r.id for r in a.admission_order()] == [r.id for r in b.admission_order()]
    assert dict(a.priorities) == dict(b.priorities) and tuple(a.prices) == tuple(b.prices)


def same_iteration(a: Iteration, b: Iteration) -> None:
    for f in fields(Iteration):
        if f.name != "decision":
            assert getattr(a, f.name) == getattr(b, f.name), f.name
    same_decision(a.decision, b.decision)


def record_tuple(record) -> tuple:
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in astuple(record))


def cache_state(cache) -> list[tuple]:
    return [(n.depth, len(n), n.lock_ref, n.last_access, n.wait, n.priority) for n in cache.nodes()]


def replay_side_by_side(requests: list[Request], config: EngineConfig, name: str, seed: int) -> dict[int, int]:
    """Step the reference and the compiled engine with the same inputs, comparing everything after
    every step; returns the compiled engine's retractions per request id."""
    with core.use("compiled"):
        ref, out = PythonSimEngine(policy(name), config), SimEngine(policy(name), config)
    assert isinstance(out, CompiledSimEngine)
    ref.submit(requests)
    out.submit(iter(sorted(requests, key=lambda r: (r.arrival, r.id))))  # the lazily read path
    rng = np.random.default_rng(seed)
    for _ in range(MAX_STEPS):
        multipliers = rng.uniform(0, 2, BIDDERS).tolist() if rng.random() < 0.8 else None
        remaining = rng.uniform(0, 5, BIDDERS).tolist() if rng.random() < 0.5 else None
        a, b = ref.step(multipliers, remaining), out.step(multipliers, remaining)
        assert (a is None) == (b is None)
        if a is None:
            break
        same_iteration(a, b)
        assert (ref.now, ref.reserved, ref.new_token_ratio, ref.used_tokens, ref.active_tokens) == (
            out.now, out.reserved, out.new_token_ratio, out.used_tokens, out.active_tokens)
        assert [r.id for r in ref.waiting] == [r.id for r in out.waiting]
        assert [r.id for r in ref.in_system()] == [r.id for r in out.in_system()]
        assert [run.request.id for run in ref.running] == [r.id for r in out.running]
        assert (ref.cache.total_size, ref.cache.protected_size) == (out.cache.total_size, out.cache.protected_size)
        assert cache_state(ref.cache) == cache_state(out.cache)
    else:
        raise AssertionError("the run did not end")
    assert ref.records.keys() == out.records.keys()
    for rid in ref.records:
        assert record_tuple(ref.records[rid]) == record_tuple(out.records[rid]), rid
    assert [s.tolist() for s in ref.cache.sequences()] == [s.tolist() for s in out.cache.sequences()]
    return {rid: rec.retractions for rid, rec in out.records.items()}


POLICIES = ["fcfs", "lpm", "radix_vcg", "tiers", "sglang_priority", "longest_first"]


@pytest.mark.parametrize("name", POLICIES)
def test_compiled_engine_matches_python_engine(name: str) -> None:
    rng = np.random.default_rng(POLICIES.index(name))
    retracted = 0
    for case in range(24):
        seed = int(rng.integers(2**32))
        draw = np.random.default_rng(seed)
        kind = case % 3
        if kind == 0:
            requests = burst_workload(draw)
        elif kind == 1:
            requests = branching_workload(seed % 1000, n=60)
        else:
            requests = agentic_workload(AgenticConfig(num_bidders=BIDDERS, num_requests=40, rate=200.0), seed=seed % 1000)
        config = random_config(draw, requests)
        retractions = replay_side_by_side(requests, config, name, seed)
        retracted += sum(retractions.values())
    assert retracted > 0, "no scenario retracted a request: the test no longer exercises retraction"


@pytest.mark.parametrize("name", ["lpm", "radix_vcg"])
def test_compiled_engine_matches_python_core(name: str) -> None:
    """The whole Python core (cache and waiting prefixes too) against the compiled engine: the
    same iterations' times and the same records."""
    rng = np.random.default_rng(7)
    for _ in range(4):
        requests = burst_workload(rng)
        config = random_config(rng, requests)
        runs = []
        for which in core.CORES:
            with core.use(which):
                engine = SimEngine(policy(name), config)
            engine.submit(requests)
            steps = []
            while (it := engine.step([1.0] * BIDDERS)) is not None:
                steps.append((it.kind, it.start, it.end, it.admitted, it.finished, it.retracted, it.resumed))
            runs.append((steps, [record_tuple(engine.records[i]) for i in sorted(engine.records)]))
        assert runs[0] == runs[1]


def test_compiled_engine_is_chosen_where_it_runs() -> None:
    with core.use("compiled"):
        assert type(SimEngine("fcfs")) is CompiledSimEngine
        assert type(SimEngine("fcfs", EngineConfig(priority_preemption=True))) is SimEngine
        assert type(PythonSimEngine("fcfs")) is PythonSimEngine
        # counts the compiled engine cannot hold as 64-bit ints: an integral float, one past 64 bits
        for config in (EngineConfig(kv_capacity_tokens=10000.0), EngineConfig(max_running_requests=2**63),
                       EngineConfig(chunked_prefill_size=512.0)):
            engine = SimEngine("fcfs", config)
            assert type(engine) is SimEngine
            engine.run([Request(0, 0, np.arange(4), output_len=3)])
            assert engine.records[0].finish > 0
    with core.use("python"):
        assert type(SimEngine("fcfs")) is SimEngine


def test_compiled_engine_errors() -> None:
    with core.use("compiled"):
        engine = SimEngine("fcfs")
        r = Request(1, 0, np.arange(4), output_len=2)
        engine.submit([r])
        with pytest.raises(ValueError, match="request 1: duplicate request id"):
            engine.submit(r)
        unsorted = [Request(2, 0, np.arange(4), arrival=1.0), Request(3, 0, np.arange(4), arrival=0.5)]
        engine.submit(iter(unsorted))
        with pytest.raises(ValueError, match=r"request 3: lazily read workloads must be sorted by arrival \(0.5 after 1.0\)"):
            engine.run()

        class Short(AdmissionPolicy):
            name = "short"

            def order_round(self, round: WaitingRound) -> list[Request]:
                return list(round.queue)[1:]

        engine = SimEngine(Short())
        engine.submit([Request(i, 0, np.arange(4)) for i in range(3)])
        with pytest.raises(RuntimeError, match="scheduler 'short' returned 2 of 3 requests"):
            engine.step()


def test_an_engine_in_a_reference_cycle_is_collected() -> None:
    """A policy that holds its engine makes a cycle through the compiled engine, which the garbage
    collector sees (the engine's owner is freed with it)."""
    import gc
    import weakref

    with core.use("compiled"):
        engine = SimEngine("fcfs")
    engine.scheduler.engine = engine
    engine.submit(iter([Request(1, 0, np.arange(5), output_len=3)]))
    engine.step()
    ref = weakref.ref(engine)
    del engine
    gc.collect()
    assert ref() is None


def both_engines(scheduler=lambda: "fcfs", config=None) -> list[SimEngine]:
    """The compiled engine and the Python one on the same compiled cache, each with its own policy."""
    with core.use("compiled"):
        return [CompiledSimEngine(scheduler(), config), PythonSimEngine(scheduler(), config)]


class Repeats(AdmissionPolicy):
    """A broken policy: its order names the first waiting request for every place."""

    name = "repeats"

    def order_round(self, round: WaitingRound) -> list[Request]:
        return [round.queue[0]] * len(round.queue)


def test_an_order_that_is_not_a_permutation_is_refused() -> None:
    """A request ordered twice would be admitted twice (the compiled engine read freed state):
    both engines refuse the order with the same error, before admitting anything."""
    for engine in both_engines(Repeats):
        engine.submit([Request(i, 0, np.arange(i, i + 4), output_len=3) for i in range(3)])
        with pytest.raises(RuntimeError, match="scheduler 'repeats' returned an order that is not a permutation"):
            engine.step()
        assert len(engine.waiting) == 3 and not engine.running


def finished_records(engine: SimEngine) -> dict:
    """Every record's fields after the engine ran its workload to the end."""
    engine.run()
    return {rid: record_tuple(rec) for rid, rec in engine.records.items()}


def test_a_strided_reply_is_read_as_the_python_engine_reads_it() -> None:
    """A read-only reply that is a strided view (every other token of a frozen array) is cached as
    its tokens, not refused mid-retirement."""
    base = np.arange(100, 140)
    base.flags.writeable = False
    runs = []
    for engine in both_engines():
        engine.submit([Request(i, 0, np.arange(i, i + 6), output_len=20, output_tokens=base[i % 2::2])
                       for i in range(2)])
        runs.append((finished_records(engine), cache_state(engine.cache)))
    assert runs[0] == runs[1]


def test_arrivals_due_out_of_order_wait_in_arrival_order() -> None:
    """Requests submitted as a list and read lazily can fall due in one step out of arrival order
    (the list's, then the lazy ones' that came earlier): both engines queue them by (arrival, id)."""
    config = EngineConfig(cost_model=CostModel(prefill_base=5.0))  # the first prefill ends past them all
    runs = []
    for engine in both_engines(config=config):
        engine.submit([Request(0, 0, np.arange(4), output_len=3), Request(1, 0, np.arange(10, 14), arrival=2.0)])
        engine.submit(iter([Request(3, 0, np.arange(20, 24), arrival=1.0), Request(2, 0, np.arange(30, 34),
                                                                                   arrival=1.5)]))
        first, second = engine.step(), engine.step()
        runs.append((first.admitted, second.admitted, finished_records(engine)))
    assert runs[0] == runs[1]
    assert runs[0][:2] == ([0], [3, 2, 1])


@pytest.mark.parametrize("later", [1e18, 1e300])
def test_an_arrival_far_ahead_bounds_the_decode_count(later: float) -> None:
    """Decoding until an arrival further off than 2**62 steps counts 2**62 of them at most (no
    step count past it in either engine: the compiled one overflowed, the Python one counted down
    one at a time); the running request's finish comes first either way."""
    config = EngineConfig(cost_model=CostModel(decode_per_context_token=0.0))
    runs = []
    for engine in both_engines(config=config):
        engine.submit([Request(0, 0, np.arange(4), output_len=5), Request(1, 0, np.arange(4, 8), arrival=later)])
        runs.append(finished_records(engine))
        assert engine.records[1].admit == later  # admitted when it arrived
    assert runs[0] == runs[1]


@pytest.mark.parametrize("decode", [{"decode_base": 1e-320}, {"decode_per_request": 1e-320},
                                    {"decode_per_request": 1e-320, "decode_per_context_token": 1e-320}])
def test_nearly_free_decode_steps_run_alike(decode: dict) -> None:
    """A decode step so cheap (the config refuses a free one) that the step count to the next
    arrival overflows a float decodes on to the next finish in both engines (the Python one
    rounded an infinite count before)."""
    zero = {"decode_base": 0.0, "decode_per_request": 0.0, "decode_per_context_token": 0.0,
            "decode_per_request_to_knee": 0.0}
    config = EngineConfig(cost_model=CostModel(**{**zero, **decode}))
    runs = []
    for engine in both_engines(config=config):
        engine.submit([Request(0, 0, np.arange(4), output_len=5), Request(1, 0, np.arange(4, 8), arrival=3.0)])
        runs.append(finished_records(engine))
        assert engine.records[0].finish < 3.0 <= engine.records[1].admit
    assert runs[0] == runs[1]


@pytest.mark.parametrize("rid", [2**39 - 2**16, 2**39, -(2**39) - 2**16, -(2**40)])
def test_a_synthetic_reply_past_int64_raises_overflow(rid: int) -> None:
    """The made-up reply of a request without output_tokens starts at 2**40 + (id << 24): where that
    start is past int64, both engines raise OverflowError when it finishes (numpy's arange
    refuses it; the compiled engine's arithmetic overflowed); elsewhere both run it."""
    fits = -(2**63) <= 2**40 + (rid << 24) < 2**63
    runs = []
    for engine in both_engines():
        engine.submit(Request(rid, 0, np.arange(4), output_len=3))
        if fits:
            runs.append((finished_records(engine), cache_state(engine.cache)))
        else:
            with pytest.raises(OverflowError):
                engine.run()
    assert not runs or runs[0] == runs[1]


class Replies(AdmissionPolicy):
    """A policy whose `admit` replies with `reply(order)` in place of the pair (order, None)."""

    name = "replies"

    def __init__(self, reply) -> None:
        self.reply = reply

    def admit(self, round: WaitingRound):
        return self.reply(list(round.queue))


@pytest.mark.parametrize("reply", [lambda order: [order, None], lambda order: iter((order, None)),
                                   lambda order: (order, None, None), lambda order: (order,), lambda order: 7])
def test_an_admit_reply_is_unpacked_as_python_unpacks_it(reply) -> None:
    """A reply that is not a tuple of two is unpacked as `order, decision = reply` unpacks it: any
    iterable of two runs, anything else raises Python's own error in both engines (the compiled
    one read its first two items, whatever it was)."""
    outcomes = []
    for engine in both_engines(lambda: Replies(reply)):
        engine.submit([Request(i, 0, np.arange(i, i + 4), output_len=3) for i in range(3)])
        try:
            outcomes.append(finished_records(engine))
        except (TypeError, ValueError) as e:
            outcomes.append((type(e), str(e)))
    assert outcomes[0] == outcomes[1]


class Truthy(LongestFirst):
    """A policy whose flags are truthy values that are not bools, as Python's `if` reads them."""

    name = "truthy"
    sorts_in_place = 1

    def in_batch_deprioritizes(self, waiting: int):
        return np.bool_(True) if waiting > 2 else None


def test_a_policy_flag_is_read_by_its_truth() -> None:
    config = EngineConfig(in_batch_prefix_caching=True, in_batch_check_threshold=64,
                          in_batch_deprioritize_threshold=4, max_prefill_tokens=16)
    runs = []
    for engine in both_engines(Truthy, config):
        engine.submit([Request(i, 0, np.concatenate([np.arange(8), np.arange(i, i + 4)]), output_len=3)
                       for i in range(5)])
        runs.append((finished_records(engine), cache_state(engine.cache)))
    assert runs[0] == runs[1]


def test_request_counts_past_int64_run_as_in_python() -> None:
    """A cap past int64 only bounds the output (the config's room binds); an output_len past it
    is rejected, the rejection counting it as given."""
    runs = []
    for engine in both_engines():
        engine.submit([Request(0, 0, np.arange(4), output_len=3, max_new_tokens=2**64),
                       Request(1, 0, np.arange(4, 8), output_len=2**64)])
        runs.append(finished_records(engine))
        assert f"prompt + output = {2**64 + 4} tokens" in engine.records[1].rejected
    assert runs[0] == runs[1]


@pytest.mark.parametrize("entry", [None, "oops", {"id": 1}])
def test_a_lazy_workload_yielding_a_non_request_is_refused_where_the_clock_reaches_it(entry: object) -> None:
    """An entry of a lazily read workload that is not a Request, None included (the stream's end is
    its exhaustion; a None ending it would lose the requests after it unseen), raises TypeError from
    the step that reads it, on both engines alike, and the stream ends there."""
    for engine in both_engines():
        engine.submit(iter([Request(0, 0, np.arange(4), output_len=3), entry,
                            Request(1, 0, np.arange(4, 8), output_len=3, arrival=1.0)]))
        with pytest.raises(TypeError, match=f"a lazily read workload must yield Request objects, got "
                                            f"{type(entry).__name__} "):
            engine.run()
        assert list(engine.records) == [0] and engine.arrivals.pending == 0


class Outsider(AdmissionPolicy):
    """A broken policy: its order puts a request that does not wait in the first place."""

    name = "outsider"

    def order_round(self, round: WaitingRound) -> list[Request]:
        return [Request(99, 0, np.arange(4), output_len=3)] + list(round.queue)[1:]


def test_an_order_holding_a_request_that_does_not_wait_is_refused() -> None:
    for engine in both_engines(Outsider):
        engine.submit([Request(i, 0, np.arange(i, i + 4), output_len=3) for i in range(3)])
        with pytest.raises(RuntimeError, match="scheduler 'outsider' returned an order that is not a permutation"):
            engine.step()
        assert [r.id for r in engine.waiting] == [0, 1, 2] and not engine.running


class Fickle(LongestFirst):
    """A policy whose flags change from round to round, and that raises in one round: the engine
    reads them every round, as the Python engine does, and a raising round leaves both alike."""

    name = "fickle"

    def __init__(self) -> None:
        self.rounds = 0

    def order_round(self, round: WaitingRound) -> list[Request]:
        self.rounds += 1
        if self.rounds == 4:
            raise KeyError("fickle")
        self.sorts_in_place = self.rounds % 3 != 0
        return super().order_round(round) if self.rounds % 2 else list(round.queue)[::-1]

    def in_batch_deprioritizes(self, waiting: int) -> bool:
        return self.rounds % 4 < 2


def test_flags_read_every_round_and_a_raising_round_run_as_in_python() -> None:
    config = EngineConfig(in_batch_prefix_caching=True, in_batch_check_threshold=64, in_batch_deprioritize_threshold=4,
                          max_prefill_tokens=24, chunked_prefill_size=None)
    rng = np.random.default_rng(7)
    heads = [rng.integers(0, 50, 6) for _ in range(3)]
    requests = [Request(i, 0, np.concatenate([heads[i % 3], rng.integers(0, 50, int(rng.integers(2, 9)))]),
                        output_len=int(rng.integers(1, 6)), arrival=0.001 * (i // 4)) for i in range(24)]
    engines = both_engines(Fickle, config)
    steps = []
    for engine in engines:
        engine.submit(requests)
        seen = []
        for _ in range(500):
            try:
                it = engine.step()
            except KeyError:
                seen.append("raised")
                continue
            if it is None:
                break
            seen.append((it.kind, it.admitted, it.finished, [r.id for r in engine.waiting]))
        assert all(rec.finish > 0 for rec in engine.records.values())
        steps.append((seen, {rid: record_tuple(rec) for rid, rec in engine.records.items()}))
    assert steps[0] == steps[1] and "raised" in steps[0][0]


class Swapper(AdmissionPolicy):
    """A broken policy: it puts a request of its own in the waiting list the round hands it, and
    orders the requests that waited."""

    name = "swapper"
    in_batch = True

    def order_round(self, round: WaitingRound) -> list[Request]:
        order = list(round.queue)
        round.queue[0] = Request(99, 0, np.arange(50, 54), output_len=3)
        return order


def test_a_waiting_list_the_policy_changed_is_refused() -> None:
    """The order is compared with the waiting list as the policy left it, as Python compares it:
    refused in both engines (the compiled one read the list's stranger as a request it held), and
    the next round raises rather than reading it."""
    config = EngineConfig(in_batch_prefix_caching=True, in_batch_check_threshold=64, in_batch_deprioritize_threshold=2)
    for engine in both_engines(Swapper, config):
        engine.submit([Request(i, 0, np.array([1, 2, 3, 4 + i]), output_len=3) for i in range(3)])
        with pytest.raises(RuntimeError, match="scheduler 'swapper' returned an order that is not a permutation"):
            engine.step()
        with pytest.raises((KeyError, RuntimeError)):
            engine.step()


class Flip:
    """An order that is not a list, read otherwise the second time: a stranger in the first place
    (and, with `waiting`, in that list's too)."""

    def __init__(self, requests: list[Request], waiting: list[Request] | None = None) -> None:
        self.requests, self.waiting, self.reads = requests, waiting, 0

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self):
        self.reads += 1
        if self.reads == 1:
            return iter(self.requests)
        stranger = Request(99, 0, np.arange(50, 54), output_len=3)
        if self.waiting is not None:
            self.waiting[0] = stranger
            return iter(self.requests)
        return iter([stranger, *self.requests[1:]])


class Flipper(AdmissionPolicy):
    name = "flipper"
    in_batch = True

    def __init__(self, waiting_too: bool = False) -> None:
        self.waiting_too = waiting_too

    def admit(self, round: WaitingRound):
        return Flip(list(round.queue), round.queue if self.waiting_too else None), None


@pytest.mark.parametrize("waiting_too", [False, True])
def test_an_order_read_otherwise_the_second_time_raises(waiting_too: bool) -> None:
    """With requests held back by the in-batch rule the order is read again after its check: a
    stranger then, in it or in the waiting list, raises in both engines by the next round (the
    Python one admits the round a stranger joins the waiting list; the compiled one read it as a
    request it held)."""
    config = EngineConfig(in_batch_prefix_caching=True, in_batch_check_threshold=64, in_batch_deprioritize_threshold=2)
    for engine in both_engines(lambda: Flipper(waiting_too), config):
        engine.submit([Request(i, 0, np.array([1, 2, 3, 4 + i]), output_len=3) for i in range(3)])
        with pytest.raises((KeyError, RuntimeError)):
            engine.step()
            engine.step()


def test_in_batch_heads_past_the_numbering_bound_are_numbered_again() -> None:
    """The compiled in-batch check numbers each distinct head once and forgets the numbers once
    they far outnumber the waiting requests (over 4,096 heads here, each shared by three requests
    in a row): a request numbered before that is numbered again, and every round holds back the
    requests Python's check holds back."""
    config = EngineConfig(in_batch_prefix_caching=True, in_batch_check_threshold=64, in_batch_deprioritize_threshold=1,
                          max_prefill_tokens=64, chunked_prefill_size=None, max_running_requests=8)
    rng = np.random.default_rng(5)
    requests = [Request(i, 0, np.array([i // 3, *rng.integers(0, 9, 3)]), output_len=1, arrival=0.0004 * i)
                for i in range(15_000)]
    runs = []
    for engine in both_engines(lambda: "lpm", config):
        engine.submit(requests)
        runs.append([(it.admitted, len(engine.waiting)) for it in iter(engine.step, None)])
    assert runs[0] == runs[1] and any(admitted != sorted(admitted) for admitted, _ in runs[0])

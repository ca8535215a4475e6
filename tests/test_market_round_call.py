"""The compiled engine's round and warm-up in one call (`play_round`, `warm_up`) against the
market's Python loop over `engine.step` (market.py's `Market._play`, `Market.reset`): whole
episodes of random scenarios, every RoundReport field and the market's state compared bit for bit;
and where the market falls back to the loop."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from test_core_market import same

from auction_gym import core
from auction_gym.engine import rejections
from auction_gym.engine.sim_engine import CompiledSimEngine
from auction_gym.market import Market, MarketConfig

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core (auction_gym._core) is not built")

MECHANISMS = ("radix_vcg", "tiers", "sglang_priority", "fcfs", "lpm")


def random_config(seed: int) -> MarketConfig:
    """A scenario drawn from `seed`: the workload runs dry mid-episode (a long horizon), with small
    KV capacities rejecting some requests, chunked prefills, either cost model."""
    rng = random.Random(seed)
    engine_kwargs = {"kv_capacity_tokens": rng.choice([1500, 3000, 6000])}
    if rng.random() < 0.5:
        engine_kwargs["chunked_prefill_size"] = rng.choice([64, 256])
    return MarketConfig(
        num_bidders=rng.choice([2, 4]), mechanism=rng.choice(MECHANISMS), cost_model=rng.choice(["tokens", "unit"]),
        workload="agentic", workload_kwargs={"duration": rng.uniform(6.0, 15.0)}, engine_kwargs=engine_kwargs,
        horizon=10**6, warmup=rng.choice([0.0, 1.0, 3.0]), budget_per_round=rng.choice([0.0001, 1e-7]))


def stepped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Markets made from now on get engines without the one-call round: the Python loop runs."""
    make_engine = MarketConfig.make_engine

    def without_calls(self, scheduler):
        engine = make_engine(self, scheduler)
        if isinstance(engine, CompiledSimEngine):
            engine.play_round = engine.warm_up = None  # the market reads None as lacking them
        return engine

    monkeypatch.setattr(MarketConfig, "make_engine", without_calls)


def play(config: MarketConfig, seed: int) -> tuple[Market, list]:
    """One whole episode with random multipliers: every report, and the market's state after each."""
    rng = np.random.default_rng(seed)
    market = Market(config, accrue_latency_cost=True)
    market.reset(seed)
    trace = [(market.engine.now, market.busy_time, market.admitted_total)]
    while not market.done:
        report = market.step(rng.uniform(0.0, 2.0, market.n))
        fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(report) if f.name != "decision"}
        decision = None if report.decision is None else (type(report.decision).__name__, report.decision.charges(
            report.admitted, [1] * market.n, 1.0))
        trace.append((fields, decision, market.busy_time, market.admitted_total, market.spent.tolist(),
                      market.observations(), market.engine.now))
    return market, trace


@pytest.mark.parametrize("seed", range(8))
def test_round_call_plays_as_the_python_loop(seed, monkeypatch):
    config = random_config(seed)
    with core.use("compiled"):
        called, with_call = play(config, seed)
        assert called._play_round is not None
        stepped(monkeypatch)
        looped, with_loop = play(config, seed)
        assert looped._play_round is None
    assert called.exhausted and with_call[-1][0]["exhausted"]  # ran dry in a round
    assert len(with_call) == len(with_loop)
    for step, (a, b) in enumerate(zip(with_call, with_loop)):
        assert same(a, b), f"the round call and the loop part at step {step}: {a!r} vs {b!r}"
    assert {k: dataclasses.asdict(v) for k, v in called.engine.records.items()} == {
        k: dataclasses.asdict(v) for k, v in looped.engine.records.items()}


def test_some_scenarios_reject_requests():
    """The random scenarios reach what they are meant to: rejected requests among admitted ones."""
    rejected = 0
    for seed in range(8):
        config = random_config(seed)
        with core.use("compiled"):
            market, _ = play(config, seed)
        rejected += bool(rejections(market.engine.records))
    assert 0 < rejected < 8


@pytest.mark.parametrize("config,expect_call", [
    (MarketConfig(horizon=3), True),
    (MarketConfig(horizon=3, replicas=2, router="round_robin"), False),  # the cluster steps its replicas one iteration at a time
    (MarketConfig(horizon=3, engine_kwargs={"priority_preemption": True}), False),  # the Python engine
])
def test_the_loop_runs_where_the_engine_lacks_the_call(config, expect_call):
    with core.use("compiled"):
        market = Market(config)
        market.reset(0)
        assert (market._play_round is not None) is expect_call
        assert isinstance(market.engine, CompiledSimEngine) is expect_call
        market.step([1.0] * market.n)
    with core.use("python"):
        market = Market(config)
        market.reset(0)
        assert market._play_round is None
        market.step([1.0] * market.n)


def test_a_replaced_step_is_stepped_through():
    """Whoever replaces a compiled engine's `step` sees every iteration of the market's rounds."""
    with core.use("compiled"):
        market = Market(MarketConfig(horizon=20))
        market.reset(0)
        engine_step, kinds = market.engine.step, []

        def step(multipliers, remaining):
            it = engine_step(multipliers, remaining)
            kinds.append(None if it is None else it.kind)
            return it

        market.engine.step = step
        admitted = sum(len(market.step([1.0] * market.n).admitted) for _ in range(20))
    assert kinds.count("prefill") >= 20 and len(kinds) > 20 and admitted >= 20


class CountingEngine(CompiledSimEngine):
    """A compiled engine whose subclass overrides `step` (and nothing the market calls besides)."""

    steps = 0

    def step(self, multipliers=None, remaining=None):
        self.steps += 1
        return super().step(multipliers, remaining)


def test_a_subclass_step_is_not_shadowed(monkeypatch):
    """A subclass's `step` is the engine's step, and the market steps through it, as it does for a
    replaced one (the compiled one bound over it on the instance)."""
    make_engine = MarketConfig.make_engine
    monkeypatch.setattr(MarketConfig, "make_engine",
                        lambda self, sched: CountingEngine(sched, make_engine(self, sched).config))
    with core.use("compiled"):
        market = Market(MarketConfig(horizon=5))
        market.reset(0)
        assert type(market.engine) is CountingEngine and not market._plays_own_steps()
        warm = market.engine.steps
        assert warm > 0
        for _ in range(5):
            market.step([1.0] * market.n)
        assert market.engine.steps > warm + 5
        plain = CompiledSimEngine("fcfs")
        assert plain.step is plain.compiled_step


def test_what_the_compiled_engine_was_built_with_is_read_only():
    with core.use("compiled"):
        engine = CompiledSimEngine("fcfs")
    for name in ("scheduler", "config", "records"):
        with pytest.raises(AttributeError):
            setattr(engine, name, getattr(engine, name))


class Breaks(Exception):
    pass


def failing_on_round(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """Markets made from now on get a policy (first come, first served) that raises on its nth round."""

    def make_scheduler(self):
        fcfs, rounds = make_scheduler_of(self), []

        def order_round(round):
            rounds.append(1)
            if len(rounds) == nth:
                raise Breaks
            return type(fcfs).order_round(fcfs, round)

        fcfs.order_round = order_round
        return fcfs

    make_scheduler_of = MarketConfig.make_scheduler
    monkeypatch.setattr(MarketConfig, "make_scheduler", make_scheduler)


@pytest.mark.parametrize("warmup,nth", [(0.0, 5), (0.0, 8), (30.0, 3)])  # in a round; in the warm-up
def test_a_raising_round_keeps_the_tally_of_the_iterations_before_it(warmup, nth, monkeypatch):
    """The busy time and admissions of the iterations before one that raises are the market's,
    in the warm-up or a round, with the round call as with the loop."""
    config = MarketConfig(mechanism="fcfs", horizon=10, warmup=warmup, workload="agentic")
    failing_on_round(monkeypatch, nth)
    tallies = []
    for loop in (False, True):
        if loop:
            stepped(monkeypatch)
        with core.use("compiled"):
            market = Market(config)
            with pytest.raises(Breaks):
                market.reset(0)
                for _ in range(10):
                    market.step([1.0] * market.n)
        assert (market._play_round is None) is loop
        tallies.append((market.busy_time, market.admitted_total, market.engine.now))
    assert tallies[0] == tallies[1] and tallies[0][1] >= nth - 1

"""The market: budgets, charging, determinism, every mechanism, OGD pacing."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import auction_gym  # noqa: F401  (registers the envs)
from auction_gym.market import MECHANISMS, Market, MarketConfig, Obs
from auction_gym.market.config import CONTEXT_PER_REQUEST, DECODE_STEPS_PER_REQUEST, LONG_HORIZON
from auction_gym.market.observation import ema
from auction_gym.pacing import OGDPacer, Truthful
from auction_gym.registry import get_mechanism
from auction_gym.scheduler.base import in_batch_applies, make_scheduler

SMALL = dict(horizon=40, warmup=5.0, workload_kwargs={"rate": 60.0})  # a queue forms fast


def play(market: Market, alphas) -> list:
    reports = []
    for a in alphas:
        if market.done:
            break
        reports.append(market.step(a))
    return reports


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    budget=st.floats(0.01, 2.0),
    alphas=st.lists(st.lists(st.floats(0.0, 2.0), min_size=3, max_size=3), min_size=40, max_size=40),
)
def test_spend_never_exceeds_budget(seed, budget, alphas):
    market = Market(MarketConfig(num_bidders=3, budget=budget, **SMALL))
    market.reset(seed)
    for report in play(market, alphas):
        assert np.all(report.payments >= 0)
        assert np.all(market.spent <= market.budget + 1e-12)
    assert market.round > 0


def test_bidder_out_of_budget_pays_nothing_and_bids_zero():
    market = Market(MarketConfig(num_bidders=3, budget=[1e-3, 1e9, 1e9], **SMALL))
    market.reset(1)
    broke_at, zero_bids = None, 0
    while not market.done:
        report = market.step(np.ones(3))
        if broke_at is not None:
            assert report.payments[0] == 0.0
            # Every waiting request was in this round's auction, with its bid then (the request's
            # own `bid`, its report outside a market, is left as it was).
            decided = report.decision
            if decided is not None:
                assert [b for r, b in zip(decided.requests, decided.bids) if r.bidder == 0] == [
                    0.0 for r in decided.requests if r.bidder == 0]
                assert [b for r, b in zip(decided.requests, decided.bids) if r.bidder != 0] == [
                    r.urgency for r in decided.requests if r.bidder != 0]
                zero_bids += any(r.bidder == 0 for r in decided.requests)
        elif market.remaining[0] <= 0:
            broke_at = market.round
    assert broke_at is not None and broke_at < market.config.horizon and zero_bids > 0
    assert market.spent[0] == pytest.approx(1e-3)
    assert any(r.bidder == 0 for r in market.engine.waiting) or market.round == market.config.horizon


@pytest.mark.parametrize("cost_model", ["unit", "tokens"])
def test_charges_follow_design_rule(cost_model):
    """p_i x a_i / q_i x seconds_per_unit, capped by what is left (docs/design.md section 3)."""
    market = Market(MarketConfig(num_bidders=3, budget=[0.5, 1e9, 1e9], cost_model=cost_model, **SMALL))
    market.reset(7)
    checked = 0
    while not market.done:
        before = market.remaining.copy()
        report = market.step([1.0, 0.5, 1.5])
        if not report.admitted:
            continue
        decided = report.decision  # the round this step admitted from
        if cost_model == "unit":
            spu = market.busy_time / market.admitted_total
        else:
            spu = market.engine.cost.prefill_per_token
        admitted = np.bincount([market.engine.records[i].bidder for i in report.admitted], minlength=3)
        for i in range(3):
            due = decided.outcome.payments.get(i, 0.0) * admitted[i] / max(decided.queued[i], 1) * spu
            assert report.payments[i] == pytest.approx(min(due, before[i]) if admitted[i] else 0.0, rel=1e-12, abs=1e-15)
            checked += admitted[i] > 0 and due > 0
    assert checked > 5


def test_round_arrays_are_the_arithmetic_of_every_round():
    """utility = value - payment and spent += payment, bit for bit, in the rounds that charge and
    in those that do not (which skip the arithmetic); every report has arrays of its own."""
    market = Market(MarketConfig(num_bidders=3, **SMALL))
    market.reset(3)
    spent, charged, free = np.zeros(3), 0, 0
    while not market.done:
        report = market.step([1.0, 0.5, 1.5])
        value = [0.0] * 3
        for rid in report.finished:
            rec = market.engine.records[rid]
            value[rec.bidder] += rec.value - rec.urgency * rec.latency
        spent = spent + report.payments
        assert report.utility.tolist() == (np.array(value) - report.payments).tolist()
        assert market.spent.tolist() == spent.tolist()
        assert report.payments.shape == report.utility.shape == (3,)
        assert report.payments.flags.writeable and report.utility.flags.writeable
        charged += bool(report.payments.any())
        free += not report.payments.any()
    assert charged > 0 and free > 0


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_episode_under_every_mechanism(mechanism):
    market = Market(MarketConfig(mechanism=mechanism, **SMALL))
    market.reset(1)
    reports = play(market, [np.ones(4)] * 40)
    assert market.round == 40 and len(reports) == 40
    # A policy that decides rounds (an auction, a posted-price design, a priority order that reads
    # the bids) returns them; one that only orders returns none. Only those that charge earn.
    decides = make_scheduler(mechanism).decides
    decided = [r.decision for r in reports if r.admitted]
    assert all((d is None) == (not decides) for d in decided) and decided
    revenue = sum(r.revenue for r in reports)
    if get_mechanism(mechanism).charges:
        assert revenue > 0
    else:
        assert revenue == 0
    assert sum(len(r.finished) for r in reports) > 0


def test_same_seed_same_actions_same_trajectory():
    rng = np.random.default_rng(0)
    alphas = rng.uniform(0, 2, size=(40, 4))
    runs = []
    for _ in range(2):
        market = Market(MarketConfig(**SMALL))
        market.reset(11)
        trace = []
        for a in alphas:
            r = market.step(a)
            trace.append((r.time, tuple(r.admitted), tuple(r.finished), tuple(r.payments), tuple(r.utility)))
            trace.append(tuple(market.observations().ravel()))
        runs.append(trace)
    assert runs[0] == runs[1]


def test_bids_are_multiplier_times_urgency():
    """A round's bids are the multipliers it was played with times the urgencies, and the
    requests' own reported bids are left as the workload made them."""
    market = Market(MarketConfig(num_bidders=2, budget=1e9, **SMALL))
    market.reset(5)
    rounds = 0
    while rounds < 5 and not market.done:
        report = market.step([0.25, 2.0])
        decided = report.decision
        if decided is not None and len(decided.requests) > 1:
            rounds += 1
            assert decided.bids == [(0.25 if r.bidder == 0 else 2.0) * r.urgency for r in decided.requests]
            assert all(r.bid == r.urgency for r in decided.requests)  # the agentic workload bids truthfully
    assert rounds == 5


# A stationary load (Poisson arrivals at a constant rate, alike bidders) above the engine's
# capacity, where the focal bidder's truthful bids would exhaust its budget early.
STATIONARY = dict(num_bidders=4, budget=[0.5, 1e9, 1e9, 1e9], workload_kwargs={"rate": 25.0})


def run_focal(policy, seed: int) -> tuple[float, int]:
    """Spent fraction of bidder 0 at the end, and the round its budget ran out (horizon if not)."""
    market = Market(MarketConfig(**STATIONARY))
    market.reset(seed)
    others = Truthful()
    ran_out = market.config.horizon
    while not market.done:
        obs = market.observations()
        alpha = np.concatenate([policy.predict(obs[0])[0], others.predict(obs[1:])[0].ravel()])
        market.step(alpha)
        if ran_out == market.config.horizon and market.remaining[0] <= 0.01 * market.budget[0]:
            ran_out = market.round
    return market.spent[0] / market.budget[0], ran_out


def test_ogd_spends_90_to_100_percent_where_truthful_overspends():
    """Over five seeds OGD spends 90-100% of the budget on average (one episode can stop short:
    seed 2 spends 78%, its price dips late) and always makes it last longer than truthful bids."""
    fracs = []
    for seed in range(5):
        truthful_frac, truthful_out = run_focal(Truthful(), seed)
        ogd_frac, ogd_out = run_focal(OGDPacer(), seed)
        assert truthful_frac == pytest.approx(1.0) and truthful_out < 450  # the budget binds
        assert ogd_frac <= 1.0 + 1e-9
        assert ogd_out > truthful_out  # pacing makes the budget last longer
        fracs.append(ogd_frac)
    assert 0.9 <= np.mean(fracs) and min(fracs) >= 0.7


def test_bad_configs_raise():
    for bad in (dict(mechanism="sjf"), dict(workload="sharegpt"), dict(backend="tpu"),
                dict(workload="mooncake"), dict(trace_path="no/such/trace.jsonl"),
                dict(budget=[1.0]), dict(budget=-1.0), dict(horizon=0),
                dict(engine_kwargs={"kv_tokens": 1}), dict(workload_kwargs={"rat": 1.0})):
        with pytest.raises(ValueError):
            MarketConfig(**bad)
    market = Market(MarketConfig(**SMALL))
    with pytest.raises(RuntimeError):
        market.step(np.ones(4))
    market.reset(0)
    for bad_alpha in ([1.0, 1.0], [np.nan, 1, 1, 1], [-1, 1, 1, 1]):
        with pytest.raises(ValueError):
            market.step(bad_alpha)



def test_a_multiplier_above_alpha_max_observes_the_bound():
    """prev_multiplier is multiplier / alpha_max clipped to 1, for any finite multiplier: one beyond
    float32's range too (the observation is packed as float32, which cannot hold it; numpy's
    rounding to inf, then clipped, takes over)."""
    market = Market(MarketConfig(**SMALL))
    market.reset(0)
    alpha_max = market.config.alpha_max
    market.step([0.5 * alpha_max, alpha_max, 3.0 * alpha_max, 1e300])
    assert market.observations()[:, Obs.PREV_MULTIPLIER].tolist() == [0.5, 1.0, 1.0, 1.0]


class FeatureFormulas:
    """Every feature of the observation computed from its formula (observation.FEATURES), from the
    market's state and the reports alone: the moving averages are kept here from what each round
    reported, not read from the market."""

    def __init__(self, market: Market) -> None:
        self.market, n = market, market.n
        self.latency, self.ttft = np.zeros(n), np.zeros(n)
        self.price = self.hit = 0.0
        self.last_payments = np.zeros(n)

    def record(self, report) -> None:
        """Update the moving averages with one round's report."""
        records = self.market.engine.records
        for i in range(self.market.n):
            mine = [records[r] for r in report.finished if records[r].bidder == i]
            if mine:
                self.latency[i] = ema(self.latency[i], np.mean([rec.latency for rec in mine]))
                self.ttft[i] = ema(self.ttft[i], np.mean([rec.ttft for rec in mine]))
        if report.admitted:
            self.price = ema(self.price, report.payments.sum() / len(report.admitted))
            self.hit = ema(self.hit, report.hit_rate)
        self.last_payments = report.payments

    def features(self) -> dict[str, np.ndarray]:
        m, n = self.market, self.market.n
        T, rho = m.config.horizon, m.budget / m.config.horizon
        waiting = m.engine.waiting
        own = np.bincount([r.bidder for r in waiting], minlength=n)
        urgency = np.bincount([r.bidder for r in waiting], weights=[r.urgency for r in waiting], minlength=n)
        column = np.ones(n)
        return {
            "budget_left": (m.budget - m.spent) / m.budget,
            "time_left": column * (T - m.round) / T,
            "spend_vs_target": m.spent / max(m.round, 1) / rho,
            "last_spend_log": np.log1p(self.last_payments / rho),
            "own_queued": np.log1p(own / 16),
            "own_urgency": np.log1p(urgency / np.maximum(own, 1)) / np.log1p(10),
            "total_queue": column * np.log1p(len(waiting) / 64),
            "clearing_price": self.price / rho,
            "own_latency": np.log1p(self.latency / 10),
            "own_ttft": np.log1p(self.ttft / 1),
            "cache_hit_rate": column * self.hit,
            "prev_multiplier": m.alpha / m.config.alpha_max,
        }


def test_every_feature_is_its_formula():
    """Feature by feature, by name, the observation equals its formula, clipped to its bound; over
    an episode whose queue passes the old linear cap (64 own waiting requests), with a budget that
    runs out and multipliers that change every round."""
    market = Market(MarketConfig(horizon=60, warmup=5.0, budget=[2e-4, 1.0, 1.0, 1.0],
                                 workload_kwargs={"rate": 200.0}))
    market.reset(0)
    formulas = FeatureFormulas(market)
    assert tuple(formulas.features()) == Obs.NAMES  # one formula per feature, in the vector's order
    alphas = np.random.default_rng(3).uniform(0.0, 2.0, size=(market.config.horizon, market.n))
    seen = {name: set() for name in Obs.NAMES}
    for alpha in [*alphas, None]:  # the last observation is the one after the last round
        obs = market.observations()
        assert np.all(obs >= 0) and np.all(obs <= market.obs_high)
        for name, value in formulas.features().items():
            k = getattr(Obs, name.upper())
            np.testing.assert_allclose(obs[:, k], np.clip(value, 0, market.obs_high[k]), rtol=1e-6, err_msg=name)
            seen[name].update(np.round(obs[:, k], 6).tolist())
        if market.done:
            break
        formulas.record(market.step(alpha))
    assert all(len(values) > 1 for values in seen.values())  # every feature moved: the check has teeth
    assert market.remaining[0] <= 0 and max(formulas.features()["own_queued"]) > np.log1p(64 / 16)


def test_queue_warning_criterion():
    assert MarketConfig().queue_warning() is None  # the default horizon
    message = MarketConfig(horizon=5000).queue_warning()
    assert "horizon=5000" in message and "20 requests/s" in message and "14.5/s" in message
    assert MarketConfig(horizon=LONG_HORIZON).queue_warning() is None
    assert MarketConfig(horizon=5000, workload_kwargs={"rate": 12.0}).queue_warning() is None  # a stable load
    assert MarketConfig(horizon=5000, workload="shared_prefix").queue_warning() is None  # a finite workload
    # Bursts count at their long-run mean: 12 x (1 + 3 x 5 / 20) = 21 requests/s.
    bursty = MarketConfig(horizon=5000, workload_kwargs={"rate": 12.0, "burst_period": 20.0, "burst_duration": 5.0})
    assert "arrivals at 21 requests/s" in bursty.queue_warning()
    # More running slots serve more: 64 of them take 20 requests/s.
    assert MarketConfig(horizon=5000, engine_kwargs={"max_running_requests": 64}).queue_warning() is None
    # Episodes that draw their rate: the busiest one's counts, not workload_kwargs' (never used).
    drawn = MarketConfig(horizon=5000, episode_draws={"rate": [12.0, 40.0]}).queue_warning()
    assert "arrivals at 40 requests/s" in drawn and "(episode_draws['rate'])" in drawn
    assert MarketConfig(horizon=5000, episode_draws={"rate": [12.0, 13.0]}).queue_warning() is None


@pytest.mark.parametrize("kwargs, message", [
    ({"router": "round_robin"}, "router='round_robin' needs replicas > 1"),
    ({"router_kwargs": {"seed": 1}}, r"router_kwargs \['seed'\] given without a router"),
    ({"replicas": 2, "router": "round_robin", "router_kwargs": {"seed": 1}}, "router_kwargs for 'round_robin'"),
    ({"backend_kwargs": {"preset": "tiny"}}, r"backend_kwargs for backend 'sim' \(SimEngine\)"),
])
def test_construction_arguments_that_would_be_unused_or_fail_at_reset_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MarketConfig(**kwargs)


def test_a_rate_that_each_episodes_draw_would_replace_is_refused():
    with pytest.raises(ValueError, match=r"workload_kwargs\['rate'\] = 12.0 would never be used"):
        MarketConfig(episode_draws={"rate": [32.0]}, workload_kwargs={"rate": 12.0})
    with pytest.raises(ValueError, match=r"episode_draws\['rate'\] = \[32.0, 40.0, 48.0\]"):
        gym.make("RadixAuction-v2", workload_kwargs={"rate": 12.0})
    # v2 with a workload that takes no rate: the error says how to leave v2's draws and load curve out.
    with pytest.raises(ValueError, match=r"not 'shared_prefix': leave 'rate' out of episode_draws"):
        gym.make("RadixAuction-v2", workload="shared_prefix")
    gym.make("RadixAuction-v2", workload="shared_prefix", episode_draws={}, workload_kwargs={}).reset(seed=0)
    # The rate fixed as the draws' one value, or given without draws of it: the same arrivals.
    arrived = []
    for kwargs in ({"episode_draws": {"rate": [12.0]}}, {"workload_kwargs": {"rate": 12.0}},
                   {"workload_kwargs": {"rate": 40.0}}):
        market = Market(MarketConfig(**kwargs))
        market.reset(0)
        arrived.append(sorted((r.arrival, r.bidder) for r in market.engine.records.values()))
    assert arrived[0] == arrived[1] != arrived[2]


def test_served_rate_follows_the_cost_model():
    config = MarketConfig(engine_kwargs={"max_running_requests": 16})
    cost = config.make_engine(config.make_scheduler()).cost
    step = cost.decode_time(16, 16 * CONTEXT_PER_REQUEST)
    assert config.served_rate() == pytest.approx(16 / (DECODE_STEPS_PER_REQUEST * step))
    assert MarketConfig().served_rate() == pytest.approx(14.45, abs=0.01)


def test_a_workload_that_cannot_run_is_an_error_not_a_one_round_episode():
    market = Market(MarketConfig(horizon=50, warmup=1.0, engine_kwargs={"kv_capacity_tokens": 100}))
    market.reset(0)
    with pytest.raises(ValueError, match=r"nothing can run: the engine rejected all \d+ requests .*kv_capacity_tokens"):
        while not market.done:
            market.step(np.ones(4))
    finite = Market(MarketConfig(horizon=10**6, warmup=0.0, workload="shared_prefix",
                                 workload_kwargs={"num_groups": 2, "prompts_per_group": 2}))
    finite.reset(0)
    while not finite.done:  # runs dry normally: truncated, no error
        finite.step(np.ones(4))
    assert finite.truncated


def test_every_round_admits_when_prompts_are_chunked():
    """With chunks far shorter than the prompts, many prefill iterations only continue a chunk;
    such an iteration is not a round (nobody new is admitted or charged), so every round the
    market reports admits a request, and a round's hit rate and price come from those it admits."""
    market = Market(MarketConfig(horizon=100, engine_kwargs={"chunked_prefill_size": 32}))
    market.reset(0)
    engine_step, continuations = market.engine.step, []

    def step(multipliers, remaining):
        it = engine_step(multipliers, remaining)
        if it is not None and it.kind == "prefill" and not it.admitted:
            continuations.append(it)
        return it

    market.engine.step = step
    while not market.done:
        report = market.step(np.ones(market.n))
        assert report.admitted or report.exhausted
        assert 0.0 <= report.hit_rate <= 1.0
    assert len(continuations) > 10  # rounds did run chunk-only prefills inside them


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_engine_runs_the_policy_itself(mechanism):
    """No wrapper between a market's engine and its policy: the engine reads what the policy declares
    (`sorts_in_place`, `in_batch_deprioritizes`, `decides`), and the market's multipliers and budgets
    left reach it with the round."""
    market = Market(MarketConfig(mechanism=mechanism))
    market.reset(0)
    policy = market.engine.scheduler
    assert type(policy) is MarketConfig(mechanism=mechanism).make_scheduler().__class__
    assert policy.sorts_in_place == (mechanism in ("lpm", "dfs_weight"))
    assert policy.in_batch_deprioritizes(5) == (mechanism in ("lpm", "klpm", "lpm_aging", "radix_vcg"))
    assert in_batch_applies(policy, 5) == policy.in_batch_deprioritizes(5)
    assert policy.decides == (mechanism not in ("fcfs", "lpm", "klpm", "dfs_weight", "lpm_aging", "dlpm"))


@pytest.mark.both_cores
@pytest.mark.parametrize("mechanism,replicas", [("radix_vcg", 1), ("strict_vcg", 1), ("lpm", 1), ("radix_vcg", 2)])
def test_reset_frees_the_finished_episode_without_the_cycle_collector(mechanism, replicas):
    """A finished episode's engine, cache tree, queue and auction go as soon as the market resets,
    by reference counting: left to the cyclic collector, their full collections cost 5-6% of a step."""
    import gc
    import weakref

    config = MarketConfig(mechanism=mechanism, replicas=replicas, router="round_robin" if replicas > 1 else "identity",
                          horizon=30)
    market = Market(config)
    market.reset(seed=0)
    while not market.done:
        report = market.step([0.5] * config.num_bidders)
    engines = market.engine.replicas if replicas > 1 else [market.engine]
    caches = [e.cache for e in engines]
    # The deepest node's edge (nodes take no weak references; their keys do, and are theirs alone).
    edges = [max(c.nodes(), key=lambda n: n.depth).key for c in caches]
    held = [weakref.ref(o) for o in [market.engine, *engines, *caches, *edges]]
    for policy in [e.scheduler for e in engines]:
        held.append(weakref.ref(policy))
        if hasattr(policy, "_allocator"):  # the radix auction's tree, kept across rounds
            tree = policy._allocator._tree
            held.append(weakref.ref(tree))
            if hasattr(tree, "_root"):  # its nodes, when they are Python objects (the Python core)
                held.append(weakref.ref(_deepest_node(tree._root)))
            del tree
    del engines, caches, edges, policy
    gc.disable()
    try:
        market.reset(seed=1)
        assert (report.decision is not None) == mechanism.endswith("_vcg")
        del report  # the caller's last report held the old round, and through it its auction, until now
        alive = [ref() for ref in held if ref() is not None]
    finally:
        gc.enable()
    assert not alive, f"{len(alive)} objects of the finished episode outlive it, e.g. {type(alive[0]).__name__}"


def _deepest_node(node):
    """A node of an incremental queue tree with no node below it."""
    while any(b.is_node for b in node.blocks):
        node = next(b for b in node.blocks if b.is_node)
    return node

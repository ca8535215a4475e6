"""A market round's compiled settlement (`_core.RoundLedger`) and the built-in pacers' compiled
multipliers (`_core.Pacers`) against their Python (docs/design.md section 8): random markets
stepped on both cores with every report field and the market's state compared round by round,
random observation rows given to every built-in pacer, and the inputs the compiled code leaves to
Python, which must give Python's answer."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from auction_gym import core
from auction_gym.engine import RequestRecord
from auction_gym.market import Market, MarketConfig, Obs, RoundReport
from auction_gym.market.market import _AskedOnce
from auction_gym.pacing import _COMPILED_PACERS, FixedMultiplier, OGDPacer, PIDPacer, Truthful
from tests.test_core_market import same

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core (auction_gym._core) is not built")

REPORT_FIELDS = ("round", "time", "admitted", "finished", "payments", "utility", "welfare", "latency_cost",
                 "hit_rate", "mean_latency", "mean_ttft", "exhausted", "capped")
MARKET_STATE = ("round", "spent", "last_spend", "price_ema", "hit_ema", "_latency_ema", "_ttft_ema", "alpha")


def market_pair(config: MarketConfig, seed: int) -> dict[str, Market]:
    markets = {}
    for which in core.CORES:
        with core.use(which):
            markets[which] = Market(config, accrue_latency_cost=True)
        markets[which].reset(seed)
    return markets


@pytest.mark.parametrize("mechanism,cost_model,budget_per_round", [
    ("radix_vcg", "tokens", 0.0001),
    ("radix_vcg", "unit", 0.0001),
    ("radix_vcg", "service", 0.15),
    ("strict_vcg", "service", 0.05),
    ("tiers", "tokens", 1e-6),  # posted prices over tiny budgets: charges capped
    ("congestion", "tokens", 0.0001),
    ("fcfs", "tokens", 0.0001),  # a policy that only orders: no decision to charge
])
@pytest.mark.parametrize("seed", [0, 5])
def test_random_markets_settle_alike_round_by_round(mechanism, cost_model, budget_per_round, seed):
    config = MarketConfig(mechanism=mechanism, cost_model=cost_model, budget_per_round=budget_per_round,
                          horizon=120, num_bidders=3 + seed % 2)
    markets = market_pair(config, seed)
    python_calls = []
    for name in ("_bids", "_settle"):  # on the compiled market, only where its compiled call declines
        setattr(markets["compiled"], name, lambda *args, name=name: python_calls.append(name))
    rng = np.random.default_rng(seed)
    settled = 0
    while not markets["python"].done:
        alphas = rng.uniform(0.0, 2.0, config.num_bidders)  # an array or a list: the ledger takes both
        alphas = alphas if markets["python"].round % 2 else alphas.tolist()
        reports = {which: market.step(alphas) for which, market in markets.items()}
        for name in REPORT_FIELDS:
            assert same(getattr(reports["python"], name), getattr(reports["compiled"], name)), (name, reports)
        for name in MARKET_STATE:
            assert same(getattr(markets["python"], name), getattr(markets["compiled"], name)), name
        assert same(markets["python"].observations(), markets["compiled"].observations())
        settled += bool(reports["python"].admitted)
    assert markets["compiled"].done and settled > 10 and not python_calls
    m = markets["compiled"]  # its observation rows read the market's arrays as they are
    assert m._rows(m.engine.waiting, m._budget, m._rho, m.spent, m.last_spend, m._latency_ema, m._ttft_ema, m.alpha,
                   m.round, m.price_ema, m.hit_ema) is not None
    assert markets["compiled"]._ledger is not None and markets["python"]._ledger is None


@pytest.mark.parametrize("multipliers,taken", [
    (np.ones(6)[::2], True),  # strided float64: read by its strides
    (np.ones(3, dtype=np.float32), False),
    (np.ones((1, 3)), False),  # reshaped by Python
    (np.ones(4), False),  # one too many: Python raises
    (np.array([1.0, np.nan, 1.0]), False),
    (np.array([1.0, -0.5, 1.0]), False),
])
def test_multiplier_arrays_the_ledger_declines_get_pythons_answer(multipliers, taken):
    config = MarketConfig(mechanism="strict_vcg", horizon=5, num_bidders=3)
    markets = market_pair(config, 1)
    ledger = markets["compiled"]._ledger
    assert (ledger.bids(multipliers, markets["compiled"].spent, markets["compiled"]._budget) is not None) == taken
    outcomes = []
    for market in markets.values():
        try:
            report = market.step(multipliers)
        except ValueError as e:
            outcomes.append(str(e))
        else:
            outcomes.append([getattr(report, name) for name in REPORT_FIELDS] + [market.alpha])
    assert same(outcomes[0], outcomes[1])


class Charges:
    """A decision that charges what it is given."""

    def __init__(self, due) -> None:
        self.due = due

    def charges(self, admitted, per_bidder, seconds_per_unit):
        if isinstance(self.due, Exception):
            raise self.due
        return self.due


class Records(RequestRecord):
    """A record class of its own, which may redefine `latency`."""


class StubEngine:
    def __init__(self, records: dict) -> None:
        self.records = records
        self.cost = SimpleNamespace(prefill_per_token=1e-4)


def record(rid: int, bidder: int, kind: type = RequestRecord, **fields) -> RequestRecord:
    rec = kind(rid, bidder, 1.0, 100, 10, 2.0, 5.0, 2.0, admit=1.5, first_token=2.0, finish=3.5, cached_tokens=40)
    for name, value in fields.items():
        setattr(rec, name, value)
    return rec


def settle(which: str, records: dict, decision, spent: list[float]):
    """A two-bidder market of core `which` settling one round that admits and finishes every
    record: the report and the market's state, or the error it raises; and whether the compiled
    settlement took it."""
    with core.use(which):
        market = Market(MarketConfig(num_bidders=2, horizon=10, budget=1.0))
    market.reset(0)
    market.engine, market.spent = StubEngine(records), np.array(spent)
    report = RoundReport(0, 1.0, list(records), list(records), decision=decision)
    asked = None if market._ledger is None or decision is None else _AskedOnce(decision)
    compiled = market._ledger is not None and market._settled(report, spent, asked)
    try:
        if not compiled:
            market._settle(report, spent, asked)
    except (AttributeError, ValueError, ZeroDivisionError, IndexError) as e:
        return type(e), compiled
    return [getattr(report, f) for f in REPORT_FIELDS] + [getattr(market, f) for f in MARKET_STATE], compiled


@pytest.mark.parametrize("records,decision,spent,compiled", [
    ({1: record(1, 0), 2: record(2, 1)}, Charges({0: 0.25, 1: 2.0}), [0.0, 0.5], True),  # bidder 1 capped
    ({1: record(1, 0), 2: record(2, 1)}, Charges({1: 0.5, 0: 0.125}), [0.9, 1.5], True),  # out of budget
    ({1: record(1, 0)}, None, [0.0, 0.0], True),
    ({1: record(1, 0)}, Charges({0: 1}), [0.0, 0.0], False),  # an int charge
    ({1: record(1, 0)}, Charges({-1: 0.5}), [0.0, 0.0], False),  # Python's index from the end
    ({1: record(1, 0)}, Charges({2: 0.5}), [0.0, 0.0], False),  # IndexError
    ({1: record(1, 0)}, Charges([(0, 0.5)]), [0.0, 0.0], False),  # not a dict: AttributeError
    ({1: record(1, 0)}, Charges(ValueError("bad round")), [0.0, 0.0], False),
    ({1: record(1, 0, Records)}, None, [0.0, 0.0], False),
    ({1: record(1, 0, value=5)}, None, [0.0, 0.0], False),  # an int value
    ({1: record(1, 2)}, None, [0.0, 0.0], False),  # a bidder beyond the market's
    ({1: record(1, 0, prompt_len=0, cached_tokens=0)}, None, [0.0, 0.0], False),  # ZeroDivisionError
    ({1: record(1, 0, finish=math.nan)}, Charges({0: math.nan}), [0.0, 0.0], True),
])
def test_inputs_python_treats_its_own_way_give_pythons_answer(records, decision, spent, compiled):
    python, _ = settle("python", records, decision, spent)
    result, took = settle("compiled", records, decision, spent)
    assert same(python, result), (python, result)
    assert took is compiled


def random_rows(rng: np.random.Generator, k: int) -> list[list[float]]:
    rows = rng.uniform(0.0, 1.0, (k, Obs.SIZE)).astype(np.float32)
    rows[:, Obs.LAST_SPEND_LOG] = rng.uniform(0.0, 6.0, k)
    rows[: k // 4, Obs.PREV_MULTIPLIER] = 0.0
    return rows.tolist()


PACERS = [Truthful, lambda: FixedMultiplier(0.7), lambda: FixedMultiplier(1e300), OGDPacer,
          lambda: OGDPacer(0.2, 5.0, 3.0), PIDPacer, lambda: PIDPacer(0.05, 0.01), lambda: PIDPacer(2.0, 3.0, 0.1, 4.0)]


def pacer_pair(make) -> dict:
    pacers = {}
    for which in core.CORES:
        with core.use(which):
            pacers[which] = make()
    assert pacers["compiled"]._compiled_pacing and not pacers["python"]._compiled_pacing
    return pacers


@pytest.mark.parametrize("make", PACERS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pacers_answer_alike_on_random_rows(make, seed):
    pacers = pacer_pair(make)
    rows = random_rows(np.random.default_rng(seed), 64)
    assert same(pacers["python"].multipliers(rows), pacers["compiled"].multipliers(rows))
    assert _COMPILED_PACERS(pacers["compiled"]._COMPILED, pacers["compiled"], rows) is not None


@pytest.mark.parametrize("row", [
    {Obs.LAST_SPEND_LOG: 800.0},  # expm1 overflows: OverflowError
    {Obs.LAST_SPEND_LOG: math.inf},
    {Obs.PREV_MULTIPLIER: math.nan},
    {Obs.BUDGET_LEFT: -math.inf, Obs.TIME_LEFT: math.inf},
    {Obs.BUDGET_LEFT: -1e300},  # PID's exp overflows
    {Obs.PREV_MULTIPLIER: 1},  # an int feature
])
@pytest.mark.parametrize("make", PACERS)
def test_rows_python_treats_its_own_way_give_pythons_answer(make, row):
    pacers = pacer_pair(make)
    rows = random_rows(np.random.default_rng(3), 3)
    for j, value in row.items():
        rows[1][j] = value
    answers = {}
    for which, pacer in pacers.items():
        try:
            answers[which] = pacer.multipliers(rows)
        except (OverflowError, ValueError) as e:
            answers[which] = type(e)
    assert same(answers["python"], answers["compiled"]), answers


def test_a_subclass_of_a_pacer_runs_its_python():
    class Doubled(OGDPacer):
        def _alpha(self, obs):
            return 2.0 * super()._alpha(obs)

    with core.use("compiled"):
        pacer, plain = Doubled(), OGDPacer()
    rows = random_rows(np.random.default_rng(4), 8)
    assert not pacer._compiled_pacing
    assert pacer.multipliers(rows) == [np.float32(2.0 * a).item() for a in plain.multipliers(rows)]


class CountedCharges(Charges):
    """Charges that count how often the round asks for them."""

    def __init__(self, due) -> None:
        super().__init__(due)
        self.asked = 0

    def charges(self, admitted, per_bidder, seconds_per_unit):
        self.asked += 1
        return super().charges(admitted, per_bidder, seconds_per_unit)


@pytest.mark.parametrize("due", [{0: 1}, {-1: 0.5}, [(0, 0.5)], ValueError("bad round")])
def test_a_declined_settlement_asks_the_decision_for_its_charges_once(due):
    """The compiled settlement asks for the charges before it finds them not plain; the Python
    settlement it leaves the round to reads that answer, as a decision is asked once a round."""
    for which in core.CORES:
        decision = CountedCharges(due)
        settle(which, {1: record(1, 0)}, decision, [0.0, 0.0])
        assert decision.asked == 1, which

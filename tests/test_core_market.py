"""The market's compiled bookkeeping (`_core.LatencyAccrual`, `_core.ObservationRows`) against
its Python (docs/design.md section 8): whole episodes of the environments played on both cores
with the same random actions, every observation, reward and info compared step by step; and the
inputs the compiled code leaves to Python, which must give the same results."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest

import auction_gym  # noqa: F401  (registers the envs)
from auction_gym import core
from auction_gym.action import ACTION_TYPES
from auction_gym.cluster.routers import ROUTERS
from auction_gym.envs.parallel_env import parallel_env
from auction_gym.envs.radix_auction_env import REWARDS
from auction_gym.market import Market, MarketConfig, Obs
from auction_gym.market.config import COST_MODELS
from auction_gym.registry import mechanism_names
from auction_gym.request import Request
from auction_gym.workload.mooncake import SAMPLE_TRACE

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core (auction_gym._core) is not built")


def same(a, b) -> bool:
    """Equal bit for bit: arrays by dtype, shape and bytes, floats by value and sign (NaN equal to
    NaN), containers item by item."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def assert_same_trace(python: list, compiled: list) -> None:
    assert len(python) == len(compiled)
    for step, (p, c) in enumerate(zip(python, compiled)):
        assert same(p, c), f"the cores part at step {step}: python {p!r}, compiled {c!r}"


def play_env(which: str, env_id: str, seed: int, episodes: int, **kwargs) -> list:
    """Every reset's and step's output of `episodes` whole episodes with seeded random actions."""
    trace = []
    with core.use(which):
        env = gym.make(env_id, **kwargs)
        env.action_space.seed(seed)
        for episode in range(episodes):
            trace.append(env.reset(seed=seed + episode))
            done = False
            while not done:
                out = env.step(env.action_space.sample())
                trace.append(out)
                done = out[2] or out[3]
        env.close()
    return trace


def play_parallel(which: str, version: str, seed: int) -> list:
    """Every output of one whole PettingZoo episode with seeded random actions."""
    trace = []
    with core.use(which):
        env = parallel_env(version)
        trace.append(env.reset(seed=seed))
        for agent in env.possible_agents:
            env.action_space(agent).seed(seed)
        while env.agents:
            trace.append(env.step({a: env.action_space(a).sample() for a in env.agents}))
    return trace


@pytest.mark.parametrize("env_id,kwargs", [
    ("RadixAuction-v0", {}),
    ("RadixAuction-v0", {"reward": "cost"}),
    ("RadixAuction-v1", {}),
    ("RadixAuction-v2", {}),
    ("RadixAuction-v2", {"reward": "paired", "horizon": 80}),
    ("RadixAuction-v2", {"replicas": 2, "router": "round_robin", "horizon": 80}),
])
@pytest.mark.parametrize("seed", [0, 7])
def test_env_episodes_agree(env_id, kwargs, seed):
    python = play_env("python", env_id, seed, 2, **kwargs)
    compiled = play_env("compiled", env_id, seed, 2, **kwargs)
    assert_same_trace(python, compiled)


def random_env(rng: random.Random) -> tuple[str, dict]:
    """A random env to play on both cores: its id, and a random mechanism (every registered one),
    workload (the Mooncake slice among them), bidder count, cost model, action type, opponents,
    reward, horizon and, at times, a random engine (`random_engine`) and a second replica behind a
    random router."""
    env_id = rng.choice(["RadixAuction-v0", "RadixAuction-v1", "RadixAuction-v2"])
    workload = rng.choice(["agentic", "agentic", "shared_prefix", "mooncake"])
    kwargs = {"mechanism": rng.choice(mechanism_names()), "workload": workload, "horizon": rng.choice([40, 120]),
              "reward": rng.choice(REWARDS), "action_type": rng.choice(ACTION_TYPES),
              "other_bidders": rng.choice(["ogd", "truthful", "fixed:0.5", "pid:kp=0.3,ki=0.1"])}
    if workload == "mooncake":
        kwargs["trace_path"] = str(SAMPLE_TRACE)
    if env_id != "RadixAuction-v0" and workload != "agentic":  # v1's draws and load curve are the agentic workload's
        kwargs |= {"episode_draws": {"budget_scale": [0.1, 1.0, 10.0]}, "workload_kwargs": {}}
    if rng.random() < 0.3:
        kwargs["cost_model"] = rng.choice(COST_MODELS)
    if rng.random() < 0.5:
        kwargs["engine_kwargs"] = random_engine(rng)
    if rng.random() < 0.3:
        kwargs["num_bidders"] = rng.choice([2, 6])
    if rng.random() < 0.25:
        kwargs |= {"replicas": 2, "router": rng.choice(list(ROUTERS))}
    return env_id, kwargs


def random_engine(rng: random.Random) -> dict:
    """Random `EngineConfig` fields: the KV pool, pages, chunked prefill, batch limits, the
    reservation rules, retraction, the in-batch check, priority preemption and eviction."""
    page = rng.choice([1, 1, 16, 64])
    return {"kv_capacity_tokens": rng.choice([12_000, 20_000, 60_000, 400_000]), "page_size": page,
            "chunked_prefill_size": rng.choice([None, max(page, 512), 8192]),
            "max_prefill_tokens": rng.choice([1024, 16_384]), "max_running_requests": rng.choice([4, 16, 256]),
            "reservation": rng.choice(["sglang", "oracle"]), "clip_max_new_tokens": rng.choice([64, 4096]),
            "retract_decode_steps": rng.choice([5, 20]), "in_batch_prefix_caching": rng.random() < 0.7,
            "in_batch_check_threshold": rng.choice([0, 32]), "in_batch_deprioritize_threshold": rng.choice([1, 32]),
            "priority_preemption": rng.random() < 0.4, "priority_preemption_threshold": rng.choice([0, 10]),
            "radix_eviction_policy": rng.choice(["lru", "priority"])}


def check_random_env(case: int) -> None:
    env_id, kwargs = random_env(random.Random(case))
    python = play_env("python", env_id, case, 2, **kwargs)
    assert len(python) > 2, (env_id, kwargs)
    assert_same_trace(python, play_env("compiled", env_id, case, 2, **kwargs))


@pytest.mark.parametrize("case", range(16))
def test_random_envs_agree(case):
    """Random envs (`random_env`), two whole episodes each with seeded random actions: every
    observation, reward and info the same on both cores."""
    check_random_env(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", range(16, 400))
def test_many_random_envs_agree(case):
    check_random_env(case)


@pytest.mark.parametrize("version", ["v0", "v2"])
@pytest.mark.parametrize("seed", [1, 4])
def test_parallel_episodes_agree(version, seed):
    assert_same_trace(play_parallel("python", version, seed), play_parallel("compiled", version, seed))


def test_compiled_market_runs_compiled():
    """On the compiled core a market's loops are the compiled ones (else the tests above compare
    Python with itself); on the Python core they are not."""
    config = MarketConfig(horizon=5)
    for which, expect in (("python", False), ("compiled", True)):
        with core.use(which):
            market = Market(config, accrue_latency_cost=True)
        market.reset(0)
        assert (market._rows is not None) is expect and (market._accrual is not None) is expect


def _played_with_a_change(seed: int, at: int, change, handed_to_python: bool = True) -> int:
    """A 60-round episode of `seed` played on both cores with the same random multipliers, `change`
    applied to every request in the system before round `at`: every round's latency costs,
    utilities and observations compared; the last round played, after which the compiled market's
    accrual has handed the episode to Python (or not, where `handed_to_python` is False)."""
    markets = {}
    for which in core.CORES:
        with core.use(which):  # the reset too: it builds the engine, on the core active then
            markets[which] = Market(MarketConfig(horizon=60), accrue_latency_cost=True)
            markets[which].reset(seed)
    rng = np.random.default_rng(seed)
    for step in range(60):
        alphas = rng.uniform(0.0, 2.0, 4).tolist()
        reports = {}
        for which, market in markets.items():
            if step == at:
                for r in market.engine.in_system():
                    change(r)
            reports[which] = market.step(alphas)
        py, co = reports["python"], reports["compiled"]
        assert same(py.latency_cost, co.latency_cost) and same(py.utility, co.utility), step
        assert same(markets["python"].observations(), markets["compiled"].observations()), step
        if markets["python"].done:
            break
    assert (markets["compiled"]._accrual is None) is handed_to_python
    return step


def test_an_input_only_python_reads_hands_the_episode_to_python():
    """Requests in the system whose urgency is a numpy float (not a Python float): the compiled loops
    decline it without changing anything, the market goes on in Python from the compiled state,
    and every number stays the Python core's."""

    def numpy_urgency(r: Request) -> None:
        r.urgency = np.float64(r.urgency)

    assert _played_with_a_change(3, 20, numpy_urgency) >= 20


def test_a_held_requests_new_urgency_is_read_as_python_reads_it():
    """The compiled accrual keeps what it read of a request from step to step only while its slots
    hold the same objects: an urgency changed mid-episode costs the new one, as in Python, and the
    episode stays compiled."""

    def new_urgency(r: Request) -> None:
        r.urgency = r.urgency * 1.5 + 0.25

    assert _played_with_a_change(3, 20, new_urgency, handed_to_python=False) >= 20


@dataclass(slots=True)
class Waiting:
    """A stand-in waiting request: what the observation reads of one."""

    bidder: int
    urgency: float


class StubEngine:
    def __init__(self, waiting: list) -> None:
        self.waiting = waiting


def stub_market(which: str, waiting: list) -> Market:
    """A fresh two-bidder market on core `which` whose queue is `waiting`."""
    with core.use(which):
        market = Market(MarketConfig(num_bidders=2, horizon=10))
    market.reset(0)
    market.engine = StubEngine(waiting)
    return market


def test_a_field_that_stops_being_a_slot_is_read_as_python_reads_it():
    """The compiled rows read a slot at its offset only while the class is unchanged: once the
    field of a class they have read became a property, they read it through the property, as
    Python does."""
    waiting = [Waiting(0, 2.0), Waiting(1, 3.0), Waiting(1, 5.0)]
    markets = {which: stub_market(which, waiting) for which in core.CORES}
    before = {which: market.observations() for which, market in markets.items()}
    assert same(before["python"], before["compiled"])
    slot = Waiting.urgency
    Waiting.urgency = property(lambda self: 7.0)
    try:
        after = {which: market.observations() for which, market in markets.items()}
    finally:
        Waiting.urgency = slot
    assert same(after["python"], after["compiled"])
    assert after["compiled"][1, Obs.OWN_URGENCY] != before["compiled"][1, Obs.OWN_URGENCY]


@pytest.mark.parametrize("waiting", [
    [Waiting(2, 1.0)],  # a bidder beyond the market's: Python raises IndexError
    [Waiting(-1, 1.0)],  # Python's index from the end
    [Waiting(0, -4.0)],  # log1p of a mean urgency below -1: Python raises ValueError
])
def test_inputs_python_treats_its_own_way_give_pythons_answer(waiting):
    """Where Python wraps an index or raises, the compiled rows decline and Python answers."""
    results = {}
    for which in core.CORES:
        try:
            results[which] = stub_market(which, waiting).observations()
        except (IndexError, ValueError) as e:
            results[which] = type(e)
    assert same(results["python"], results["compiled"]), results


def play_accruals(market: Market, steps: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    costs = []
    for _ in range(steps):
        costs.append(market.step(rng.uniform(0.0, 2.0, market.n).tolist()).latency_cost)
        if market.done:
            break
    return costs


@pytest.mark.parametrize("seed", [0, 5])
def test_accrual_reads_the_compiled_engines_requests_as_its_list(seed):
    """On the compiled engine the accrual reads the requests held off the engine, without the list
    `in_system` makes; where `in_system` is replaced, it reads the list that returns. Both give
    the Python core's costs, bit for bit."""
    config = MarketConfig(horizon=80)
    with core.use("python"):
        reference = Market(config, accrue_latency_cost=True)
        reference.reset(seed)
    expected = play_accruals(reference, 80, seed)
    for replaced in (False, True):
        with core.use("compiled"):  # the engine is made at reset
            market = Market(config, accrue_latency_cost=True)
            market.reset(seed)
        assert market._held_engine is market.engine.in_system.__self__
        calls = []
        if replaced:
            listed = market.engine.in_system
            market.engine.in_system = lambda: calls.append(1) or listed()
        costs = play_accruals(market, 80, seed)
        assert len(costs) == len(expected) and all(same(a, b) for a, b in zip(costs, expected))
        assert market._accrual is not None and (len(calls) == len(costs) if replaced else not calls)


def test_accrual_of_an_engine_with_its_own_in_system_reads_its_list():
    """A subclass of the compiled engine that overrides `in_system` is not read in C++."""
    from auction_gym.engine.sim_engine import CompiledSimEngine

    class Listed(CompiledSimEngine):
        def in_system(self):
            return super().in_system()

    with core.use("compiled"):
        market = Market(MarketConfig(horizon=5), accrue_latency_cost=True)
        market.reset(0)
        market.engine = Listed()
        assert market._compiled_in_system() == (None, None)


@pytest.mark.parametrize("variant", ["unpickled", "strided", "float32"])
def test_spend_arrays_numpy_holds_its_own_way_agree(variant):
    """The compiled bids, settlement and rows read a float64 array of numpy's own dtype in place, and
    any other through the buffer protocol (an unpickled array's dtype is a copy; a strided view) or
    not at all (float32: the Python code runs): every number stays the Python core's."""
    import pickle

    def made(spent: np.ndarray) -> np.ndarray:
        if variant == "unpickled":
            return pickle.loads(pickle.dumps(spent))
        if variant == "strided":
            return np.repeat(spent, 2)[::2]
        return spent.astype(np.float32)

    markets = {}
    for which in core.CORES:
        with core.use(which):
            markets[which] = Market(MarketConfig(horizon=40), accrue_latency_cost=True)
        markets[which].reset(2)
    rng = np.random.default_rng(2)
    for step in range(40):
        alphas = rng.uniform(0.0, 2.0, 4).tolist()
        reports = {}
        for which, market in markets.items():
            market.spent, market.last_spend, market.alpha = (made(a) for a in (market.spent, market.last_spend,
                                                                               market.alpha))
            reports[which] = market.step(alphas)
        py, co = reports["python"], reports["compiled"]
        assert same(py.payments, co.payments) and same(py.utility, co.utility), step
        assert same(markets["python"].spent, markets["compiled"].spent), step
        assert same(markets["python"].observations(), markets["compiled"].observations()), step
        if markets["python"].done:
            break


class PropertyUrgency(Request):
    """A request whose urgency is a property: read through getattr, which may run any Python code."""

    __slots__ = ()

    @property
    def urgency(self) -> float:
        return Request.urgency.__get__(self)


def test_a_held_request_read_through_getattr_hands_the_accrual_to_python():
    """On the compiled engine the accrual reads the held requests without a list only while it reads
    their fields in place; a field read through getattr (a property) makes it decline, and the
    episode goes on in Python with the Python core's costs."""

    def property_urgency(r: Request) -> None:
        r.__class__ = PropertyUrgency

    assert _played_with_a_change(4, 15, property_urgency) >= 15


@dataclass(slots=True)
class Held:
    """A stand-in request in the system: what the accrual reads of one, as slots."""

    id: int
    bidder: int
    urgency: float
    arrival: float


class HeldByAttribute:
    """The same fields in an instance dict, which the accrual reads through getattr."""

    def __init__(self, id: int, bidder: int, urgency: float, arrival: float) -> None:
        self.id, self.bidder, self.urgency, self.arrival = id, bidder, urgency, arrival


@dataclass(slots=True)
class Finished:
    """A stand-in record of a finished request."""

    bidder: int
    urgency: float
    arrival: float
    finish: float


def python_accrue(since: dict, start: float, n: int, finished: list, records: dict, held: list,
                  end: float) -> np.ndarray:
    """`Market._accrued`'s Python loops on `since` ({request id: time}), its `_accrued_to`."""
    cost = [0.0] * n
    for rid in finished:
        rec = records[rid]
        cost[rec.bidder] += rec.urgency * (rec.finish - since.pop(rid, max(start, rec.arrival)))
    for r in held:
        rid = r.id
        t = since.get(rid)
        if t is None:
            t = r.arrival if r.arrival > start else start
        cost[r.bidder] += r.urgency * (end - t)
        since[rid] = end
    return np.array(cost)


def _accrual_round(rng: random.Random, held: list, made: list, n: int, end: float) -> tuple[list, dict, list]:
    """One random step's changes to the requests `held` (in place): some finish (their records
    returned), some leave unfinished or are dropped and replaced (a freed request's address is then
    often a new one's), fields change, requests arrive (returned); `made` counts the ids given so far."""
    finished, records, new = [], {}, []
    for r in list(held):
        roll = rng.random()
        if roll < 0.15:  # finishes: its record, and at times it is listed as held too
            held.remove(r)
            finished.append(r.id)
            records[r.id] = Finished(r.bidder, r.urgency, r.arrival, end - rng.random())
            if rng.random() < 0.1:
                held.append(r)
        elif roll < 0.2:  # leaves without finishing, or the same id comes back as another object
            held.remove(r)
            if rng.random() < 0.5:
                new.append(Held(r.id, rng.randrange(n), rng.choice([r.urgency, rng.random()]), r.arrival))
        elif roll < 0.3:  # a field changes: an urgency (at times to an equal, new float), a bidder, an id
            which = rng.randrange(4)
            if which == 0:
                r.urgency = rng.random()
            elif which == 1:
                r.urgency = float(repr(r.urgency))
            elif which == 2:
                r.bidder = rng.randrange(n)
            else:
                r.id, made[0] = made[0], made[0] + 1
    for _ in range(rng.randrange(4)):  # arrivals, before the episode's start at times
        kind = Held if rng.random() < 0.9 else HeldByAttribute
        new.append(kind(made[0], rng.randrange(n), rng.random() * 3, end - 2 * rng.random()))
        made[0] += 1
    held += new
    if held and rng.random() < 0.05:  # listed twice
        held.append(held[rng.randrange(len(held))])
    rng.shuffle(held)
    return finished, records, new


@pytest.mark.parametrize("seed", range(6))
def test_the_accrual_reads_what_each_step_holds_as_python_reads_it(seed):
    """The compiled accrual keeps what it read of each request and reads it again wherever anything
    changed: random steps of requests arriving, finishing, leaving, changing their urgency, bidder
    or id, and dropped so their addresses are reused, give Python's costs and state, bit for bit."""
    rng = random.Random(seed)
    n, start = 3, 1.0
    accrual = core.compiled_module().LatencyAccrual(n, start)
    since: dict = {}
    held: list = []
    made = [0]
    reused = 0
    for step in range(300):
        end = 1.0 + step * 0.5
        addresses = {id(r) for r in held}
        finished, records, new = _accrual_round(rng, held, made, n, end)
        reused += sum(id(r) in addresses for r in new)  # an address that was a request's, now freed
        expected = python_accrue(since, start, n, finished, records, held, end)
        assert same(accrual.accrue(finished, records, list(held), end), expected), step
        assert accrual.accrued_to() == since, step
    assert reused  # some new request took a dropped one's address


def test_an_accrual_that_declines_a_field_changes_nothing():
    """A held request's urgency that is no Python float (a numpy float) makes the accrual decline
    even where it read the request before, changing nothing: read again as a float, it goes on."""
    accrual = core.compiled_module().LatencyAccrual(2, 0.0)
    held = [Held(0, 0, 1.5, 0.0), Held(1, 1, 2.0, 0.5)]
    assert same(accrual.accrue([], {}, held, 1.0), np.array([1.5, 1.0]))
    held[1].urgency = np.float64(2.0)
    assert accrual.accrue([], {}, held, 2.0) is None
    assert accrual.accrued_to() == {0: 1.0, 1: 1.0}
    held[1].urgency = 3.0
    assert same(accrual.accrue([], {}, held, 2.0), np.array([1.5, 3.0]))

"""The baseline policies' compiled paths against their Python reference: strict priority's checks,
order and payments (`csrc/strict_priority.cpp`), LPM's sort and k-LPM's cycle (`lpm_orders.cpp`) and
DFS-weight's walk (`dfs_weight.cpp`).

Random queues with ties in every key (bids, cached lengths, arrivals), bidders with several
requests, prompts sharing deep prefixes, and rounds that follow one another over a cache that
grows (k-LPM's cycle carries over from round to round, DFS-weight's matcher splits edges): the
compiled core's orders and payments must be the Python core's, bit for bit (floats by their hex
form), and on the compiled core the compiled calls' results the Python code's on the same inputs.
Inputs a compiled call does not take go to the Python code, which raises its own errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import RadixCache, Request, core, make_scheduler
from auction_gym.mechanism import StrictPriorityAuction
from auction_gym.mechanism.strict_priority import _closed_form, _compiled_payments
from auction_gym.policy import WaitingRound
from auction_gym.request import read_only

pytestmark = pytest.mark.skipif(core.compiled_module() is None,
                                reason="the compiled core (auction_gym._core) is not built")

HEADS = ([7] * 12, [1, 256, 1, 256, 1, 9, 9], [255, 2**63 - 1, 2**40, 3], [5, 6])


def _prompt(rng: np.random.Generator) -> np.ndarray:
    head = HEADS[rng.integers(len(HEADS))]
    tail = [int(v) for v in rng.integers(0, 3, size=rng.integers(0, 4))]
    return read_only(np.array(head[: rng.integers(0, len(head) + 1)] + tail or [1], dtype=np.int64))


def _queue(rng: np.random.Generator, n: int, first_id: int = 0) -> list[Request]:
    """Requests with few distinct bids and arrivals (ties), of a few bidders."""
    return [Request(first_id + i, int(rng.integers(4)), _prompt(rng), bid=float(rng.choice([0.0, 0.5, 1.0, 2.5])),
                    arrival=float(rng.choice([0.0, 1.0, 1.5]))) for i in range(n)]


def _bits(x: object) -> object:
    if isinstance(x, float):
        return x.hex()
    if isinstance(x, dict):
        return {k: _bits(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_bits(v) for v in x]
    return x


def _strict(which: str, queue: list[Request], lens: list[int], cost_model: str, bids: list[float] | None):
    """Strict priority's order (ids) and every payment, on core `which`."""
    with core.use(which):
        auction = StrictPriorityAuction(cost_model, request_overhead=0.7)
    alloc = auction.allocate(queue, prefix_lens=lens, bids=bids)
    return [queue[r].id for r in alloc.order], _bits(alloc.rank), _bits(auction.payments(alloc))


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("cost_model", ["tokens", "unit"])
def test_strict_priority_is_the_python_reference(seed, cost_model):
    rng = np.random.default_rng(seed)
    queue = _queue(rng, int(rng.choice([2, 3, 8, 40, 150])))
    lens = [int(rng.integers(0, len(r.tokens) + 2)) for r in queue]
    bids = [float(rng.choice([0.0, 0.25, 3.0])) for _ in queue] if seed % 2 else None
    compiled = _strict("compiled", queue, lens, cost_model, bids)
    assert compiled == _strict("python", queue, lens, cost_model, bids)
    with core.use("compiled"):  # the tree is built when first read, on the core active then
        alloc = StrictPriorityAuction(cost_model).allocate(queue, prefix_lens=lens, bids=bids)
        paid = _compiled_payments(alloc)
    assert paid is not None
    assert _bits(paid) == _bits(_closed_form(alloc))


@pytest.mark.parametrize("change", [
    lambda r: setattr(r, "bid", 1),  # an int bid: float() converts it
    lambda r: setattr(r, "bid", float("nan")),  # refused, naming the request
    lambda r: setattr(r, "arrival", float("nan")),  # ordered by Python's own tuple comparison
    lambda r: setattr(r, "bidder", np.int64(2)),  # a bidder that is not an int
    lambda r: setattr(r, "tokens", np.array(r.tokens, dtype=np.int32)),  # converted by the check
])
def test_strict_inputs_it_declines_get_the_python_result(change):
    def outcome(which: str) -> object:
        queue = _queue(np.random.default_rng(3), 12)
        change(queue[4])
        try:
            return _strict(which, queue, [0] * 12, "tokens", None)
        except ValueError as e:
            return str(e)

    assert outcome("compiled") == outcome("python")


def test_a_duplicate_id_is_named_on_both_cores():
    queue = _queue(np.random.default_rng(4), 5)
    queue[3].id = queue[1].id
    for which in core.CORES:
        with core.use(which), pytest.raises(ValueError, match=f"request {queue[1].id}: duplicate"):
            StrictPriorityAuction().allocate(queue)


def _policy_rounds(which: str, name: str, seed: int) -> list[list[int]]:
    """The orders (ids) `name` gives over rounds on core `which`: each round some requests are
    admitted (leave), some arrive, and some admitted prompts enter the cache."""
    rng = np.random.default_rng(seed)
    with core.use(which):
        cache = RadixCache()
        policy = make_scheduler(name)
    queue, orders, next_id = [], [], 0
    for _ in range(8):
        fresh = _queue(rng, int(rng.integers(1, 12)), next_id)
        next_id += len(fresh)
        queue = queue + fresh
        order = policy.order(queue, cache)
        orders.append([r.id for r in order])
        served = order[: int(rng.integers(0, len(order) + 1))]
        for r in served:
            cache.insert(r.tokens[: int(rng.integers(1, len(r.tokens) + 1))])
        queue = [r for r in queue if r not in served]
    return orders


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("name", ["klpm", "dfs_weight"])
def test_cache_aware_baselines_are_the_python_reference(name, seed):
    assert _policy_rounds("compiled", name, seed) == _policy_rounds("python", name, seed)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", ["klpm", "dfs_weight"])
def test_compiled_orders_are_the_python_code_on_the_compiled_cache(name, seed, monkeypatch):
    """The same rounds on the compiled core with the compiled call (which takes every round) and
    without it (the Python loop over the compiled matcher's results)."""
    module, call = f"auction_gym.scheduler.{name}", {"klpm": "klpm_order", "dfs_weight": "dfs_order"}[name]
    taken = []

    class Counted:
        def __getattr__(self, attr: str) -> object:
            def counted(*args: object) -> object:
                out = getattr(core.compiled_module(), call)(*args)
                taken.append(out is not None)
                return out
            return counted

    monkeypatch.setattr(f"{module}.compiled_module", Counted)
    with_call = _policy_rounds("compiled", name, seed)
    assert taken and all(taken)
    monkeypatch.setattr(f"{module}.active", lambda: "python")  # the policy's own choice only
    assert _policy_rounds("compiled", name, seed) == with_call


@pytest.mark.parametrize("seed", range(20))
def test_lpm_with_the_engines_lengths_is_the_python_sort(seed):
    """A round with the engine's cached lengths (`length_of`, many ties): the compiled sort, and
    the order on the compiled core, are the Python core's."""
    rng = np.random.default_rng(seed)
    queue = _queue(rng, int(rng.choice([1, 2, 9, 60])))
    length_of = {r: int(rng.integers(0, 4)) for r in queue}
    orders = []
    for which in core.CORES:
        with core.use(which):
            policy = make_scheduler("lpm")
        orders.append([r.id for r in policy.admit(WaitingRound(queue, RadixCache(), length_of=length_of))[0]])
    assert orders[0] == orders[1]
    assert [r.id for r in core.compiled_module().lpm_order(queue, length_of)] == orders[0]
    assert core.compiled_module().lpm_order(queue, {**length_of, queue[0]: 1.0}) is None  # Python's to sort


@pytest.mark.parametrize("seed", range(20))
def test_orders_of_a_queue_in_order_already_are_the_python_code(seed):
    """A queue sorted already, as the compiled calls skip their sorts for (LPM's by cached length,
    ties in place; k-LPM's by arrival, ties by id): their orders are the Python code's."""
    rng = np.random.default_rng(seed)
    queue = _queue(rng, int(rng.choice([2, 9, 60])))
    length_of = {r: int(rng.integers(0, 4)) for r in queue}
    by_length = sorted(queue, key=lambda r: -length_of[r])
    with core.use("python"):
        lpm = make_scheduler("lpm")
    expected = lpm.admit(WaitingRound(by_length, RadixCache(), length_of=length_of))[0]
    assert core.compiled_module().lpm_order(by_length, length_of) == expected
    by_arrival = sorted(queue, key=lambda r: (r.arrival, r.id))
    match = {r.id: (length_of[r], None) for r in by_arrival}
    for phase in range(3):
        compiled = core.compiled_module().klpm_order(by_arrival, match, phase, 3)
        with core.use("python"):
            klpm = make_scheduler("klpm", k=3)
        klpm._phase, klpm._matcher = phase, _Matched(match)
        assert compiled == klpm.order_round(WaitingRound(by_arrival, RadixCache()))


class _Matched:
    """A k-LPM matcher that gives a match of the test's own, told no changes (the cycle moves on
    by none: the policy's first round)."""

    def __init__(self, match: dict) -> None:
        self.match = match

    def update(self, round: WaitingRound) -> tuple[dict, None]:
        return self.match, None


class _Subclassed(Request):
    """A request of another class, whose fields the compiled calls do not read in place."""


@pytest.mark.parametrize("change", [
    lambda q: setattr(q[3], "arrival", float("nan")),  # ordered by Python's own tuple comparison
    lambda q: setattr(q[3], "arrival", 1),  # an int arrival
    lambda q: setattr(q[3], "id", np.int64(q[3].id)),  # an id that is not an int
    lambda q: q.__setitem__(2, _Subclassed(q[2].id, q[2].bidder, q[2].tokens, arrival=q[2].arrival)),
    lambda q: setattr(q[5], "arrival", -0.0),  # ties with 0.0 and takes the id's order, as in Python
])
def test_klpm_inputs_it_declines_get_the_python_order(change):
    """k-LPM's compiled arrival sort and cycle over a queue with one request changed: the order of
    the Python core, whether or not the compiled call takes the queue."""
    orders = []
    for which in core.CORES:
        queue = _queue(np.random.default_rng(6), 14)
        change(queue)
        with core.use(which):
            cache, policy = RadixCache(), make_scheduler("klpm", k=3)
        cache.insert(queue[0].tokens)
        orders.append([[r.id for r in policy.order(queue[:cut], cache)] for cut in (14, 9, 12)])
    assert orders[0] == orders[1]

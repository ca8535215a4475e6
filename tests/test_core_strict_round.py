"""Strict priority's engine round through the compiled calls (`StrictPriorityAuction.admit` on the
compiled core: `_core.strict_round`, else `_core.strict_bids` and `_core.strict_allocation`) against its layers and the Python
core: the same orders, bids, cached lengths, allocations and charges bit for bit over random
sequences of rounds (repeated inputs reuse the last allocation, as `_round` does); inputs the calls
do not take go through the layers, which raise their own errors; a subclass's layer is called."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import Request, core
from auction_gym.mechanism import StrictPriorityAuction
from auction_gym.mechanism.base import AuctionRound
from auction_gym.mechanism.strict_priority import _ROUND_LAYERS, ChargedRound
from auction_gym.policy import AdmissionPolicy, WaitingRound
from auction_gym.request import read_only

pytestmark = pytest.mark.skipif(core.compiled_module() is None,
                                reason="the compiled core (auction_gym._core) is not built")

BIDDERS = 4


def _queue(rng: np.random.Generator, n: int) -> list[Request]:
    """Requests with ties in bids, urgencies and arrivals, prompts sharing prefixes."""
    out = []
    for i in range(n):
        head = [7, 7, 3][: rng.integers(0, 4)] + [int(v) for v in rng.integers(0, 3, size=rng.integers(0, 3))]
        out.append(Request(int(rng.integers(10**6)) * 64 + i, int(rng.integers(BIDDERS)),
                           read_only(np.array(head or [1], dtype=np.int64)), bid=float(rng.choice([0.0, 1.0, 2.5])),
                           arrival=float(rng.choice([0.0, 1.0, 1.5])), urgency=float(rng.choice([0.0, 0.5, 2.0]))))
    return out


def _rounds(seed: int) -> list[tuple[list[Request], list[float] | None, dict]]:
    """A sequence of rounds over a queue that changes, some repeated as they were."""
    rng = np.random.default_rng(seed)
    pool = _queue(rng, 60)
    rounds = []
    for _ in range(12):
        queue = [pool[i] for i in sorted(rng.choice(len(pool), size=int(rng.integers(1, 30)), replace=False))]
        multipliers = None if seed % 5 == 0 else [float(rng.choice([0.0, 0.5, 1.0])) for _ in range(BIDDERS)]
        lens = {r: int(rng.integers(0, len(r.tokens) + 1)) for r in queue}
        rounds.append((queue, multipliers, lens))
        if rng.random() < 0.4:
            rounds.append((list(queue), None if multipliers is None else list(multipliers), dict(lens)))
    return rounds


def _hex(values: object) -> object:
    return None if values is None else [v.hex() if isinstance(v, float) else v for v in values]


def _played(auction: StrictPriorityAuction, rounds: list, layered: bool) -> list[tuple]:
    """What each round decides and charges, asked through `admit` or through the layers."""
    seen = []
    for queue, multipliers, lens in rounds:
        waiting = WaitingRound(queue, None, multipliers, None, None, lens)
        order, decision = AdmissionPolicy.admit(auction, waiting) if layered else auction.admit(waiting)
        alloc = decision.allocation
        per_bidder = [sum(r.bidder == i for r in order[:3]) for i in range(BIDDERS)]
        charged = {i: p.hex() for i, p in decision.charges([r.id for r in order[:3]], per_bidder, 0.25).items()}
        seen.append(([r.id for r in order], _hex(decision.bids), decision.prefix_lens, alloc.order, alloc.rank,
                     _hex(alloc.bids), [id(t) for t in alloc.tokens], alloc.cost.hex(), charged))
    return seen


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("settings", [("tokens", 0.7, "cached_prefix"), ("tokens", 1.0, "request_id"),
                                      ("unit", 1.0, "cached_prefix")])
def test_compiled_rounds_are_the_layers_and_the_python_core(seed, settings):
    rounds = _rounds(seed)
    with core.use("compiled"):
        compiled = StrictPriorityAuction(*settings)
        layered = StrictPriorityAuction(*settings)
    with core.use("python"):
        python = StrictPriorityAuction(*settings)
    assert compiled._compiled_rounds and not python._compiled_rounds
    expected = _played(python, rounds, layered=True)
    assert _played(compiled, rounds, layered=False) == expected
    assert _played(layered, rounds, layered=True) == expected


def _bad_rounds() -> list:
    """Changes to a round that the compiled calls do not take (each given a fresh round)."""
    def request(k: int, field: str, value: object):
        return lambda queue, m, lens: setattr(queue[k], field, value)

    def multiplier(k: int, value: object):
        return lambda queue, m, lens: m.__setitem__(k, value)

    return [
        multiplier(1, float("nan")), multiplier(2, -1.0), multiplier(0, float("inf")), multiplier(3, 1),
        request(2, "bidder", BIDDERS), request(2, "bidder", -1), request(4, "bidder", np.int64(1)),
        request(1, "urgency", 1), request(1, "urgency", float("inf")), request(5, "bid", float("nan")),
        request(5, "bid", 2), request(3, "arrival", float("nan")), request(3, "id", 2**70),
        request(6, "tokens", np.array([1, 2], dtype=np.int32)), request(6, "tokens", np.array([], dtype=np.int64)),
        lambda queue, m, lens: setattr(queue[7], "id", queue[2].id),
        lambda queue, m, lens: lens.pop(queue[0]),
        lambda queue, m, lens: lens.__setitem__(queue[0], np.int64(3)),
        lambda queue, m, lens: lens.__setitem__(queue[0], 2**70),
    ]


def _outcome(which: str, change, layered: bool, twice: bool) -> object:
    """A round of 8 requests with `change` made, decided (after the same round unchanged, `twice`)."""
    rng = np.random.default_rng(9)
    queue, multipliers = _queue(rng, 8), [1.0, 0.5, 2.0, 1.0]
    lens = {r: 1 for r in queue}
    with core.use(which):
        auction = StrictPriorityAuction()
    ask = (lambda w: AdmissionPolicy.admit(auction, w)) if layered else auction.admit
    if twice:
        ask(WaitingRound(queue, None, list(multipliers), None, None, dict(lens)))
    change(queue, multipliers, lens)
    try:
        order, decision = ask(WaitingRound(queue, None, multipliers, None, None, lens))
    except Exception as e:  # the same error, type and message, is what is compared
        return type(e).__name__, str(e)
    return [r.id for r in order], _hex(decision.bids), decision.prefix_lens, decision.allocation.rank


@pytest.mark.parametrize("twice", [False, True])
@pytest.mark.parametrize("change", _bad_rounds())
def test_inputs_the_calls_decline_get_the_layers_answer(change, twice):
    expected = _outcome("python", change, layered=True, twice=twice)
    assert _outcome("compiled", change, layered=False, twice=twice) == expected
    assert _outcome("compiled", change, layered=True, twice=twice) == expected


@pytest.mark.parametrize("layer", _ROUND_LAYERS)
def test_a_subclass_overriding_a_layer_is_decided_through_it(layer):
    calls = [0]
    base = getattr(StrictPriorityAuction, layer)
    if isinstance(base, bool):  # a declaration: overridden, it is the other value
        member: object = not base
    else:
        def member(self, *args, **kwargs):
            calls[0] += 1
            return base(self, *args, **kwargs)

    kind = type("Layered", (StrictPriorityAuction,), {layer: member})
    with core.use("compiled"):
        auction = kind()
    assert not auction._compiled_rounds
    if isinstance(base, bool):
        return
    queue = _queue(np.random.default_rng(1), 6)
    for _ in range(2):  # the second round repeats the first: `_skip` is called then
        order, _ = auction.admit(WaitingRound(queue, None, [1.0] * BIDDERS, None, None, {r: 0 for r in queue}))
        assert sorted(r.id for r in order) == sorted(r.id for r in queue)
    assert calls[0] >= 1


def _last_rounds(queue: list[Request], bids: list[float], lens: list[int] | None) -> list[tuple]:
    """Last rounds (`AuctionMechanism._last`) to compare a round with: its own inputs, each changed in
    one place, and inputs of types whose comparison the one call leaves to Python."""
    other = Request(-1, 0, np.array([1], dtype=np.int64))
    made = [(queue, bids, lens), (list(queue), list(bids), None if lens is None else list(lens)),
            (queue[:-1], bids[:-1], None if lens is None else lens[:-1]),
            (queue[:-1] + [other], bids, lens), (queue, bids[:-1] + [bids[-1] + 1.0], lens),
            (queue, [np.float64(b) for b in bids], lens), (queue, tuple(bids), lens)]
    if lens is not None:
        made += [(queue, bids, lens[:-1] + [lens[-1] + 1]), (queue, bids, None), (queue, bids, [float(c) for c in lens])]
    return [(*m, None) for m in made]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("cache_ties", [False, True])
def test_the_one_call_round_is_the_calls_one_by_one(seed, cache_ties):
    """`_core.strict_round` against `strict_bids`, `_unchanged`'s comparison and `strict_allocation`:
    True exactly where the last round's inputs compare equal, else the same bids, lengths and
    allocation; None where the comparison takes Python."""
    strict = core.compiled_module()
    answers = []
    for queue, multipliers, lens_of in _rounds(seed):
        for length_of in (lens_of, None):
            bids, lens = strict.strict_bids(queue, multipliers, length_of)
            ties = cache_ties and length_of is not None
            for last in [None, *_last_rounds(queue, bids, lens)]:
                got = strict.strict_round(queue, multipliers, length_of, ties, last)
                plain = last is None or (type(last[1]) is list and all(type(b) is float for b in last[1])
                                         and (lens is None) == (last[2] is None)
                                         and all(type(c) is int for c in last[2] or []))
                same = last is not None and (bids, queue, lens) == (last[1], last[0], last[2])
                answers.append(type(got))
                if got is None:
                    assert not plain
                elif got is True:
                    assert same
                else:
                    assert not same
                    assert got == (bids, lens, *strict.strict_allocation(queue, bids, lens, ties))
                    assert [b.hex() for b in got[0]] == [b.hex() for b in bids]
    assert {type(None), bool, tuple} <= set(answers)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("cost_model", ["tokens", "unit"])
def test_compiled_charges_are_the_rules(seed, cost_model):
    """`ChargedRound.charges` (`_core.strict_charges`) against `AuctionRound.charges` on the same
    decisions, for counts of every kind: bit for bit, the counts it does not take left to Python."""
    rng = np.random.default_rng(seed)
    with core.use("compiled"):
        auction = StrictPriorityAuction(cost_model, 0.5)
    taken = 0
    for queue, multipliers, lens in _rounds(seed):
        _, decision = auction.admit(WaitingRound(queue, None, multipliers, None, None, lens))
        assert type(decision) is ChargedRound
        admitted = [int(rng.integers(0, 3)) for _ in range(BIDDERS)]
        for per_bidder in (admitted, admitted[:2], [*admitted, 1], [-1, *admitted[1:]], np.array(admitted),
                           [np.int64(a) for a in admitted], [bool(a) for a in admitted]):
            expected = AuctionRound.charges(decision, [], per_bidder, 0.3)
            got = decision.charges([], per_bidder, 0.3)
            assert {i: c.hex() for i, c in got.items()} == {i: c.hex() for i, c in expected.items()}
            assert list(got) == list(expected)
            alloc = decision.allocation
            tree = alloc.tree
            taken += len(queue) > 1 and core.compiled_module().strict_charges(
                None if tree is None else tree.compiled, alloc.requests, alloc.bids, alloc.order, alloc.request_work,
                per_bidder, 0.3) is not None
    assert taken > 10


def test_a_subclass_pricing_its_own_way_charges_through_it():
    class Priced(StrictPriorityAuction):
        def payments(self, alloc, bidders=None):
            return {i: 1.0 for i in bidders}

    with core.use("compiled"):
        auction = Priced()
    queue, multipliers, lens = _rounds(1)[0]
    _, decision = auction.admit(WaitingRound(queue, None, multipliers, None, None, lens))
    assert auction._compiled_rounds and type(decision) is AuctionRound
    assert decision.charges([], [1] * BIDDERS, 1.0) == {i: 1.0 / sum(r.bidder == i for r in queue)
                                                         for i in range(BIDDERS) if any(r.bidder == i for r in queue)}

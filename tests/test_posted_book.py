"""The compiled posted-price rounds (`auction_gym._core.PostedBook`) against the Python designs they
follow (pricing/held.py, tiers.py, congestion.py): the same orders, bills (in the same order) and
prices, bit for bit, over random rounds; and a design that meets an input the book does not take
goes on in Python from what the book held, deciding the rounds the Python design decides."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_posted_rounds import _rounds

from auction_gym import Request, core
from auction_gym.policy import QueueDelta, WaitingRound
from auction_gym.pricing import CongestionPricing, ServiceTiers
from auction_gym.pricing.tiers import TiersLPM

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core is not built")

DESIGNS = [lambda: ServiceTiers(), lambda: TiersLPM(), lambda: ServiceTiers(1e-4, (0.2, 1.0, 1.7, 4.0), "lpm", 0.3),
           lambda: ServiceTiers(1e306), lambda: CongestionPricing(price=1e-4, eta=0.3)]


def _pair(make):
    with core.use("python"):
        python = make()
    with core.use("compiled"):
        compiled = make()
    assert python._book is None and compiled._book is not None
    return python, compiled


def _same(got, want) -> None:
    assert all(a is b for a, b in zip(got.order, want.order)) and len(got.order) == len(want.order)
    assert list(got.bills.items()) == list(want.bills.items())  # the values bit for bit, and their order
    assert got.prices == want.prices


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("make", DESIGNS)
@pytest.mark.parametrize("scale", [1e-3, 1.0])
def test_compiled_rounds_are_the_python_rounds(seed, make, scale):
    python, compiled = _pair(make)
    for round_ in _rounds(seed, 200, scale, tiny=seed % 3 == 0):
        _same(compiled.decide_round(round_), python.decide_round(round_))
        assert getattr(compiled, "price", None) == getattr(python, "price", None)
    assert compiled._book is not None  # every round was decided in one call


@pytest.mark.parametrize("make", DESIGNS)
def test_an_input_the_book_does_not_take_hands_the_design_to_python(make):
    """Multipliers of ints mid-episode: the book declines the round, the design goes on in Python
    from what it held, and its rounds stay those of the design that ran in Python throughout."""
    python, compiled = _pair(make)
    for k, round_ in enumerate(_rounds(11, 120, 1e-3)):
        if k >= 60 and compiled._book is not None and round_.multipliers is not None:
            round_ = WaitingRound(round_.queue, round_.cache, [int(m) for m in round_.multipliers],
                                  round_.remaining, round_.changes, round_.length_of)
        got, want = compiled.decide_round(round_), python.decide_round(round_)
        assert [r.id for r in got.order] == [r.id for r in want.order] and got.bills == want.bills
    assert compiled._book is None


def test_a_declined_round_changes_nothing_the_book_holds():
    """A queue with a request of another class: declined before anything moves, so what the book
    hands over is what it held after the round before."""
    with core.use("compiled"):
        design = ServiceTiers()
    requests = [Request(i, i % 2, np.zeros(10 + i, dtype=np.int64), urgency=1.0) for i in range(6)]
    first = WaitingRound(requests[:4], None, [1.0, 1.0], [math.inf, math.inf])
    design.decide_round(first)
    held = design._book.held()
    stranger = type("Stranger", (), {"id": 99, "bidder": 0, "urgency": 1.0, "bid": 0.0})()
    assert design._book.tiers_round([*requests[:4], stranger], None, None, None, [1.0, 1.0], None, None) is None
    assert design._book.held()[0] == held[0]
    # Changes that lead on are followed: the requests left are dropped, those joined bought.
    delta = QueueDelta(requests[4:], requests[:1], [], {})
    decided = design.decide_round(WaitingRound(requests[1:], None, [1.0, 1.0], [math.inf, math.inf], delta))
    assert [entry[0] for entry in design._book.held()[0]] == requests[1:] and sorted(decided.bills) == [1, 2, 3, 4, 5]

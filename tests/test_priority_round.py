"""SGLang's priority order and qos_lpm's decided by the compiled core (`_core.priority_round`)
against the Python code they follow (scheduler/priority.py): the same orders and levels over random
queues, bids, multipliers and caps; inputs the call does not take go to Python."""

from __future__ import annotations

import random

import numpy as np
import pytest

from auction_gym import Request, core
from auction_gym.policy import WaitingRound
from auction_gym.scheduler.priority import QoSLPM, SGLangPriority

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core is not built")

BIDDERS = 3


def _round(rng: random.Random) -> WaitingRound:
    tie = 10 ** (rng.randrange(-41, 41, 2) / 20)  # 10 x log10 near a half: round() goes to even
    weights = [0.0, 1e-300, 5e-324, 1e300, 0.5, tie]
    queue = [Request(i, rng.randrange(BIDDERS), np.zeros(5, dtype=np.int64),
                     bid=rng.choice([*weights, rng.uniform(0.0, 20.0), 10 ** rng.uniform(-8, 8)]),
                     urgency=rng.choice([*weights, rng.uniform(0.0, 20.0), 10 ** rng.uniform(-8, 8)]))
             for i in range(rng.randint(0, 40))]
    multipliers = None if rng.random() < 0.2 else [rng.choice([0.0, 1.0, 1e-5, rng.uniform(0, 3)])
                                                   for _ in range(BIDDERS)]
    lens = {r: rng.choice([0, 2, 5, rng.randrange(6)]) for r in queue}
    return WaitingRound(queue, None, multipliers, length_of=lens)


def _pair(make):
    with core.use("python"):
        python = make()
    with core.use("compiled"):
        compiled = make()
    return python, compiled


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("make", [SGLangPriority, QoSLPM, lambda: SGLangPriority(0), lambda: QoSLPM(-30)])
def test_compiled_priority_rounds_are_the_python_rounds(seed, make):
    rng = random.Random(seed)
    python, compiled = _pair(make)
    for _ in range(30):
        round_ = _round(rng)
        lens = round_.prefix_lens if isinstance(compiled, QoSLPM) else None
        assert compiled._compiled_round(round_, lens) is not None  # decided in the compiled call
        got, want = compiled.decide_round(round_), python.decide_round(round_)
        assert len(got.order) == len(want.order) and all(a is b for a, b in zip(got.order, want.order))
        assert dict(got.priorities) == dict(want.priorities)


@pytest.mark.parametrize("make", [SGLangPriority, QoSLPM])
def test_inputs_the_call_does_not_take_are_decided_in_python(make):
    python, compiled = _pair(make)
    queue = [Request(i, i % 2, np.zeros(5, dtype=np.int64), urgency=1e300) for i in range(4)]
    ints = WaitingRound(queue, None, [1, 2], length_of={r: 0 for r in queue})  # ints, not floats
    assert compiled._compiled_round(ints, [0] * 4) is None
    assert [r.id for r in compiled.decide_round(ints).order] == [r.id for r in python.decide_round(ints).order]
    overflow = WaitingRound(queue, None, [1e300, 1.0], length_of={r: 0 for r in queue})  # a bid of inf
    with pytest.raises(ValueError, match="request 0: bid must be finite"):
        python.decide_round(overflow)
    with pytest.raises(ValueError, match="request 0: bid must be finite"):
        compiled.decide_round(overflow)
    queue[2].bid = -1.0  # changed after construction: refused, not read as a bid of 0
    negative = WaitingRound(queue, None, None, length_of={r: 0 for r in queue})
    assert compiled._compiled_round(negative, [0] * 4) is None
    for design in (python, compiled):
        with pytest.raises(ValueError, match="request 2: bid must be finite and >= 0, got -1.0"):
            design.decide_round(negative)


@pytest.mark.parametrize("make", [SGLangPriority, QoSLPM])
@pytest.mark.parametrize("field", ["bid", "urgency"])
def test_a_field_the_request_class_reads_otherwise_is_read_as_python_reads_it(make, field, monkeypatch):
    """Request's slots are read at their offsets only while the class keeps them: a field made a
    property after the first compiled round is read through it, as in Python."""
    python, compiled = _pair(make)
    queue = [Request(i, 0, np.zeros(5, dtype=np.int64), bid=10.0 ** i, urgency=10.0 ** i) for i in range(4)]
    round_ = WaitingRound(queue, None, None if field == "bid" else [1.0], length_of={r: 0 for r in queue})
    compiled.decide_round(round_)
    slot = Request.__dict__[field]
    monkeypatch.setattr(Request, field, property(lambda r: 1.0 / (1.0 + slot.__get__(r))))
    got, want = compiled.decide_round(round_), python.decide_round(round_)
    assert [r.id for r in want.order] == [0, 1, 2, 3]
    assert [r.id for r in got.order] == [0, 1, 2, 3] and dict(got.priorities) == dict(want.priorities)
    monkeypatch.undo()
    assert compiled._compiled_round(round_, [0] * 4) is not None  # the slots again, read in place

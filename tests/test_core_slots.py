"""The objects the compiled core makes slot by slot (csrc/slot_fill.hpp) rather than through their
Python constructors: requests (`request.unchecked_many`), their records (the compiled engine's
arrivals) and the queue's changes (`QueueDelta`, the compiled waiting prefixes). Each is compared
with what the Python code makes, slot by slot and by identity; a request of a subclass, columns
the compiled call does not read, and a class changed after the import go through Python."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from auction_gym import EngineConfig, core
from auction_gym.engine import RequestRecord
from auction_gym.engine.sim_engine import SimEngine
from auction_gym.policy import QueueDelta
from auction_gym.request import Request, unchecked_many
from auction_gym.workload.agentic import AgenticConfig, iter_agentic

pytestmark = pytest.mark.skipif(core.compiled_module() is None,
                                reason="the compiled core (auction_gym._core) is not built")

COLUMNS = tuple(f.name for f in dataclasses.fields(Request))[1:]
NAN_FIELDS = ("admit", "first_token", "finish")


def _columns(draw: random.Random, n: int, as_tuples: bool) -> dict:
    """`n` requests' fields in checked form, a column per field."""
    cols = {
        "bidder": [draw.randrange(4) for _ in range(n)],
        "tokens": [np.arange(draw.randint(1, 9), dtype=np.int64) for _ in range(n)],
        "bid": [draw.random() for _ in range(n)],
        "output_len": [draw.randint(1, 50) for _ in range(n)],
        "arrival": [draw.uniform(0, 9) for _ in range(n)],
        "value": [draw.random() * 5 for _ in range(n)],
        "urgency": [draw.random() for _ in range(n)],
        "output_tokens": [None if draw.random() < 0.5 else np.arange(3, dtype=np.int64) for _ in range(n)],
        "kind": [draw.choice(["urgent", "interactive"]) for _ in range(n)],
        "max_new_tokens": [draw.randint(50, 90) for _ in range(n)],
    }
    return {k: tuple(v) for k, v in cols.items()} if as_tuples else cols


def _slots(obj: object) -> list:
    return [getattr(obj, name) for name in type(obj).__slots__]


def _same_objects(a: object, b: object) -> bool:
    """Whether `a` and `b` are of one class and hold the same objects in every slot."""
    return type(a) is type(b) and all(x is y for x, y in zip(_slots(a), _slots(b), strict=True))


@pytest.mark.parametrize("seed", range(8))
def test_compiled_requests_hold_what_the_python_loop_puts(seed):
    draw = random.Random(seed)
    cols = _columns(draw, draw.randint(0, 30), as_tuples=seed % 2 == 1)
    first = draw.choice([0, 7, 2**40])
    with core.use("compiled"):
        made = unchecked_many()(first_id=first, **cols)
    reference = Request._unchecked_many(first_id=first, **cols)
    assert len(made) == len(reference)
    for r, ref in zip(made, reference):
        assert r.id == ref.id and type(r.id) is int
        assert all(getattr(r, name) is getattr(ref, name) for name in COLUMNS)


def test_the_python_core_picks_the_python_loop():
    with core.use("python"):
        assert unchecked_many() == Request._unchecked_many


def test_the_compiled_call_declines_what_the_loop_must_read():
    make = core.compiled_module().unchecked_requests
    cols = _columns(random.Random(0), 3, as_tuples=False)
    row = tuple(cols[name] for name in COLUMNS)

    class Own(Request):
        __slots__ = ()

    assert make(Request, 0, row) is not None
    assert make(Own, 0, row) is None
    assert make(Request, True, row) is None
    assert make(Request, 2**63 - 2, row) is None  # ids past int64
    assert make(Request, 0, (iter(cols["bidder"]), *row[1:])) is None
    assert make(Request, 0, (cols["bidder"][:2], *row[1:])) is None
    # ... which the Python loop then reads, and refuses as it does.
    with core.use("compiled"), pytest.raises(ValueError, match="zip"):
        unchecked_many()(first_id=0, **(cols | {"bidder": cols["bidder"][:2]}))


def test_a_field_made_a_property_after_the_import_is_set_through_python(monkeypatch):
    make = core.compiled_module().unchecked_requests
    cols = _columns(random.Random(1), 2, as_tuples=False)
    row = tuple(cols[name] for name in COLUMNS)
    assert make(Request, 0, row) is not None
    monkeypatch.setattr(Request, "kind", property(lambda self: "changed"))
    assert make(Request, 0, row) is None
    monkeypatch.undo()
    assert make(Request, 0, row)[0].kind == cols["kind"][0]


def _submitted(requests: list[Request]) -> SimEngine:
    with core.use("compiled"):
        engine = SimEngine("radix_vcg", EngineConfig())
    engine.submit(requests)
    return engine


def test_the_compiled_engine_records_a_request_as_record_of_does():
    requests = list(iter_agentic(AgenticConfig(num_bidders=3, duration=8.0), seed=3))
    engine = _submitted(requests)
    assert engine.records and set(engine.records) == {r.id for r in requests}
    for r in requests:
        rec, ref = engine.records[r.id], RequestRecord.of(r)
        assert rec == ref  # a dataclass's equality: NaNs equal only as the same object
        assert all(getattr(rec, name) is getattr(ref, name) for name in ("id", "bidder", "arrival", "urgency",
                                                                         "value", "bid", *NAN_FIELDS, "rejected"))


def test_a_request_subclass_is_recorded_through_record_of():
    class Padded(Request):
        __slots__ = ()

        @property
        def prompt_len(self) -> int:
            return self.tokens.size + 1000

    r = Padded(id=0, bidder=0, tokens=[1, 2, 3], bid=1.0, output_len=2)
    assert _submitted([r]).records[0].prompt_len == 1003


def test_the_compiled_deltas_are_queue_deltas():
    engine = _submitted(list(iter_agentic(AgenticConfig(num_bidders=2, duration=6.0), seed=1)))
    seen = []
    admit = type(engine.scheduler).admit

    def checking(self, round):
        d = round.changes  # read as the round reads it: its `length_of` is the engine's, kept current
        if d is not None:
            assert type(d) is QueueDelta
            assert all(type(getattr(d, name)) is list for name in ("joined", "left", "rematched"))
            assert set(d.length_of) >= set(d.joined) | set(d.rematched)
            with pytest.raises(dataclasses.FrozenInstanceError):
                d.joined = []
            seen.append(d)
        return admit(self, round)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(engine.scheduler), "admit", checking)
        while engine.step() is not None:
            pass
    assert seen, "the engine passed no changes"


def test_the_engine_reads_a_field_made_a_property_through_python(monkeypatch):
    r = Request(id=0, bidder=0, tokens=[1, 2, 3], bid=1.0, output_len=2, value=5.0)
    monkeypatch.setattr(Request, "value", property(lambda self: 42.0))
    assert _submitted([r]).records[0].value == 42.0


def test_an_unset_field_is_refused_as_getattr_refuses_it():
    r = Request(id=0, bidder=0, tokens=[1, 2, 3], bid=1.0, output_len=2)
    del r.output_tokens
    with pytest.raises(AttributeError, match="output_tokens"):
        _submitted([r])

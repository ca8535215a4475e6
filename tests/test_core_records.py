"""The engine's records summarized through the compiled reader of their columns
(`_core.RecordColumns`, `records.summarize` on the compiled core) against the Python reader: the
same `Metrics` bit for bit over random records, and Python's answer (or error) for records the
reader does not take as they are."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from auction_gym import core
from auction_gym.engine import RequestRecord, summarize
from auction_gym.engine import records as records_module

pytestmark = pytest.mark.skipif(core.compiled_module() is None,
                                reason="the compiled core (auction_gym._core) is not built")


def _records(rng: np.random.Generator, n: int) -> list[RequestRecord]:
    """Records finished or not, rejected or not, with retractions and ties in every time."""
    out = []
    for i in range(n):
        arrival = float(rng.choice([0.0, 0.5, 1.25, rng.uniform(0, 3)]))
        rec = RequestRecord(i, int(rng.integers(3)), arrival, int(rng.integers(1, 900)), int(rng.integers(1, 50)),
                            1.0, 2.0, 1.0, retractions=int(rng.integers(0, 3)))
        kind = rng.integers(4)
        if kind == 0:
            rec.rejected = "too long"
        elif kind > 1:
            rec.first_token = arrival + float(rng.uniform(0, 2))
            rec.finish = rec.first_token + float(rng.choice([0.0, rng.uniform(0, 5)]))
            rec.cached_tokens = int(rng.integers(0, rec.prompt_len + 1))
        out.append(rec)
    return out


def _summary(which: str, records: list) -> object:
    with core.use(which):
        try:
            m = summarize(records)
        except Exception as e:  # the same error, type and message, is what is compared
            return type(e).__name__, str(e)
    return {k: v.hex() if isinstance(v, float) else v for k, v in dataclasses.asdict(m).items()}


@pytest.mark.parametrize("seed", range(25))
def test_compiled_columns_summarize_as_python_does(seed):
    rng = np.random.default_rng(seed)
    records = _records(rng, int(rng.choice([0, 1, 2, 7, 300])))
    assert _summary("compiled", records) == _summary("python", records)
    assert records_module._compiled_columns.read(records, RequestRecord) is not None


class _Record(RequestRecord):
    """A record class of its own, which may redefine `latency`."""

    __slots__ = ()


@pytest.mark.parametrize("change", [
    lambda recs: recs.__setitem__(3, _Record(**{f.name: getattr(recs[3], f.name) for f in dataclasses.fields(recs[3])})),
    lambda recs: setattr(recs[4], "finish", 7),  # an int finish
    lambda recs: setattr(recs[4], "arrival", math.nan),  # min() keeps or skips NaN as Python's does
    lambda recs: setattr(recs[5], "prompt_len", 2**60),  # beyond what a double holds exactly
    lambda recs: setattr(recs[5], "retractions", -1),
    lambda recs: setattr(recs[6], "cached_tokens", 1.5),
    lambda recs: [setattr(r, "prompt_len", 0) for r in recs],  # a division by zero
])
def test_records_the_reader_declines_get_pythons_answer(change):
    records = _records(np.random.default_rng(2), 40)
    for r in records[3:7]:  # each changed one finished
        r.first_token, r.finish, r.rejected = r.arrival + 1.0, r.arrival + 2.0, None
    change(records)
    assert _summary("compiled", records) == _summary("python", records)

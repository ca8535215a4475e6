"""The workloads' compiled draws (auction_gym._workload, `workload/compiled.py`) against the Python
generator they stand in for: every field of every request, its type, and which requests' arrays
share memory, for random configurations, read partly and fully."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from test_workload_digest import DIGESTS, WORKLOADS, digest

from auction_gym import core
from auction_gym.request import Request
from auction_gym.workload import agentic, classes, compiled, shared_prefix
from auction_gym.workload.agentic import AgenticConfig, _chunks, _Generator, iter_agentic, wave_shape
from auction_gym.workload.shared_prefix import SharedPrefixConfig, iter_shared_prefix

pytestmark = pytest.mark.skipif(compiled._module() is None, reason="auction_gym._workload is not built here")

FLAGS = ("C_CONTIGUOUS", "F_CONTIGUOUS", "OWNDATA", "WRITEABLE", "ALIGNED")
FIELDS = ("id", "bidder", "bid", "output_len", "arrival", "value", "urgency", "kind", "max_new_tokens")


def _random_config(draw: random.Random) -> AgenticConfig:
    shapes = [s for s in ("session", "fanout", "rollout", "urgent") if draw.random() < 0.7] or ["urgent"]
    lo = draw.randint(1, 4)
    return AgenticConfig(
        num_bidders=draw.randint(1, 6), rate=draw.choice([5.0, 20.0, 60.0]),
        duration=draw.choice([5.0, 25.0, 60.0]), num_requests=draw.choice([None, None, None, 0, 37, 700]),
        burst_period=draw.choice([0.0, 4.0, 9.0]), burst_factor=draw.choice([0.5, 3.0]),
        burst_duration=draw.choice([0.0, 1.5, 4.0]), wave_amplitude=draw.choice([0.0, 0.4, 0.9]),
        wave_period=draw.choice([7.0, 30.0]), wave_offset=draw.choice([0.0, 3.5]),
        vocab_size=draw.choice([2, 1000, 2**33]), system_prompt_len=draw.randint(1, 40),
        tool_defs_len=draw.randint(1, 40), user_turn_len=draw.randint(1, 40), urgent_query_len=draw.randint(1, 30),
        context_len=draw.randint(1, 50), branch_len=draw.randint(1, 20),
        shape_mix={s: draw.choice([0.0, 0.3, 1.0]) for s in shapes} | {shapes[0]: 1.0},
        bidder_heterogeneity=draw.choice([0.0, 0.5, 10.0]),
        session_class_mix=draw.choice([{"interactive": 0.85, "background": 0.15}, {"background": 1.0},
                                       {"urgent": 1.0, "interactive": 2.0, "background": 0.0}]),
        session_turns=draw.choice([1.0, 2.5, 6]), max_session_turns=draw.randint(1, 12),
        think_time=draw.choice([0.0, 0.7, 5.0]), fanout_width=(lo, lo + draw.randint(0, 4)),
        rollouts=draw.randint(1, 9), max_new_tokens=draw.choice([None, 5000]))


def _random_shared_config(draw: random.Random) -> SharedPrefixConfig:
    return SharedPrefixConfig(
        num_groups=draw.randint(1, 20), prompts_per_group=draw.randint(1, 30),
        system_prompt_len=draw.randint(1, 300), question_len=draw.randint(1, 60), output_len=draw.randint(1, 300),
        range_ratio=draw.choice([1.0, 0.5, 0.01]), rate=draw.choice([1.0, 8.0, 100.0]),
        burst_period=draw.choice([0.0, 3.0]), burst_factor=draw.choice([0.5, 4.0]),
        burst_duration=draw.choice([0.0, 1.0, 3.0]), num_bidders=draw.randint(1, 9),
        vocab_size=draw.choice([2, 32000, 2**40]),
        class_mix=draw.choice([{"urgent": 0.1, "interactive": 0.6, "background": 0.3}, {"background": 1.0}]),
        max_new_tokens=draw.choice([None, 300]))


def _sharing(requests) -> list[tuple[int, int]]:
    """Each request's prompt and reply as the index of the first array seen with the same memory
    owner: the requests' memory sharing, comparable across two runs."""
    owners: dict[int, int] = {}
    shared = []
    for r in requests:
        pair = []
        for arr in (r.tokens, r.output_tokens):
            owner = arr if arr is None or arr.base is None else arr.base
            pair.append(owners.setdefault(id(owner), len(owners)) if owner is not None else -1)
        shared.append(tuple(pair))
    return shared


def _assert_same(expected, got) -> None:
    assert len(got) == len(expected)
    for a, b in zip(expected, got):
        for name in FIELDS:
            x, y = getattr(a, name), getattr(b, name)
            assert type(x) is type(y) and x == y, (a.id, name, x, y)
        for x, y in ((a.tokens, b.tokens), (a.output_tokens, b.output_tokens)):
            if x is None:
                assert y is None
                continue
            assert y.dtype == x.dtype and x.flags.writeable is False
            assert [y.flags[f] for f in FLAGS] == [x.flags[f] for f in FLAGS] and y.strides == x.strides
            assert np.array_equal(x, y), a.id
    assert _sharing(got) == _sharing(expected)


def _both(stream, cfg, seed: int, limit: int | None):
    def read(which):
        with core.use(which):
            return list(itertools.islice(stream(cfg, seed), limit))
    return read("python"), read("compiled")


@pytest.mark.parametrize("case", range(60))
def test_compiled_agentic_draws_are_the_python_draws(case):
    draw = random.Random(case)
    cfg = _random_config(draw)
    limit = draw.choice([None, None, None, 1, 60])
    _assert_same(*_both(iter_agentic, cfg, draw.randint(0, 2**32), limit))


@pytest.mark.parametrize("case", range(30))
def test_compiled_shared_prefix_draws_are_the_python_draws(case):
    draw = random.Random(case)
    cfg = _random_shared_config(draw)
    limit = draw.choice([None, None, 1, 60])
    _assert_same(*_both(iter_shared_prefix, cfg, draw.randint(0, 2**32), limit))


@pytest.mark.parametrize("name", [n for n in sorted(WORKLOADS) if not n.startswith("mooncake")])
def test_the_pinned_workloads_are_drawn_alike(name):
    """The digests' workloads (test_workload_digest.py, run on the default core) on both cores."""
    with core.use("python"):
        expected = list(WORKLOADS[name]())
    with core.use("compiled"):
        got = list(WORKLOADS[name]())
    assert digest(got) == digest(expected) == (DIGESTS[name], len(expected))
    _assert_same(expected, got)


def test_compiled_chunks_leave_the_generator_where_the_python_chunks_do():
    cfg = AgenticConfig(burst_period=5.0, wave_amplitude=0.5, shape_mix={"session": 1, "fanout": 1, "urgent": 1})
    python = _Generator(cfg, 3)
    with core.use("compiled"):
        chunks = _chunks(cfg, 3)
    assert type(chunks) is not _Generator
    for _ in range(5):
        assert [d[:2] + d[4:] for d in chunks.chunk()] == [d[:2] + d[4:] for d in python.chunk()]
        assert chunks.t == python.t and chunks.horizon == python.horizon
    # The C++ draws moved numpy's generator as far as the Python draws did.
    assert chunks.rng.bit_generator.state == python.rng.bit_generator.state


def test_compiled_shared_prefix_chunks_leave_the_generator_where_the_python_chunks_do():
    cfg = SharedPrefixConfig(num_groups=8, prompts_per_group=200, range_ratio=0.3, burst_period=2.0)
    python = shared_prefix._Chunks(cfg, 4)
    with core.use("compiled"):
        chunks = shared_prefix._chunks(cfg, 4)
    assert type(chunks) is not shared_prefix._Chunks
    emitted = 0
    while emitted < cfg.num_requests:
        got, expected = chunks.chunk(emitted), python.chunk(emitted)
        assert [x for i, x in enumerate(got) if i != 2] == [x for i, x in enumerate(expected) if i != 2]
        assert chunks.t == python.t
        emitted += len(got[0])
    assert chunks.rng.bit_generator.state == python.rng.bit_generator.state


@pytest.mark.parametrize("which", core.CORES)
def test_the_python_core_and_a_foreign_numpy_draw_in_python(which, monkeypatch):
    cfg = AgenticConfig(duration=10.0)
    with core.use(which):
        assert (type(_chunks(cfg, 0)) is _Generator) == (which == "python")
        monkeypatch.setattr(compiled._module(), "NUMPY_VERSION", "0.0.0")
        compiled._module.cache_clear()
        try:
            assert type(_chunks(cfg, 0)) is _Generator
        finally:
            monkeypatch.undo()
            compiled._module.cache_clear()


def test_a_generator_subclass_draws_in_python():
    class Mine(np.random.Generator):
        pass

    with core.use("compiled"):
        assert compiled.compiled_draws(Mine(np.random.PCG64(0))) is None
        assert compiled.compiled_draws(np.random.default_rng(0)) is not None


@pytest.mark.parametrize("fields", [
    {"vocab_size": np.int64(1000)}, {"context_len": 50.0}, {"burst_period": np.float64(4.0)}, {"num_bidders": True},
    {"max_session_turns": 3.0, "think_time": 0},
    # Poisson means numpy refuses: NaN, infinite, beyond its largest
    {"user_turn_len": math.nan}, {"urgent_query_len": math.inf}, {"user_turn_len": 1e19}])
def test_numbers_the_compiled_draws_decline_draw_in_python(fields):
    cfg = AgenticConfig(duration=20.0, shape_mix={"session": 1, "fanout": 1, "urgent": 1}, **fields)
    try:
        with core.use("python"):
            expected = list(iter_agentic(cfg, 1))
    except (TypeError, ValueError) as python_error:
        with core.use("compiled"), pytest.raises(type(python_error)):
            list(iter_agentic(cfg, 1))
        return
    with core.use("compiled"):
        assert type(_chunks(cfg, 1)) is _Generator
        _assert_same(expected, list(iter_agentic(cfg, 1)))


def test_a_plain_config_is_drawn_compiled():
    with core.use("compiled"):
        assert type(_chunks(AgenticConfig(burst_period=3, duration=20), 1)) is not _Generator
        assert type(shared_prefix._chunks(SharedPrefixConfig(), 1)) is not shared_prefix._Chunks


@pytest.mark.parametrize("fields", [
    {"shape_mix": {"fanout": 1}, "fanout_width": (1, 2**63 - 1)}, {"shape_mix": {"fanout": 1}, "fanout_width": (2**62, 2**62)},
    {"shape_mix": {"rollout": 1}, "branch_len": 2**62}, {"shape_mix": {"rollout": 1}, "context_len": 2**62}])
def test_episode_sizes_past_int64_are_drawn_in_python(fields):
    """A fan-out or rollout whose token count overflows int64 is drawn by the Python generator,
    which raises numpy's error; the compiled twin's int64 sums would wrap."""
    cfg = AgenticConfig(num_requests=5, **fields)
    with core.use("python"), pytest.raises(ValueError) as python_error:
        list(iter_agentic(cfg, 1))
    with core.use("compiled"):
        assert type(_chunks(cfg, 1)) is _Generator
        with pytest.raises(ValueError) as compiled_error:
            list(iter_agentic(cfg, 1))
    assert str(compiled_error.value) == str(python_error.value)


def test_the_compiled_core_streams_agentic_requests_from_cpp():
    cfg = AgenticConfig(duration=10.0)
    with core.use("compiled"):
        stream = iter_agentic(cfg, 2)
    assert type(stream) is compiled._module().AgenticStream and iter(stream) is stream
    with core.use("python"):
        assert type(iter_agentic(cfg, 2)).__name__ == "generator"


def test_the_compiled_stream_draws_nothing_until_read(monkeypatch):
    started = []
    monkeypatch.setattr(agentic, "_chunks", lambda *a: started.append(a) or _chunks(*a))
    with core.use("compiled"):
        stream = iter_agentic(AgenticConfig(duration=10.0), 2)
    assert not started
    assert next(stream).id == 0 and len(started) == 1
    next(stream)
    assert len(started) == 1


@pytest.mark.parametrize("fields", [{"num_requests": np.int64(45)}, {"vocab_size": np.int64(1000), "duration": 9.0}])
def test_a_stream_the_compiled_chunks_do_not_take_is_read_from_python(fields):
    """The limit or a number the compiled code does not take: the compiled stream reads the
    Python stream, which gives the same requests (ids as Python ints)."""
    _assert_same(*_both(iter_agentic, AgenticConfig(**fields), 4, None))


def test_a_request_field_made_a_property_is_set_through_python(monkeypatch):
    cfg = AgenticConfig(duration=8.0)
    monkeypatch.setattr(Request, "kind", property(lambda self: "changed", lambda self, kind: None))
    python, got = _both(iter_agentic, cfg, 3, None)
    assert got and {r.kind for r in got} == {"changed"}
    _assert_same(python, got)


def test_an_error_ends_the_compiled_stream_as_it_ends_a_generator(monkeypatch):
    def failing(t, cfg):
        calls.append(t)
        if len(calls) == 4:
            raise RuntimeError("wave")
        return wave_shape(t, cfg)

    read = {}
    for which in core.CORES:
        calls = []
        monkeypatch.setattr(agentic, "wave_shape", failing)
        with core.use(which):
            stream = iter_agentic(AgenticConfig(duration=60.0, wave_amplitude=0.5), 5)
        got = []
        with pytest.raises(RuntimeError, match="wave"):
            got.extend(stream)
        assert next(stream, None) is None
        read[which] = got
    _assert_same(read["python"], read["compiled"])


def test_class_draws_replaced_in_python_are_called_from_cpp(monkeypatch):
    """A replaced `_from_normals` (or a class that draws its own way) is called, not stood in for."""
    def doubled(*parameters):
        w, v, out = plain(*parameters)
        return 2 * w, v, out

    plain = classes._from_normals
    assert classes.class_laws(classes.CLASSES["urgent"])[1] is not None
    monkeypatch.setattr(classes, "_from_normals", doubled)
    assert classes.class_laws(classes.CLASSES["urgent"])[1] is None
    cfg = AgenticConfig(duration=10.0, shape_mix={"session": 1, "fanout": 1, "urgent": 1})
    python, got = _both(iter_agentic, cfg, 6, None)
    _assert_same(python, got)
    _assert_same(*_both(iter_shared_prefix, SharedPrefixConfig(num_groups=4, prompts_per_group=8), 6, None))
    monkeypatch.undo()
    assert [r.urgency for r in got] != [r.urgency for r in _both(iter_agentic, cfg, 6, None)[1]]


def test_a_request_class_subclass_draws_through_its_own_from_normals():
    class Mine(classes.RequestClass):
        pass

    mine = Mine(*(getattr(classes.URGENT, f) for f in ("name", *classes._PARAMETERS)))
    assert classes.class_laws(mine)[1] is None and classes.class_laws(classes.URGENT)[1] is not None

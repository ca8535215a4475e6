"""Tests of auction_gym.workload: urgency classes, the synthetic agentic workload, Mooncake replay."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auction_gym import RadixCache, Request
from auction_gym.workload import (
    CLASSES,
    MOONCAKE_MAX_NEW_TOKENS,
    AgenticConfig,
    agentic_workload,
    draw_request_params,
    expand_blocks,
    iter_agentic,
    iter_mooncake,
    load_mooncake,
    mooncake,
)
from auction_gym.workload.agentic import _expected_episode_sizes, in_burst
from auction_gym.workload.mooncake import SAMPLE_TRACE, forget_parsed_lines

SLICE = SAMPLE_TRACE


@pytest.fixture(scope="module")
def slice_records() -> list[dict]:
    return [json.loads(line) for line in SLICE.read_text().splitlines()]


@pytest.fixture(scope="module")
def slice_requests():
    return load_mooncake(SLICE)


# ---------------------------------------------------------------- classes


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_class_draws_match_documented_medians(name):
    cls = CLASSES[name]
    w, v, out = cls.sample(np.random.default_rng(0), 20000)
    assert np.all(w > 0) and np.all(v > 0)
    assert out.dtype == np.int64 and out.min() >= 1 and out.max() <= cls.output_max
    assert np.median(w) == pytest.approx(cls.urgency_median, rel=0.05)
    assert np.median(v / w) == pytest.approx(cls.horizon_median, rel=0.05)
    assert np.median(out) == pytest.approx(cls.output_median, rel=0.05)


def test_class_ordering_and_scalar_draw():
    rng = np.random.default_rng(1)
    w, v, n = draw_request_params("urgent", rng)
    assert isinstance(w, float) and isinstance(v, float) and isinstance(n, int)
    med = {k: c.urgency_median for k, c in CLASSES.items()}
    assert med["urgent"] > med["interactive"] > med["background"] > 0
    with pytest.raises(ValueError, match="unknown request class"):
        draw_request_params("vip", rng)


# ---------------------------------------------------------------- agentic


def _fingerprint(reqs):
    return [
        (r.id, r.bidder, r.tokens.tobytes(), r.arrival, r.kind, r.urgency, r.value, r.output_len)
        for r in reqs
    ]


def test_agentic_benchmark_call_and_determinism():
    cfg = AgenticConfig(num_bidders=16, num_requests=1000)
    a = agentic_workload(cfg, seed=0)
    b = agentic_workload(AgenticConfig(num_bidders=16, num_requests=1000), seed=0)
    c = agentic_workload(cfg, seed=1)
    assert len(a) == len(c) == 1000
    assert _fingerprint(a) == _fingerprint(b)
    assert _fingerprint(a) != _fingerprint(c)
    assert {r.bidder for r in a} == set(range(16))


def assert_pass_request_checks(reqs: list[Request]) -> None:
    """The generator builds requests without Request's checks (Request._unchecked_many); the checked
    constructor must take every one of them as it is."""
    names = [f.name for f in dataclasses.fields(Request)]
    for r in reqs:
        checked = Request(**{name: getattr(r, name) for name in names})
        assert checked.tokens is r.tokens and checked.output_tokens is r.output_tokens
        for name in names:
            assert type(getattr(checked, name)) is type(getattr(r, name)), name
            if name not in ("tokens", "output_tokens"):
                assert getattr(checked, name) == getattr(r, name), name


@pytest.mark.parametrize(
    "cfg", [AgenticConfig(num_requests=500), AgenticConfig(duration=20.0, vocab_size=1000)]
)
def test_agentic_basic_invariants(cfg):
    reqs = agentic_workload(cfg, seed=3)
    assert reqs
    assert_pass_request_checks(reqs)
    assert [r.id for r in reqs] == list(range(len(reqs)))
    arrivals = np.array([r.arrival for r in reqs])
    assert np.all(np.diff(arrivals) >= 0) and arrivals[0] >= 0
    if cfg.num_requests is None:
        assert arrivals[-1] < cfg.duration
    for r in reqs:
        assert 0 <= r.tokens.min() and r.tokens.max() < cfg.vocab_size
        assert 0 <= r.bidder < cfg.num_bidders
        assert r.kind in CLASSES and r.bid == r.urgency > 0 and r.value > 0
        if r.output_tokens is not None:
            assert r.output_tokens.max() < cfg.vocab_size


def test_agentic_max_new_tokens_is_the_class_cap():
    """Every request carries its class's output_max, which its output (clipped to it) never exceeds;
    a configured cap replaces it for all, and the draws are the same."""
    cfg = AgenticConfig(num_requests=2000, shape_mix={"session": 0.4, "fanout": 0.2, "rollout": 0.2, "urgent": 0.2})
    reqs = agentic_workload(cfg, seed=6)
    assert {r.kind for r in reqs} == set(CLASSES)
    assert all(r.max_new_tokens == CLASSES[r.kind].output_max >= r.output_len for r in reqs)
    capped = agentic_workload(dataclasses.replace(cfg, max_new_tokens=np.int64(8192)), seed=6)
    assert_pass_request_checks(capped)
    assert {(type(r.max_new_tokens), r.max_new_tokens) for r in capped} == {(int, 8192)}
    assert _fingerprint(capped) == _fingerprint(reqs)


@pytest.mark.parametrize("cap", [4095, 256, 0, 4096.0, True, "4096"])
def test_agentic_max_new_tokens_below_the_longest_class_output_raises(cap):
    with pytest.raises(ValueError, match=r"max_new_tokens must be None .* or an int >= 4096"):
        agentic_workload(AgenticConfig(num_requests=10, max_new_tokens=cap))


def test_agentic_num_requests_is_a_prefix_by_arrival():
    # The first n requests by arrival do not depend on how many more were asked for.
    small = agentic_workload(AgenticConfig(num_requests=300), seed=5)
    big = agentic_workload(AgenticConfig(num_requests=600), seed=5)
    assert [r.arrival for r in small] == [r.arrival for r in big[:300]]


def test_iter_agentic_streams_the_same_requests():
    """The stream is the list, request for request, whether a duration or a count governs; an hour
    of traffic is drawn only as far as it is read."""
    cfg = AgenticConfig(duration=20.0, burst_period=5.0, burst_duration=1.0)
    assert _fingerprint(list(iter_agentic(cfg, seed=7))) == _fingerprint(agentic_workload(cfg, seed=7))
    first = list(itertools.islice(iter_agentic(AgenticConfig(duration=3600.0), seed=7), 50))
    assert _fingerprint(first) == _fingerprint(agentic_workload(AgenticConfig(num_requests=50), seed=7))


@pytest.mark.parametrize("seed", [0, 1])
def test_agentic_rate_and_mix_match_the_config(seed):
    """Ten minutes of traffic: the long-run arrival rate (with and without bursts), the share of each
    episode shape, the session class mix and the spread over bidders are what the config asks."""
    base = dict(num_bidders=4, duration=600.0, shape_mix={"session": 0.6, "urgent": 0.4}, bidder_heterogeneity=0.0)
    reqs = agentic_workload(AgenticConfig(**base), seed=seed)
    assert len(reqs) / 600.0 == pytest.approx(20.0, rel=0.05)
    sizes = _expected_episode_sizes(AgenticConfig(**base))
    urgent = 0.4 * sizes["urgent"] / (0.4 * sizes["urgent"] + 0.6 * sizes["session"])
    kinds = Counter(r.kind for r in reqs)
    assert kinds["urgent"] / len(reqs) == pytest.approx(urgent, abs=0.02)
    assert kinds["interactive"] / (kinds["interactive"] + kinds["background"]) == pytest.approx(0.85, abs=0.03)
    per_bidder = Counter(r.bidder for r in reqs)
    assert all(abs(per_bidder[b] / len(reqs) - 0.25) < 0.04 for b in range(4))
    bursty = AgenticConfig(**base, burst_period=20.0, burst_factor=3.0, burst_duration=5.0)
    # Documented long-run mean: rate * (1 + (factor - 1) * duration / period) = 30 requests/s.
    assert len(agentic_workload(bursty, seed=seed)) / 600.0 == pytest.approx(30.0, rel=0.05)


def _predecessors(reqs):
    """For each session turn q (a request with a reply), the turn p whose prompt + reply q extends
    directly (the longest such: q also extends all earlier turns of its session)."""
    by_bidder = defaultdict(list)
    for r in reqs:
        if r.output_tokens is not None:
            by_bidder[r.bidder].append(r)
    pred = {}
    for turns in by_bidder.values():
        for q in turns:
            for p in turns:
                full = np.concatenate([p.tokens, p.output_tokens])
                if len(full) < len(q.tokens) and np.array_equal(q.tokens[: len(full)], full):
                    if q.id not in pred or pred[q.id].prompt_len < p.prompt_len:
                        pred[q.id] = p
    return pred


def test_sessions_extend_previous_prompt_and_reply():
    cfg = AgenticConfig(
        num_bidders=4, duration=60.0, rate=10.0, shape_mix={"session": 1.0},
        session_turns=1e9, max_session_turns=5, think_time=0.0,
    )
    reqs = agentic_workload(cfg, seed=2)
    assert all(r.output_tokens is not None and len(r.output_tokens) == r.output_len for r in reqs)
    pred = _predecessors(reqs)
    # Every session has exactly 5 turns: all but the first of each extend their predecessor.
    assert len(reqs) % 5 == 0
    assert len(pred) == len(reqs) - len(reqs) // 5
    by_id = {r.id: r for r in reqs}
    for q, p in pred.items():
        assert p.id < q
        # What follows the quoted reply is the new user message (Poisson(user_turn_len), >= 1).
        assert 1 <= by_id[q].prompt_len - p.prompt_len - p.output_len < 4 * cfg.user_turn_len


def test_session_turns_arrive_after_previous_turn():
    reqs = agentic_workload(AgenticConfig(num_requests=600), seed=4)
    pred = _predecessors(reqs)
    assert len(pred) > 50
    by_id = {r.id: r for r in reqs}
    assert all(by_id[q].arrival > p.arrival for q, p in pred.items())


def _branching_depth(cache: RadixCache) -> int:
    """Max number of nodes with >= 2 children on a root-to-leaf path (root included)."""
    best = 0
    stack = [(cache.root, 0)]
    while stack:
        node, count = stack.pop()
        count += len(node.children) >= 2
        best = max(best, count)
        stack.extend((c, count) for c in node.children.values())
    return best


def test_agentic_radix_tree_is_deep():
    reqs = agentic_workload(AgenticConfig(num_bidders=16, num_requests=1000), seed=0)
    cache = RadixCache()
    for r in reqs:
        cache.insert(r.tokens)
    # root (bidders) -> after system prompt (tools vs urgent) -> after tools (episodes) -> branches
    assert _branching_depth(cache) >= 4
    assert len(cache.root.children) == 16
    # Sharing: far fewer cached tokens than prompt tokens.
    assert cache.total_size < 0.5 * sum(r.prompt_len for r in reqs)


def test_bursts_raise_arrivals_inside_windows():
    base = dict(duration=400.0, rate=5.0, shape_mix={"urgent": 1.0})
    windows = AgenticConfig(burst_period=20.0, burst_duration=5.0, burst_factor=5.0, **base)

    def density_ratio(cfg):
        t = np.array([r.arrival for r in agentic_workload(cfg, seed=0)])
        inside = in_burst(t, windows)
        return (inside.sum() / 5.0) / ((~inside).sum() / 15.0)

    assert density_ratio(windows) > 3.0
    assert 0.6 < density_ratio(AgenticConfig(**base)) < 1.6


@pytest.mark.parametrize(
    "bad",
    [
        dict(rate=0.0),
        dict(burst_period=5.0, burst_duration=6.0),
        dict(shape_mix={"chat": 1.0}),
        dict(shape_mix={"session": 0.0}),
        dict(fanout_width=(3, 2)),
    ],
)
def test_agentic_config_validation(bad):
    with pytest.raises(ValueError):
        agentic_workload(AgenticConfig(**bad))


@pytest.mark.both_cores
@pytest.mark.parametrize("bad", [
    # Drew every episode start at time 0 and never yielded (a hang).
    dict(rate=float("inf")), dict(burst_period=10.0, burst_factor=float("inf")),
    dict(bidder_heterogeneity=float("inf")),
    # Taken as given: no bursts, no requests, a NaN mix, a vocabulary of 0..2.
    dict(burst_period=float("nan")), dict(burst_period=10.0, burst_duration=float("nan")),
    dict(num_requests=float("nan")), dict(wave_amplitude=0.5, wave_offset=float("nan")),
    dict(bidder_heterogeneity=float("nan")), dict(vocab_size=2.5), dict(fanout_width=(2.5, 3)),
    # Failed deep in numpy without the argument's name.
    dict(num_bidders=2.0), dict(num_requests=5.0), dict(system_prompt_len=2.5), dict(max_session_turns=2.5),
    dict(rollouts=2.5), dict(session_turns=float("inf")), dict(fanout_width=(2,)),
])
def test_agentic_config_refuses_what_it_cannot_draw_at_the_call(bad):
    """Every number is checked when the stream is made, naming the field: nothing is drawn yet."""
    with pytest.raises(ValueError, match=list(bad)[-1]):  # the field named last is the bad one
        iter_agentic(AgenticConfig(**bad))


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 60),
    bidders=st.integers(1, 5),
    heterogeneity=st.sampled_from([0.0, 0.5, 10.0]),
)
def test_agentic_property(seed, n, bidders, heterogeneity):
    cfg = AgenticConfig(
        num_bidders=bidders, num_requests=n, vocab_size=500, system_prompt_len=8, tool_defs_len=8,
        context_len=8, bidder_heterogeneity=heterogeneity, burst_period=3.0, burst_duration=1.0,
    )
    reqs = agentic_workload(cfg, seed=seed)
    assert len(reqs) == n
    assert_pass_request_checks(reqs)
    assert [r.id for r in reqs] == list(range(n))
    assert all(a.arrival <= b.arrival for a, b in zip(reqs, reqs[1:]))
    assert all(r.tokens.max() < 500 and 0 <= r.bidder < bidders for r in reqs)


# ---------------------------------------------------------------- mooncake


def test_mooncake_round_trip(slice_records, slice_requests):
    assert len(slice_requests) == len(slice_records) == 1000
    for r, rec in zip(slice_requests, slice_records):
        assert r.prompt_len == rec["input_length"]
        assert r.output_len == rec["output_length"]
        assert r.max_new_tokens == MOONCAKE_MAX_NEW_TOKENS == 2000
        assert r.arrival == rec["timestamp"] / 1000.0
        # Re-blocking the tokens by 512 gives back the block ids and offsets.
        pos = np.arange(r.prompt_len)
        assert np.array_equal(r.tokens // 512, np.asarray(rec["hash_ids"])[pos // 512])
        assert np.array_equal(r.tokens % 512, pos % 512)


def _common(a, b) -> int:
    n = min(len(a), len(b))
    neq = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(neq[0]) if len(neq) else n


def test_mooncake_equal_block_prefixes_iff_equal_token_prefixes(slice_records):
    hashed = load_mooncake(SLICE, vocab_size=32000, limit=400)
    rng = np.random.default_rng(0)
    # Pairs within a conversation (same second block) share long prefixes; random pairs share block 0.
    by_conv = defaultdict(list)
    for i in range(400):
        by_conv[slice_records[i]["hash_ids"][1]].append(i)
    pairs = [(g[0], j) for g in by_conv.values() for j in g[1:]]
    pairs += [tuple(rng.choice(400, 2, replace=False)) for _ in range(100)]
    assert any(len(g) > 1 for g in by_conv.values())
    for i, j in pairs:
        ha, hb = slice_records[i]["hash_ids"], slice_records[j]["hash_ids"]
        k = _common(ha, hb)
        expected = min(hashed[i].prompt_len, hashed[j].prompt_len, k * 512)
        got = _common(hashed[i].tokens, hashed[j].tokens)
        assert got >= expected
        if expected == k * 512 < min(hashed[i].prompt_len, hashed[j].prompt_len):
            assert got < expected + 16  # distinct blocks diverge (all but surely) at once
        assert hashed[i].tokens.max() < 32000


def test_mooncake_time_scale_bidders_and_classes(slice_records, slice_requests):
    fast = load_mooncake(SLICE, time_scale=0.25, limit=200)
    assert [r.arrival for r in fast] == [rec["timestamp"] / 1000.0 * 0.25 for rec in slice_records[:200]]
    # A conversation stays with one bidder.
    owner = {}
    for r, rec in zip(slice_requests, slice_records):
        assert owner.setdefault(rec["hash_ids"][1], r.bidder) == r.bidder
    assert {r.bidder for r in slice_requests} == set(range(8))
    kinds = {k: sum(r.kind == k for r in slice_requests) for k in CLASSES}
    assert 40 < kinds["urgent"] < 170 and kinds["interactive"] > kinds["background"] > 200
    assert all(r.bid == r.urgency > 0 and r.value > 0 for r in slice_requests)
    other = load_mooncake(SLICE, seed=1, num_bidders=3, limit=200)
    assert [r.bidder for r in other] != [r.bidder for r in slice_requests[:200]]
    assert all(0 <= r.bidder < 3 for r in other)


@pytest.mark.parametrize("start,limit", [(0, 10), (137, 200), (990, 50), (1000, 5), (5, 0)])
def test_mooncake_slicing_is_stable(slice_requests, start, limit):
    part = load_mooncake(SLICE, start=start, limit=limit)
    ref = slice_requests[start : start + limit]
    assert len(part) == len(ref)
    for a, b in zip(part, ref):
        assert (a.id, a.bidder, a.kind, a.urgency, a.value, a.arrival, a.output_len) == (
            b.id, b.bidder, b.kind, b.urgency, b.value, b.arrival, b.output_len
        )
        assert np.array_equal(a.tokens, b.tokens)


def test_mooncake_max_new_tokens_argument(tmp_path, slice_records):
    """None: each request's own output_length; a cap below a line's output_length raises naming the
    file and line, after the lines before it loaded; the other fields do not depend on the cap."""
    own = load_mooncake(SLICE, max_new_tokens=None, limit=100)
    assert all(r.max_new_tokens == r.output_len for r in own)
    assert [r.output_len for r in own] == [rec["output_length"] for rec in slice_records[:100]]
    wide = load_mooncake(SLICE, max_new_tokens=np.int64(4096), limit=100)
    assert all(type(r.max_new_tokens) is int and r.max_new_tokens == 4096 for r in wide)
    assert [(r.bidder, r.kind, r.value, r.output_len) for r in wide] == [
        (r.bidder, r.kind, r.value, r.output_len) for r in own]
    first_over = next(i for i, rec in enumerate(slice_records) if rec["output_length"] > 500)
    it = iter_mooncake(SLICE, max_new_tokens=500)
    assert [next(it).id for _ in range(first_over)] == list(range(first_over))
    with pytest.raises(ValueError, match=rf"conversation_slice\.jsonl: line {first_over + 1}: output_length "
                                         r"\d+ exceeds max_new_tokens = 500"):
        next(it)


def test_mooncake_lines_read_again_give_new_requests_with_the_runs_time_scale(slice_records):
    """A line read again (its derivation kept) gives a new Request, equal field for field to a
    first read's, its arrival on the new read's time scale."""
    first = load_mooncake(SLICE, limit=50)
    again = load_mooncake(SLICE, limit=50, time_scale=3.0)
    assert not set(map(id, first)) & set(map(id, again))
    assert [r.arrival for r in again] == [rec["timestamp"] / 1000.0 * 3.0 for rec in slice_records[:50]]
    for a, b in zip(first, again):
        assert (a.id, a.bidder, a.kind, a.urgency, a.value, a.output_len) == (
            b.id, b.bidder, b.kind, b.urgency, b.value, b.output_len)
        assert np.array_equal(a.tokens, b.tokens) and not b.tokens.flags.writeable


def test_mooncake_malformed_line_raises_at_every_read(tmp_path):
    path = tmp_path / "broken_trace.jsonl"
    path.write_text("\n".join([GOOD, "not json"]) + "\n")
    for _ in range(2):
        with pytest.raises(ValueError, match=r"broken_trace\.jsonl: line 2\b"):
            load_mooncake(path)


@pytest.mark.parametrize("argument,value", [("num_bidders", 8.0), ("block_size", 512.0)])
def test_mooncake_a_float_argument_reads_alike_before_and_after_the_int(argument, value):
    """The kept derivations are told apart by type: 8.0 and 8 are equal keys but not equal reads
    (a float's remainder is a float; a float block size is refused)."""
    def read(v):
        try:
            return [(type(r.bidder), r.bidder, r.tokens.tolist()) for r in load_mooncake(SLICE, limit=5, **{argument: v})]
        except ValueError as e:
            return str(e)

    alone = []
    for v in (value, int(value)):
        forget_parsed_lines()
        alone.append(read(v))
    assert alone[0] != alone[1]
    forget_parsed_lines()
    assert [read(value), read(int(value))] == alone
    forget_parsed_lines()
    assert [read(int(value)), read(value)] == alone[::-1]


_FIELDS = ("id", "bidder", "tokens", "bid", "output_len", "arrival", "value", "urgency", "output_tokens", "kind",
           "max_new_tokens")


def _as_read(r: Request) -> tuple:
    """Every field of `r`, with its type, tokens as (dtype, writeable, ids): what two reads must share."""
    def field(name):
        v = getattr(r, name)
        return (type(v), v.dtype, v.flags.writeable, v.tolist()) if isinstance(v, np.ndarray) else (type(v), v)
    return tuple(field(name) for name in _FIELDS)


@pytest.mark.parametrize("kwargs", [{}, {"time_scale": np.float64(2.5), "num_bidders": 3},
                                    {"vocab_size": 32000, "max_new_tokens": None}])
def test_mooncake_requests_are_those_of_the_checked_constructor_whatever_the_lines_kept(kwargs):
    """A line's seed-free part (`_line`: its JSON, checks and tokens) is kept across seeds, and its
    request built without `Request`'s checks: each seed's requests, read after another seed's, are
    those read with nothing kept, and those `Request`'s checked constructor builds of the same fields."""
    def read(seed):
        return load_mooncake(SLICE, limit=40, seed=seed, **kwargs)

    forget_parsed_lines()
    cold = [_as_read(r) for r in read(2)]
    forget_parsed_lines()
    read(1)
    hits = mooncake._line.cache_info().hits
    warm = read(2)
    assert mooncake._line.cache_info().hits == hits + 40  # every line's tokens read again from the first seed's
    assert [_as_read(r) for r in warm] == cold
    checked = [Request(**{name: getattr(r, name) for name in _FIELDS}) for r in warm]
    assert [_as_read(r) for r in checked] == cold


@pytest.mark.parametrize("hash_ids,message", [
    ("[0, %d]" % 2**54, r"tokens must be non-negative token ids"),
    ("[%d, 1]" % 2**55, r".*2\*\*6"),
    ("[%d, 1]" % 2**63, r".*2\*\*6"),
])
def test_mooncake_block_ids_whose_tokens_pass_int64_name_the_line(tmp_path, hash_ids, message):
    """Block ids whose token ids pass int64 are refused where the line is read, checked once per
    line, not per request: block 2**55 of 512 tokens wrapped past 2**64 onto block 0's token ids (a
    silent prefix match), and a block id of 2**63 or more failed with an OverflowError naming no line."""
    path = tmp_path / "huge_ids.jsonl"
    path.write_text("\n".join([GOOD, GOOD.replace("[0, 1]", hash_ids)]) + "\n")
    it = iter_mooncake(path)
    assert next(it).id == 0
    with pytest.raises(ValueError, match=r"huge_ids\.jsonl: line 2: " + message):
        next(it)


GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}'


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        "[1, 2]",
        '{"timestamp": 0, "input_length": 600, "output_length": 5}',
        '{"timestamp": 0, "input_length": "600", "output_length": 5, "hash_ids": [0, 1]}',
        '{"timestamp": 0, "input_length": 600, "output_length": -1, "hash_ids": [0, 1]}',
        '{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [0, 1]}',
        '{"timestamp": 0, "input_length": 600, "output_length": 2001, "hash_ids": [0, 1]}',  # > the cap
        '{"timestamp": -5, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}',
        '{"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [0, 1]}',
        '{"timestamp": 0, "input_length": 512, "output_length": 5, "hash_ids": [0, 1]}',
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, -1]}',
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": []}',
    ],
)
def test_mooncake_malformed_line(tmp_path, bad):
    path = tmp_path / "broken_trace.jsonl"
    path.write_text("\n".join([GOOD, GOOD, bad, GOOD]) + "\n")
    it = iter_mooncake(path)
    # Lazy: the lines before the bad one are read without error.
    assert [next(it).id, next(it).id] == [0, 1]
    with pytest.raises(ValueError, match=r"broken_trace\.jsonl: line 3\b"):
        next(it)


def _line(timestamp: float) -> str:
    return GOOD.replace('"timestamp": 0', f'"timestamp": {timestamp}')


def test_mooncake_non_utf8_line_names_file_and_line(tmp_path):
    path = tmp_path / "latin1_trace.jsonl"
    path.write_bytes((GOOD + "\n" + GOOD + "\n").encode() + b'{"timestamp": 0, "x\xff": 1}\n')
    it = iter_mooncake(path)
    assert [next(it).id, next(it).id] == [0, 1]  # the lines before the bad bytes still load
    with pytest.raises(ValueError, match=r"latin1_trace\.jsonl: line 3: not UTF-8"):
        next(it)


def test_mooncake_unsorted_timestamps_name_file_and_line(tmp_path):
    path = tmp_path / "shuffled.jsonl"
    path.write_text("\n".join([_line(0), _line(10), _line(10), _line(5)]) + "\n")
    it = iter_mooncake(path, time_scale=0.5)
    assert [next(it).id for _ in range(3)] == [0, 1, 2]  # equal timestamps are in order
    with pytest.raises(ValueError, match=r"shuffled\.jsonl: line 4: timestamp out of order.*sorted"):
        next(it)
    # A slice is checked from its own first line: line 4 after line 3 is still out of order.
    with pytest.raises(ValueError, match=r"line 4"):
        load_mooncake(path, start=2)
    assert [r.id for r in load_mooncake(path, start=3)] == [3]


@pytest.mark.parametrize(
    "bad", [dict(time_scale=0.0), dict(start=-1), dict(num_bidders=0), dict(class_mix={"vip": 1.0}),
            dict(max_new_tokens=0), dict(max_new_tokens=True), dict(max_new_tokens=2000.0),
            # A float bidder count made float (NaN: NaN) bidders; the others failed deep in a line.
            dict(num_bidders=1.5), dict(num_bidders=float("nan")), dict(seed=1.5), dict(start=1.5),
            dict(limit=float("nan")), dict(block_size=2.5), dict(vocab_size=2.5), dict(vocab_size=2**64),
            dict(time_scale=float("inf"))]
)
def test_mooncake_bad_arguments_raise_at_call(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        iter_mooncake(SLICE, **bad)


def test_mooncake_takes_numpy_ints_as_ints():
    """A numpy bidder count overflowed the hashes' Python ints; it reads as the same int now."""
    as_int = [(r.bidder, r.arrival) for r in itertools.islice(iter_mooncake(SLICE, num_bidders=3, seed=2), 20)]
    numpy = itertools.islice(iter_mooncake(SLICE, num_bidders=np.int64(3), seed=np.int64(2)), 20)
    assert [(r.bidder, r.arrival) for r in numpy] == as_int
    assert all(type(b) is int for b, _ in as_int)




def test_mooncake_blank_lines_are_skipped_but_counted(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(GOOD + "\n\n" + GOOD + "\n")
    assert [r.id for r in load_mooncake(path)] == [0, 2]


@settings(max_examples=60, deadline=None)
@given(
    a=st.lists(st.integers(0, 6), min_size=1, max_size=6),
    b=st.lists(st.integers(0, 6), min_size=1, max_size=6),
    cut_a=st.integers(0, 3),
    cut_b=st.integers(0, 3),
    vocab=st.sampled_from([None, 7, 1000]),
)
def test_expand_blocks_prefix_property(a, b, cut_a, cut_b, vocab):
    bs = 4
    la, lb = len(a) * bs - cut_a, len(b) * bs - cut_b
    ta, tb = expand_blocks(a, la, bs, vocab), expand_blocks(b, lb, bs, vocab)
    assert len(ta) == la and len(tb) == lb
    if vocab is not None:
        assert ta.min() >= 0 and ta.max() < vocab
    common_blocks = _common(a, b)
    expected = min(la, lb, common_blocks * bs)
    if vocab is None:
        assert _common(ta, tb) == expected  # injective: equal token prefixes <=> equal block prefixes
    else:
        assert _common(ta, tb) >= expected
    with pytest.raises(ValueError):
        expand_blocks(a, len(a) * bs + 1, bs, vocab)

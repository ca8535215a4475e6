"""Pinned workloads: a digest of every field of every request that the agentic, shared-prefix and
Mooncake workloads generate, for several configurations and seeds.

The generators draw in batches and build requests without `Request`'s checks, for speed; any change
to what they draw, in which order or in which sizes, or to how a request is put together, changes
some request and fails here. Floats are hashed at 12 significant digits (far finer than any change
of draws, coarser than the last bit a CPU's exp may round differently); ints, strings and token ids
exactly. If a change of the workloads is meant, put the digest the failure prints in DIGESTS and
name the change in the commit message.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from auction_gym import Request
from auction_gym.workload import AgenticConfig, SharedPrefixConfig, iter_mooncake
from auction_gym.workload.agentic import iter_agentic
from auction_gym.workload.mooncake import SAMPLE_TRACE
from auction_gym.workload.shared_prefix import iter_shared_prefix

FIELD_TYPES = {"id": int, "bidder": int, "tokens": np.ndarray, "bid": float, "output_len": int, "arrival": float,
               "value": float, "urgency": float, "kind": str, "max_new_tokens": int}

V1_LIKE = dict(num_bidders=4, rate=40.0, bidder_heterogeneity=0.0, shape_mix={"session": 0.6, "urgent": 0.4},
               wave_amplitude=0.5, wave_period=12.0, wave_offset=10.0)
ALL_SHAPES = {"session": 0.4, "fanout": 0.2, "rollout": 0.15, "urgent": 0.25}

WORKLOADS = {
    "agentic/default/0": lambda: iter_agentic(AgenticConfig(num_requests=600), 0),
    "agentic/default/5": lambda: iter_agentic(AgenticConfig(num_requests=600), 5),
    "agentic/v1/1": lambda: iter_agentic(AgenticConfig(duration=40.0, **V1_LIKE), 1),
    "agentic/v1/2": lambda: iter_agentic(AgenticConfig(duration=40.0, **V1_LIKE), 2),
    "agentic/bursts/7": lambda: iter_agentic(AgenticConfig(
        num_requests=800, shape_mix=ALL_SHAPES, bidder_heterogeneity=3.0, burst_period=6.0, burst_duration=2.0,
        think_time=0.0, max_new_tokens=8192), 7),
    "agentic/branches/2": lambda: iter_agentic(AgenticConfig(
        duration=15.0, vocab_size=1000, shape_mix={"fanout": 0.5, "rollout": 0.5}, fanout_width=(1, 3)), 2),
    "agentic/one_class/4": lambda: iter_agentic(AgenticConfig(
        num_bidders=3, duration=20.0, session_class_mix={"background": 1.0}, max_session_turns=2), 4),
    "shared_prefix/default/0": lambda: iter_shared_prefix(SharedPrefixConfig(), 0),
    "shared_prefix/ranged/3": lambda: iter_shared_prefix(SharedPrefixConfig(
        num_groups=9, prompts_per_group=7, system_prompt_len=300, question_len=40, output_len=64, range_ratio=0.5,
        burst_period=4.0, burst_duration=1.0, class_mix={"urgent": 1.0}, max_new_tokens=128), 3),
    "mooncake/slice/1": lambda: iter_mooncake(SAMPLE_TRACE, seed=1, limit=300, vocab_size=1000, time_scale=2.0),
}

DIGESTS = {
    "agentic/default/0": "b93b83d0373dd263",
    "agentic/default/5": "4451322958dca7e6",
    "agentic/v1/1": "7f842ca0ed4a702a",
    "agentic/v1/2": "e8fbc48f6ab797f6",
    "agentic/bursts/7": "e3bf47e6b670cabc",
    "agentic/branches/2": "f23fc85870227b27",
    "agentic/one_class/4": "44d4d8f0ef969dc0",
    "shared_prefix/default/0": "260b52f485a165a6",
    "shared_prefix/ranged/3": "ed6398b6d54ffa7a",
    "mooncake/slice/1": "4844b905be8ae909",
}


def _tokens(arr: np.ndarray | None) -> bytes:
    if arr is None:
        return b"none"
    assert arr.dtype == np.int64 and arr.ndim == 1 and not arr.flags.writeable
    return arr.size.to_bytes(8, "little") + arr.tobytes()


def digest(requests) -> tuple[str, int]:
    """The digest of `requests` and their number; asserts each field's type on the way."""
    h, n = hashlib.sha256(), 0
    for n, r in enumerate(requests, start=1):
        for name, kind in FIELD_TYPES.items():
            assert type(getattr(r, name)) is kind, (r.id, name)
        assert r.id == n - 1
        floats = ",".join(f"{x:.12g}" for x in (r.bid, r.arrival, r.value, r.urgency))
        h.update(f"{r.id},{r.bidder},{r.output_len},{r.kind},{r.max_new_tokens},{floats};".encode())
        h.update(_tokens(r.tokens))
        h.update(_tokens(r.output_tokens))
    return h.hexdigest()[:16], n


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_generated_requests_match_their_pinned_digest(name):
    got, n = digest(WORKLOADS[name]())
    assert n > 50, f"{name}: only {n} requests"
    assert got == DIGESTS[name], f"{name}: digest {got} over {n} requests"


@pytest.mark.parametrize("name", ["agentic/bursts/7", "shared_prefix/ranged/3"])
def test_the_checked_constructor_takes_every_generated_request_as_it_is(name):
    names = [f.name for f in dataclasses.fields(Request)]
    for r in WORKLOADS[name]():
        checked = Request(**{f: getattr(r, f) for f in names})
        assert checked.tokens is r.tokens and checked.output_tokens is r.output_tokens
        assert all(getattr(checked, f) == getattr(r, f) for f in names if f not in ("tokens", "output_tokens"))


def test_a_changed_draw_changes_the_digest():
    reference, _ = digest(WORKLOADS["agentic/v1/1"]())
    other, _ = digest(iter_agentic(AgenticConfig(duration=40.0, **{**V1_LIKE, "rate": 40.5}), 1))
    assert other != reference

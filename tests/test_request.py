"""Tests of Request's checks: its id, its bidder, and its token counts (output_len and max_new_tokens, the
client's cap)."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import Request


def test_max_new_tokens_defaults_to_output_len():
    assert Request(0, 0, [1, 2], output_len=7).max_new_tokens == 7
    assert Request(0, 0, [1, 2]).max_new_tokens == 1  # output_len's default


@pytest.mark.parametrize("cap", [7, 4096, np.int64(9), 8.0, np.float64(8.0)])
def test_max_new_tokens_takes_integers_at_least_output_len_as_int(cap):
    r = Request(0, 0, [1, 2], output_len=7, max_new_tokens=cap)
    assert r.max_new_tokens == cap and type(r.max_new_tokens) is int


@pytest.mark.parametrize("cap", [6, 0, -1, True, 7.5, float("inf"), float("nan"), "8", [8]])
def test_max_new_tokens_below_output_len_or_not_an_int_raises(cap):
    with pytest.raises(ValueError, match=r"request 3: max_new_tokens must be an int >= output_len = 7"):
        Request(3, 0, [1, 2], output_len=7, max_new_tokens=cap)


@pytest.mark.parametrize("out", [0, -3, True, 2.5, float("inf"), float("nan"), "4"])
def test_output_len_not_a_positive_int_raises(out):
    with pytest.raises(ValueError, match=r"request 3: output_len must be"):
        Request(3, 0, [1, 2], output_len=out)


@pytest.mark.parametrize("rid", [0, -5, 2**63 - 1, -(2**63), np.int64(7), np.uint64(2**63 - 1)])
def test_an_id_within_64_bits_is_taken(rid):
    assert Request(rid, 0, [1, 2]).id == rid


@pytest.mark.parametrize("rid", [2**63, -(2**63) - 1, 2**70, np.uint64(2**63), True, 3.0, "3", None])
def test_an_id_that_is_not_an_int_within_64_bits_raises(rid):
    """Both engines key their state by int64 ids; a larger one failed deep inside either."""
    with pytest.raises(ValueError, match=r"request id must be an int within 64 bits"):
        Request(rid, 0, [1, 2])


@pytest.mark.parametrize("bidder", [0, 3, np.int64(2), 2**63 - 1])
def test_a_bidder_that_is_an_int_at_least_0_is_taken(bidder):
    assert Request(0, bidder, [1, 2]).bidder == bidder


@pytest.mark.parametrize("bidder", [-1, np.int64(-2), 2**63, True, 1.0, "1", None])
def test_a_bidder_that_is_not_an_int_at_least_0_raises(bidder):
    """A negative bidder indexed a market's per-bidder lists from their end: another bidder's
    multiplier, budget and costs, without an error."""
    with pytest.raises(ValueError, match=r"request 4: bidder must be an int >= 0"):
        Request(4, bidder, [1, 2])


@pytest.mark.both_cores
def test_a_request_whose_bidder_has_no_multiplier_is_named():
    from auction_gym import EngineConfig, SimEngine

    engine = SimEngine("radix_vcg", EngineConfig())
    engine.submit([Request(0, 0, [1, 2, 3], bid=1.0), Request(1, 2, [1, 2], bid=1.0)])
    with pytest.raises(ValueError, match=r"request 1 is bidder 2's, but the round has 2 multipliers"):
        engine.step([1.0, 1.0])

"""Tests of Request's checks of its token counts: output_len and max_new_tokens (the client's cap)."""

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

"""The shared "is an integer count" check (`auction_gym._checks`) and the six places that use it:
each takes integer values, numpy's included, and rejects the rest with a ValueError naming the field."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import EngineConfig, RadixCache, Request
from auction_gym._checks import check_count, is_int, is_real
from auction_gym.market import MarketConfig
from auction_gym.scheduler import make_scheduler


@pytest.mark.parametrize("x", [0, 5, -3, 5.0, np.int64(7), np.float64(2.0), 10**30])
def test_is_int_takes_integer_values(x):
    assert is_int(x)


@pytest.mark.parametrize("x", [True, False, 2.5, float("inf"), float("nan"), None, "4", [4], 1j])
def test_is_int_rejects_the_rest_without_raising(x):
    assert not is_int(x)


@pytest.mark.parametrize("x, real", [(2, True), (2.5, True), (np.float32(0.1), True), (np.int64(3), True),
                                     (float("nan"), True), (True, False), (np.bool_(True), False), ("2", False),
                                     (None, False), ([2.0], False), (1j, False)])
def test_is_real_takes_numbers_of_any_kind_but_bools(x, real):
    assert is_real(x) is real


def test_check_count_returns_an_int_and_names_the_field():
    assert check_count("n", 4.0) == 4 and type(check_count("n", np.int64(4))) is int
    with pytest.raises(ValueError, match=r"^n must be a positive int, got 0$"):
        check_count("n", 0)
    with pytest.raises(ValueError, match=r"^n must be an int >= 0, got -1$"):
        check_count("n", -1, 0)


SITES = {
    "kv_capacity_tokens": lambda v: EngineConfig(kv_capacity_tokens=v),
    "page_size": lambda v: RadixCache(page_size=v),
    "k": lambda v: make_scheduler("klpm", k=v),
    "fcfs_above": lambda v: make_scheduler("lpm", fcfs_above=v),
    "num_bidders": lambda v: MarketConfig(num_bidders=v),
    "horizon": lambda v: MarketConfig(horizon=v),
    "output_len": lambda v: Request(0, 0, [1], output_len=v),
}


@pytest.mark.parametrize("name", SITES)
@pytest.mark.parametrize("bad", [True, 2.5, float("inf"), float("nan"), "4", -1])
def test_every_site_rejects_a_non_count_with_a_value_error(name, bad):
    """inf, nan and None used to escape some of them as OverflowError or TypeError."""
    with pytest.raises(ValueError, match=name):
        SITES[name](bad)


@pytest.mark.parametrize("name", [n for n in SITES if n != "fcfs_above"])
def test_none_is_not_a_count(name):
    with pytest.raises(ValueError, match=name):
        SITES[name](None)


@pytest.mark.parametrize("name", SITES)
def test_every_site_takes_a_numpy_int(name):
    """EngineConfig used to reject np.int64, which the other sites took."""
    SITES[name](np.int64(4))

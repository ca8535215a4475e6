"""The shared "is an integer count" check (`auction_gym._checks`) and the six places that use it:
each takes integer values, numpy's included, and rejects the rest with a ValueError naming the field;
and the range check of a number setting (`check_number`) that the routers and the workloads share."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import EngineConfig, RadixCache, Request
from auction_gym._checks import check_count, check_number, is_int, is_real
from auction_gym.cluster import make_router
from auction_gym.market import MarketConfig
from auction_gym.scheduler import make_scheduler
from auction_gym.workload import AgenticConfig, iter_agentic


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


def test_check_number_returns_the_value_and_says_the_range():
    assert check_number("x", 0.5, 0, 1) == 0.5 and check_number("x", np.float32(2), 1) == 2
    assert check_number("x", float("inf"), 0, above=True) == float("inf")
    for value, kwargs, message in [
        (1.5, {"least": 0, "most": 1}, "x must be a number in [0, 1], got 1.5"),
        (0, {"least": 0, "above": True, "unit": "(s)"}, "x must be a number > 0 (s), got 0"),
        (float("inf"), {"least": 0, "finite": True}, "x must be a finite number >= 0, got inf"),
        (float("nan"), {}, "x must be a number, got nan"),
        (True, {"least": 0, "most": 1}, "x must be a number in [0, 1], got True"),
        ("1", {"least": 0}, "x must be a number >= 0, got '1'"),
        (None, {"least": 0}, "x must be a number >= 0, got None"),
    ]:
        with pytest.raises(ValueError) as error:
            check_number("x", value, **kwargs)
        assert str(error.value) == message


NUMBER_SITES = {
    "cache_threshold": lambda v: make_router("cache_aware", cache_threshold=v),
    "balance_rel_threshold": lambda v: make_router("cache_aware", balance_rel_threshold=v),
    "eviction_interval": lambda v: make_router("cache_aware", eviction_interval=v),
    "overlap_weight": lambda v: make_router("kv_overlap", overlap_weight=v),
    "temperature": lambda v: make_router("kv_overlap", temperature=v),
    "rate": lambda v: iter_agentic(AgenticConfig(rate=v)),
    "session_turns": lambda v: iter_agentic(AgenticConfig(session_turns=v)),
}


@pytest.mark.parametrize("name", NUMBER_SITES)
def test_every_number_setting_refuses_a_bool_and_takes_numpys_floats(name):
    """A bool given for a number is refused, as the counts refuse it; numpy's float32 (no Python float) is taken."""
    with pytest.raises(ValueError, match=f"^{name} must be a"):
        NUMBER_SITES[name](True)
    NUMBER_SITES[name](np.float32(1.0))

"""The engine's rules are one object built from `EngineConfig.reservation` (`engine/rules.py`),
and the names that moved for it keep their old paths as aliases that warn once."""

from __future__ import annotations

import importlib
import warnings

import pytest

from auction_gym.engine import EngineConfig, SimEngine
from auction_gym.engine.rules import RULES, OracleRules, SGLangRules, rules_for
from auction_gym.engine.sim_engine import PythonSimEngine
from auction_gym.prefix_matcher import PrefixMatcher
from auction_gym.request import Request
from auction_gym.waiting_prefixes import WaitingPrefixes

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator


def _requests() -> list[Request]:
    """Two requests whose caps are their outputs: SGLang's ratio under-reserves them in a pool
    of 1,700 tokens, so one is retracted mid-decode."""
    return [Request(id=i, bidder=0, tokens=list(range(10**5 * i, 10**5 * i + 200)), bid=1.0, output_len=700,
                    max_new_tokens=700, arrival=0.05 * i) for i in range(2)]


@pytest.mark.parametrize("reservation,kind", [("sglang", SGLangRules), ("oracle", OracleRules)])
def test_the_config_selects_the_rule_set_the_engine_is_given(reservation, kind):
    config = EngineConfig(reservation=reservation)
    assert type(rules_for(config)) is kind and type(PythonSimEngine("fcfs", config).rules) is kind
    assert RULES[reservation] is kind


def test_an_engine_given_rules_runs_by_them():
    """Rules passed to the engine are the ones it follows, whatever the config names: the exact
    ones hold each output from admission on and retract nothing where SGLang's retract."""
    config = EngineConfig(kv_capacity_tokens=1700, chunked_prefill_size=None)
    assert SimEngine("fcfs", config).run(_requests()).retractions == 1
    oracle = SimEngine("fcfs", config, rules=OracleRules(config))
    assert oracle.run(_requests()).finished == 2 and oracle.metrics().retractions == 0
    assert oracle.new_token_ratio == config.init_new_token_ratio
    assert oracle.reserved == 0 and oracle.cache.protected_size == 0


def test_an_unknown_rule_set_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="reservation must be one of sglang, oracle"):
        EngineConfig(reservation="psychic")


def test_the_engine_reads_its_waiting_prefixes_from_its_rules():
    engine = PythonSimEngine("lpm")
    assert engine.waiting_prefixes is engine.rules.waiting_prefixes
    assert isinstance(engine.waiting_prefixes, WaitingPrefixes)


@pytest.mark.parametrize("module,name,new", [
    ("auction_gym.scheduler", "WaitingPrefixes", WaitingPrefixes),
    ("auction_gym.scheduler.waiting", "WaitingPrefixes", WaitingPrefixes),
    ("auction_gym.scheduler.prefix_matcher", "PrefixMatcher", PrefixMatcher),
    ("auction_gym.engine.reservation", "AdmissionRules", rules_for),
])
def test_a_moved_name_keeps_its_old_path_and_warns_once(module, name, new):
    old = importlib.reload(importlib.import_module(module))  # a fresh module: nothing warned yet
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert getattr(old, name) is new and getattr(old, name) is new
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1 and f"{module}.{name} is deprecated" in str(deprecations[0].message)


def test_the_old_admission_rules_name_builds_the_configs_rule_set():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from auction_gym.engine.reservation import AdmissionRules
    assert type(AdmissionRules(EngineConfig(reservation="oracle"))) is OracleRules

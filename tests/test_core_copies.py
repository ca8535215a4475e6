"""Copies of components built on the Python core while the compiled core is active: `copy.deepcopy`
and pickle rebuild them in Python (`core.EitherCore`), not as the compiled twin their constructor
would give, and a copy runs on as the original does."""

import copy
import pickle

import pytest

from auction_gym import core, make_scheduler, scheduler_names
from auction_gym.engine import EngineConfig, SimEngine
from auction_gym.prefix_matcher import PrefixMatcher
from auction_gym.radix_cache import RadixCache
from auction_gym.waiting_prefixes import WaitingPrefixes
from auction_gym.workload import agentic_workload

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core (auction_gym._core) is not built")

COPIES = {"deepcopy": copy.deepcopy, "pickle": lambda obj: pickle.loads(pickle.dumps(obj))}


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("name", scheduler_names())
def test_a_policy_built_in_python_copies_as_python(name, how):
    with core.use("python"):
        policy = make_scheduler(name)
    with core.use("compiled"):
        copied = COPIES[how](policy)
    assert type(copied) is type(policy)
    assert {k: type(v) for k, v in vars(copied).items()} == {k: type(v) for k, v in vars(policy).items()}


@pytest.mark.parametrize("how", COPIES)
def test_a_python_cache_and_matchers_copy_as_python(how):
    with core.use("python"):
        cache, matcher, prefixes = RadixCache(), PrefixMatcher(split=True), WaitingPrefixes()
    cache.insert([1, 2, 3, 4])
    with core.use("compiled"):
        copies = [COPIES[how](obj) for obj in (cache, matcher, prefixes)]
    assert [type(c) for c in copies] == [RadixCache, PrefixMatcher, WaitingPrefixes]
    assert copies[0].prefix_len([1, 2, 3, 9]) == 3 and copies[1].split


def test_a_python_engine_copied_mid_run_runs_on_as_the_original():
    requests = agentic_workload(seed=3)[:120]
    with core.use("python"):
        engine = SimEngine("lpm", EngineConfig(kv_capacity_tokens=20_000))
    engine.submit(requests)
    for _ in range(40):
        engine.step()
    with core.use("compiled"):
        twin = copy.deepcopy(engine)
    assert type(twin) is SimEngine
    assert twin.run() == engine.run()

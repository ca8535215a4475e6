"""Fixtures several test modules share."""

from __future__ import annotations

import pytest

from auction_gym import core
from auction_gym.envs import RadixAuctionEnv


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "both_cores: run the test on each core of the simulator, Python and compiled (auction_gym.core)")


def pytest_generate_tests(metafunc) -> None:
    """A test marked `both_cores` runs once per core (`simulator_core`)."""
    if metafunc.definition.get_closest_marker("both_cores") is not None:
        metafunc.fixturenames.append("simulator_core")
        metafunc.parametrize("simulator_core", core.CORES, indirect=True)


@pytest.fixture
def simulator_core(request):
    """The core the test's components are built on (`core.use`); the compiled one skips when it is
    not built."""
    if request.param == "compiled" and core.compiled_module() is None:
        pytest.skip("the compiled core (auction_gym._core) is not built")
    with core.use(request.param):
        yield request.param


@pytest.fixture
def played_seeds(monkeypatch) -> list:
    """The seed of every `RadixAuctionEnv.reset` in the test, in order (None for an unseeded one):
    what a learner or a search played, to check it never plays an evaluation seed."""
    played = []
    reset = RadixAuctionEnv.reset

    def recording(self, *, seed=None, options=None):
        played.append(seed)
        return reset(self, seed=seed, options=options)

    monkeypatch.setattr(RadixAuctionEnv, "reset", recording)
    return played

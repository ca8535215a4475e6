"""Fixtures several test modules share."""

from __future__ import annotations

import pytest

from auction_gym import core
from auction_gym.envs import RadixAuctionEnv


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "both_cores: run the test on each core of the simulator, Python and compiled (auction_gym.core)")


def pytest_generate_tests(metafunc) -> None:
    """A test marked `both_cores` runs once per core: its id names the core (`on_core` enters it)."""
    if metafunc.definition.get_closest_marker("both_cores") is not None:
        metafunc.fixturenames.append("simulator_core")
        metafunc.parametrize("simulator_core", core.CORES)


@pytest.fixture(autouse=True)
def on_core(request):
    """Build a `both_cores` test's components on its core (`core.use`); the compiled one skips when
    it is not built. Other tests run on the default core (`core.active()`)."""
    callspec = getattr(request.node, "callspec", None)
    which = None if callspec is None else callspec.params.get("simulator_core")
    if which is None:
        yield None
        return
    if which == "compiled" and core.compiled_module() is None:
        pytest.skip("the compiled core (auction_gym._core) is not built")
    with core.use(which):
        yield which


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

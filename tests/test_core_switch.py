"""The core switch (auction_gym.core): which implementation a component is built on, and what a run
records of it."""

from __future__ import annotations

import warnings

import pytest

from auction_gym import core
from experiments.provenance import machine


def test_an_unknown_core_is_refused(monkeypatch):
    with pytest.raises(ValueError, match="core must be one of"):
        core.check_core("fast")
    monkeypatch.setenv(core.ENV_VAR, "fast")
    with pytest.raises(ValueError, match="core must be one of"):
        core.active()


def test_the_environment_variable_picks_the_core_and_use_overrides_it(monkeypatch):
    monkeypatch.setenv(core.ENV_VAR, "python")
    assert core.active() == "python"
    if core.compiled_module() is not None:
        with core.use("compiled"):
            assert core.active() == "compiled"
            with core.use("python"):
                assert core.active() == "python"
            assert core.active() == "compiled"
    assert core.active() == "python"


def test_the_default_is_the_compiled_core_when_it_is_built(monkeypatch):
    monkeypatch.delenv(core.ENV_VAR, raising=False)
    assert core.active() == ("compiled" if core.compiled_module() is not None else "python")


def test_asking_for_the_compiled_core_without_the_extension_is_an_error(monkeypatch):
    monkeypatch.setattr(core, "compiled_module", lambda: None)
    monkeypatch.setenv(core.ENV_VAR, "compiled")
    with pytest.raises(core.CoreUnavailable, match="not built"):
        core.active()
    with pytest.raises(core.CoreUnavailable):
        with core.use("compiled"):
            pass


def test_without_the_extension_the_default_is_python_with_one_warning(monkeypatch):
    monkeypatch.setattr(core, "compiled_module", lambda: None)
    monkeypatch.setattr(core, "_fallback_warned", False)
    monkeypatch.delenv(core.ENV_VAR, raising=False)
    with pytest.warns(RuntimeWarning, match="Python core"):
        assert core.active() == "python"
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert core.active() == "python"
    assert again == []


def test_the_machine_line_names_the_core(monkeypatch):
    monkeypatch.setenv(core.ENV_VAR, "python")
    assert machine().endswith(", python core")


@pytest.mark.both_cores
def test_a_both_cores_test_runs_on_the_core_its_id_names(request):
    assert core.active() == request.node.callspec.params["simulator_core"]

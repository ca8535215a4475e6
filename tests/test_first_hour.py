"""The first hour's traps, each pinned: the Mooncake sample ships inside the package, the torch
backend works in a plain process without touching its torch settings, and `compare`'s policy
figure shades what the scenario has and names every policy where no curve hides."""

from __future__ import annotations

import ast
import fnmatch
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import auction_gym
from auction_gym.scenarios import scenario
from auction_gym.workload import SAMPLE_TRACE
from experiments.commands import reproduce_trace
from experiments.commands.policy_figure import Trace, draw_policies, load_shading

REPO = Path(__file__).resolve().parents[1]


def test_the_mooncake_sample_is_package_data_and_the_default_trace():
    package = Path(auction_gym.__file__).parent
    relative = SAMPLE_TRACE.relative_to(package)  # ValueError if it lies outside the package
    # pyproject.toml's [tool.scikit-build] lines (tomllib is Python 3.11+): the wheel carries its
    # packages whole, bar what it excludes
    text = (REPO / "pyproject.toml").read_text()
    packages = ast.literal_eval(re.search(r"(?m)^wheel\.packages = (\[.*\])$", text).group(1))
    excluded = ast.literal_eval(re.search(r"(?m)^wheel\.exclude = (\[.*\])$", text).group(1))
    assert "auction_gym" in packages
    for path in (Path("auction_gym") / relative, Path("auction_gym") / relative.parent / "LICENSE-APACHE"):
        assert not any(fnmatch.fnmatch(str(path), g) for g in excluded), (path, excluded)
    assert SAMPLE_TRACE.is_file()
    assert reproduce_trace.SLICE == SAMPLE_TRACE and SAMPLE_TRACE in reproduce_trace.DEFAULT_TRACES


def test_the_torch_backend_runs_in_a_plain_process_on_the_wall_clock():
    """gym.make(backend="torch") with torch's default threads: the wall clock and one warning that
    names it, the process's thread count left as it was."""
    torch = pytest.importorskip("torch")
    import gymnasium as gym

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # what a plain process on a machine with cores to spare has
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env = gym.make("RadixAuction-v0", backend="torch", horizon=3,
                           backend_kwargs={"preset": "tiny"}, workload_kwargs={"rate": 8.0})
            env.reset(seed=0)
            for _ in range(3):
                env.step(env.action_space.sample())
        clocks = [str(w.message) for w in caught if "clock" in str(w.message)]
        assert len(clocks) == 1 and "'wall' clock" in clocks[0] and "\n" not in clocks[0], clocks
        assert env.unwrapped.market.engine.timer.clock == "wall"
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_an_explicit_cpu_clock_still_refuses_several_threads():
    torch = pytest.importorskip("torch")
    from gpu_backend.timer import choose_clock

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert choose_clock("cpu", "cpu") == "cpu"  # named: kept, and DeviceTimer refuses it
        with pytest.warns(UserWarning, match="'wall' clock"):
            assert choose_clock("cpu", None) == "wall"
        torch.set_num_threads(1)
        assert choose_clock("cpu", None) == "cpu"
    finally:
        torch.set_num_threads(threads)


def test_the_calibrated_scenario_shades_its_load_wave_not_bursts():
    calibrated, bursty = load_shading(scenario("calibrated")), load_shading(scenario("bursty_v0"))
    assert "wave" in calibrated.label and "burst" not in calibrated.label
    assert bursty.label == "burst"
    t = np.linspace(0.0, 12.0, 121)  # one period of the calibrated wave: a trough at 10 s, a peak at 4 s
    level = calibrated.level(t)
    assert level.max() == pytest.approx(1.0, abs=1e-3) and level[40] > level[100]
    assert load_shading({}) is None


def _trace(n: int, scale: float) -> Trace:
    return Trace(time=list(np.linspace(0, 10, n)), multiplier=[scale] * n, waiting=list(range(n)),
                 time_left=list(np.linspace(1, 0, n)), episode=[0] * n)


def test_the_policy_figure_names_every_policy_outside_the_panels():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    names = ["ppo", "ogd", "pid", "truthful", "best_fixed", "ogd_tuned", "pid_tuned",
             *(f"ppo_s{k}" for k in range(5))]
    fig = draw_policies({name: _trace(20, 0.1 * (k + 1)) for k, name in enumerate(names)}, scenario("calibrated"))
    try:
        assert all(ax.get_legend() is None for ax in fig.axes)  # no legend over the curves
        (legend,) = fig.legends
        labels = [t.get_text() for t in legend.get_texts()]
        assert labels[:len(names)] == names and "wave" in labels[-1]
        assert "burst" not in fig.axes[0].get_title() and "wave" in fig.axes[0].get_title()
        styles = [(to_hex(line.get_color()), line.get_linestyle(), line.get_marker())
                  for line in fig.axes[0].get_lines()]
        assert len(set(styles)) == len(names)  # no two policies share a style (12 lines, 10 colours)
    finally:
        plt.close(fig)

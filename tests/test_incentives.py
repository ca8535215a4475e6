"""`radix-auction incentives`: runs end to end, pairs episodes by seed, and rejects bad options."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from experiments.cli import main
from experiments.commands.incentives import COLUMNS, OGD, best_fixed, measure, multiplier_grid, run_task, summarize
from experiments.executor import Executor

TINY = ["--episodes", "2", "--horizon", "15", "--grid", "0.5,2", "--mechanisms", "radix_vcg",
        "--cost-models", "unit", "--jobs", "1"]


def test_runs_end_to_end_and_writes_the_documented_files(tmp_path, capsys):
    main(["incentives", *TINY, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "regret of truthful bidding" in out and "wall time" in out
    with (tmp_path / "incentives.csv").open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        rows = list(reader)
    # Grid 0.5, 1 (always added), 2 in both budget settings, and OGD with budgets on.
    assert [(r["budgets"], r["policy"], r["multiplier"]) for r in rows] == [
        ("off", "fixed", "0.5"), ("off", "fixed", "1.0"), ("off", "fixed", "2.0"),
        ("on", "fixed", "0.5"), ("on", "fixed", "1.0"), ("on", "fixed", "2.0"), ("on", "ogd", "")]
    assert all(r["n"] == "2" for r in rows)
    truthful = [r for r in rows if r["multiplier"] == "1.0"]
    assert all(float(r["diff_truthful"]) == 0.0 and float(r["diff_truthful_ci95"]) == 0.0 for r in truthful)
    assert all(r["diff_ogd"] == "" for r in rows if r["budgets"] == "off")
    md = (tmp_path / "incentives.md").read_text()
    assert "| radix_vcg | unit |" in md and "best fixed alpha*" in md
    assert (tmp_path / "incentives.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_regret_is_the_best_paired_gain_and_never_negative():
    utilities = {("radix_vcg", "unit", "off", a): np.array([10.0, 20.0, 30.0]) - abs(a - 1) for a in (0.5, 1.0)}
    utilities["radix_vcg", "unit", "off", 2.0] = np.array([13.0, 21.0, 32.0])  # 2 more on average
    rows = summarize(utilities)
    best = best_fixed(rows, "radix_vcg", "unit", "off")
    assert best["multiplier"] == 2.0 and best["diff_truthful"] == pytest.approx(2.0)
    assert best["diff_truthful_ci95"] > 0  # paired differences 3, 1, 2 vary
    # Truthful best: the regret is exactly 0, not negative.
    utilities["radix_vcg", "unit", "off", 2.0] = np.array([1.0, 2.0, 3.0])
    best = best_fixed(summarize(utilities), "radix_vcg", "unit", "off")
    assert best["multiplier"] == 1.0 and best["diff_truthful"] == 0.0


def test_identical_seeds_give_identical_utilities():
    first = run_task("strict_vcg", "tokens", "on", OGD, [3, 4], 15)
    assert run_task("strict_vcg", "tokens", "on", OGD, [3, 4], 15) == first
    assert run_task("strict_vcg", "tokens", "on", OGD, [4], 15) == first[1:]  # an episode is its seed's alone
    assert run_task("strict_vcg", "tokens", "on", OGD, [5], 15) != first[1:]


def test_processes_give_the_same_utilities():
    todo = [("radix_vcg", "tokens", "off", 1.0), ("radix_vcg", "tokens", "off", 2.0)]
    serial, parallel = measure(todo, [0, 1], 10, Executor(1)), measure(todo, [0, 1], 10, Executor(2))
    assert all(np.array_equal(serial[t], parallel[t]) for t in todo)


def test_grid_adds_truthful_and_sorts():
    assert multiplier_grid("2,0.5") == [0.5, 1.0, 2.0]


@pytest.mark.parametrize("option, message", [
    (["--grid", "1,x"], "--grid"), (["--grid", "-1"], "--grid"), (["--grid", "0.5,0.5"], "repeated"),
    (["--mechanisms", "fcfs"], "unknown fcfs"), (["--cost-models", "unit,unit"], "unit named more than once"),
    (["--episodes", "1"], "--episodes must be >= 2"), (["--horizon", "0"], "--horizon"),
    (["--jobs", "0"], "--jobs"),
])
def test_bad_options_exit_2_with_one_line(option, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["incentives", *option, "--out", str(tmp_path)])
    error = capsys.readouterr().err.splitlines()[-1]  # argparse's usage lines come first
    assert exc.value.code == 2
    assert error.startswith("radix-auction incentives: error:") and message in error
    assert not (tmp_path / "incentives.csv").exists()


def test_out_must_be_a_folder(tmp_path, capsys):
    file = tmp_path / "results"
    file.write_text("")
    with pytest.raises(SystemExit) as exc:
        main(["incentives", *TINY, "--out", str(file)])
    assert exc.value.code == 2 and "argument --out:" in capsys.readouterr().err

"""Run folders never overwrite an earlier run unless asked; console intervals print as the documentation's tables do."""

from __future__ import annotations

import math

from agents.run_dir import clear_run_dir, new_run_dir
from agents.stats import format_ci


def test_a_taken_folder_gets_the_next_number(tmp_path):
    assert new_run_dir(tmp_path / "ppo_s0") == tmp_path / "ppo_s0"
    (tmp_path / "ppo_s0" / "model.zip").write_text("first")
    assert new_run_dir(tmp_path / "ppo_s0") == tmp_path / "ppo_s0_2"
    assert new_run_dir(tmp_path / "ppo_s0") == tmp_path / "ppo_s0_3"  # ppo_s0_2 was claimed, though empty
    assert (tmp_path / "ppo_s0" / "model.zip").read_text() == "first"


def test_an_empty_folder_is_reused(tmp_path):
    (tmp_path / "eval" / "ogd").mkdir(parents=True)
    assert new_run_dir(tmp_path / "eval" / "ogd") == tmp_path / "eval" / "ogd"


def test_overwrite_deletes_a_runs_outputs_and_nothing_else(tmp_path):
    run = tmp_path / "ppo_s0"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("model.zip", "vecnormalize.pkl", "config.json", "events.out.tfevents.1.host", "notes.txt"):
        (run / name).write_text(name)
    (run / "checkpoints" / "ppo_64_steps.zip").write_text("")
    assert new_run_dir(run, overwrite=True) == run
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]
    clear_run_dir(tmp_path / "missing")  # nothing to clear is not an error


def test_intervals_print_as_the_readme_shows_them():
    assert format_ci(3182.4, 130.2) == "3182 ± 130"
    assert format_ci(0.20541, 0.0781) == "0.2054 ± 0.078"
    assert format_ci(-51.56, 67.3) == "-51.56 ± 67"
    assert format_ci(2.0, 0.0) == "2 ± 0"
    assert format_ci(math.nan, math.nan) == "nan"
    assert format_ci(1.5, math.nan) == "1.5"  # one value: no interval

"""The `cores` benchmark: its table holds both cores' figures, and its check that two runs wrote the
same outputs tells different outputs apart."""

from __future__ import annotations

import re

import pytest

from auction_gym import core
from experiments.bench import cores
from experiments.bench.cores import ENVS, Sizes, cores_table, same_outputs


@pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core is not built")
def test_the_table_at_a_tiny_size_has_both_cores_figures_and_the_target_note():
    tiny = Sizes(steps=20, warm=5, repeats=1, batch_rounds=3, ppo_steps=0, ppo_env_steps=0, batch_sizes=(2,))
    table = cores_table(tiny)
    assert table.columns[1:3] == ("python core", "compiled core")
    assert len(table.rows) == len(ENVS) + 2  # one row per env, two ways of playing the batch
    for row in table.rows:
        assert all(re.fullmatch(r"[\d,.]+", cell) for cell in row[1:3]), row
        python, compiled = (float(cell.replace(",", "")) for cell in row[1:3])
        assert python > 0 and compiled > 0
        # The ratio is of the unrounded figures: each printed one is off by up to half its last digit.
        ratio, rounding = compiled / python, 0.5 / python + 0.5 / compiled
        assert abs(float(row[3].removesuffix("x")) - ratio) <= 0.01 + ratio * (0.01 + rounding)
    assert any(re.fullmatch(r"Target: one RadixAuction-v1 env's steps/s .*: [\d.]+x, (met|not met)\.", note)
               for note in table.notes)


def _write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_same_outputs_tells_different_cells_files_and_timings_apart(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "sub/x.csv", "policy,welfare,wall_s\nlpm,1.5,3.2\n")
    _write(b, "sub/x.csv", "policy,welfare,wall_s\nlpm,1.5,9.9\n")
    same, line = same_outputs(a, b)
    assert same and line == "identical: 1 CSV file, 2 lines"
    _write(b, "sub/x.csv", "policy,welfare,wall_s\nlpm,1.6,3.2\n")
    assert same_outputs(a, b) == (False, "sub/x.csv differs at line 2")
    _write(b, "sub/x.csv", "policy,welfare,wall_s\nlpm,1.5,3.2\nfcfs,1.0,1.0\n")
    assert same_outputs(a, b) == (False, "sub/x.csv: 2 against 3 lines")
    _write(b, "sub/x.csv", "policy,welfare,wall_s\nlpm,1.5,3.2\n")
    _write(b, "y.csv", "a\n1\n")
    assert same_outputs(a, b) == (False, "different CSV files: y.csv")
    assert same_outputs(tmp_path / "c", tmp_path / "d") == (False, "no CSV files to compare")


def test_a_command_whose_cores_wrote_different_outputs_is_a_row_saying_so(monkeypatch):
    def run_command(name, which, out, full):  # a stand-in for the child process: the cores disagree
        out.mkdir(parents=True)
        (out / "reproduce.csv").write_text(f"policy,welfare\nlpm,{1.0 if which == 'python' else 2.0}\n")
        return {"python": 8.0, "compiled": 2.0}[which], "done"

    monkeypatch.setattr(cores, "run_command", run_command)
    rows, notes = cores.command_rows(("reproduce",), full=False)
    assert rows == [("`radix-auction reproduce --quick`, wall s", "8.0", "2.0", "4.00x"),
                    ("`radix-auction reproduce --quick`, the two cores' outputs", "reproduce.csv differs at line 2", "",
                     "")]
    assert notes[-1] == ("Target: `radix-auction reproduce --quick` wall time at least 4x faster than on the Python "
                         "core: 4.00x, met.")


def test_a_short_command_runs_in_turn_and_shows_its_median_wall_time(monkeypatch):
    walls = {"python": iter([9.0, 30.0, 8.0]), "compiled": iter([2.0, 2.5, 1.0])}
    order = []

    def run_command(name, which, out, full):  # each run its own new folder, the cores in turn
        out.mkdir(parents=True)
        order.append(which)
        (out / "reproduce.csv").write_text("policy,welfare\nlpm,1.0\n")
        return next(walls[which]), "done"

    monkeypatch.setattr(cores, "run_command", run_command)
    rows, _ = cores.command_rows(("reproduce",), full=False, repeats=3)
    assert order == ["python", "compiled"] * 3
    assert rows[0] == ("`radix-auction reproduce --quick`, wall s, median of 3", "9.0", "2.0", "4.50x")
    assert rows[1][1] == "identical: 1 CSV file, 2 lines"


def test_the_reset_floor_is_the_reset_over_the_episode_and_what_it_leaves_of_the_target_step(monkeypatch):
    seconds = {"python": 0.040, "compiled": 0.004}
    monkeypatch.setattr(cores, "reset_seconds", lambda which, resets, env_id: seconds[which])
    row, note = cores._reset_floor(Sizes(steps=1, warm=0, repeats=1, batch_rounds=1, ppo_steps=0,
                                         ppo_env_steps=0), target_rate=40_000.0)
    assert row[1:] == ("40.00", "4.00", "10.00x")
    # 200 rounds an episode: 4 ms / 200 = 20 us a step; 1 / 40,000 s = 25 us, so 5 us are left.
    assert "200 rounds" in note and "20.0 µs per env step" in note
    assert "40,000 steps/s per env, 25.0 µs per env step all told, which leaves 5.0 µs" in note


def test_a_reset_is_timed_in_cpu_time_after_a_garbage_collection(monkeypatch):
    from experiments.bench import core_speed

    calls = []
    clock = iter([10.0, 10.5])
    monkeypatch.setattr(core_speed.gc, "collect", lambda: calls.append("collect"))
    monkeypatch.setattr(core_speed.time, "process_time", lambda: (calls.append("clock"), next(clock))[1])
    monkeypatch.setattr(core_speed.time, "perf_counter", lambda: pytest.fail("a reset is timed in CPU time"))
    seconds = core_speed.reset_seconds("python", 2, "RadixAuction-v0")
    assert calls == ["collect", "clock", "clock"]
    assert seconds == pytest.approx(0.25)


def test_one_envs_rows_take_the_median_of_their_own_count_of_runs_in_turn(monkeypatch):
    calls = []
    rates = {"python": iter([1.0, 9.0, 2.0, 3.0, 2.0] * len(ENVS)),
             "compiled": iter([10.0, 1.0, 20.0, 30.0, 25.0] * len(ENVS))}
    monkeypatch.setattr(cores, "steps_per_second",
                        lambda which, warm, steps, env_id, **kwargs: (calls.append(which), next(rates[which]))[1])
    rows, notes = cores.env_rows(Sizes(steps=1, warm=0, repeats=1, batch_rounds=1, ppo_steps=0, ppo_env_steps=0,
                                       env_repeats=5))
    assert calls == ["python", "compiled"] * 5 * len(ENVS)
    assert rows[0][1:] == ("2", "20", "10.00x")  # the medians of five, not of the first run
    assert "median of 5 run(s) per core" in notes[0]


def test_the_command_lines_repeats_sets_every_parts_runs(monkeypatch):
    seen = []
    monkeypatch.setattr(cores, "cores_table",
                        lambda sizes, commands, full: seen.append(sizes) or cores.Table(("a",), []))
    cores.main(["--repeats", "2"])
    cores.main([])
    assert (seen[0].repeats, seen[0].env_repeats) == (2, 2)
    assert (seen[1].repeats, seen[1].env_repeats) == (cores.PAGE.repeats, cores.PAGE.env_repeats)

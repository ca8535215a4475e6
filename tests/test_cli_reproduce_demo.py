"""`radix-auction demo` and `reproduce` on bad or degenerate input: one-line errors with exit status 2,
never a traceback or a table of NaNs; `reproduce` says which trace it replays, checks it before the
sweep, and keeps the rows of the tasks it finished."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

import experiments.commands.reproduce as reproduce
from auction_gym import EngineConfig, SimEngine
from auction_gym.workload import iter_mooncake
from auction_gym.workload.mooncake import SAMPLE_TRACE
from experiments.cli import main
from experiments.commands import demo, reproduce_trace
from experiments.commands.reproduce import COLUMNS, Sweep, policies
from experiments.commands.reproduce_sweep import sweep_of
from experiments.commands.reproduce_trace import check_trace, pick_trace
from experiments.sweeps import SweepGrid, load_sweep

SLICE = SAMPLE_TRACE


def line(timestamp: float = 0, input_length: int = 600, output_length: int = 5) -> str:
    """One Mooncake trace line whose prompt has ceil(input_length / 512) blocks."""
    blocks = list(range(-(-input_length // 512)))
    return json.dumps({"timestamp": timestamp, "input_length": input_length,
                       "output_length": output_length, "hash_ids": blocks})


def write_trace(tmp_path: Path, lines: list[str], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(text + "\n" for text in lines))
    return path


def fails(argv: list[str], capsys) -> str:
    """Run the command line; assert exit status 2 with one error line and no traceback; that line."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [text for text in err.splitlines() if text.startswith(f"radix-auction {argv[0]}: error: ")]
    assert len(errors) == 1, err
    return errors[0]


# ---------------------------------------------------------------- demo


@pytest.mark.parametrize("option,value,message", [
    ("--rate", "-1", "must be > 0, got -1"), ("--rate", "nan", "expected a finite number"),
    ("--duration", "0", "must be > 0"), ("--bidders", "0", "must be >= 1"), ("--bidders", "2.5", "expected an integer"),
    ("--kv-capacity", "abc", "expected a number, got 'abc'"), ("--kv-capacity", "0", "must be >= 1"),
    ("--time-scale", "0", "must be > 0"), ("--limit", "-1", "must be >= 1"), ("--limit", "0", "must be >= 1"),
    ("--num-groups", "0", "must be >= 1"), ("--prompts-per-group", "0", "must be >= 1"),
    ("--seed", "-1", "must be >= 0"),
])
def test_demo_numeric_options_are_checked(option, value, message, capsys):
    assert f"argument {option}: {message}" in fails(["demo", option, value], capsys)


@pytest.mark.parametrize("argv,message", [
    (["--workload", "shared_prefix", "--trace", str(SLICE)], "--trace: the shared_prefix workload replays no trace"),
    (["--workload-kwargs", '{"rte": 5}'], "--workload-kwargs: unknown workload_kwargs ['rte'] for workload 'agentic'"),
])
def test_demo_workload_and_trace_must_agree(argv, message, capsys):
    assert message in fails(["demo", *argv], capsys)


@pytest.mark.parametrize("argv,message", [
    (["--workload", "mooncake", "--rate", "3"], "--rate: the mooncake workload takes no such argument"),
    (["--workload", "shared_prefix", "--duration", "5"], "--duration: the shared_prefix workload takes no"),
    (["--time-scale", "2", "--num-groups", "4"], "--time-scale, --num-groups: the agentic workload takes no"),
])
def test_demo_refuses_a_workload_option_its_workload_does_not_take(argv, message, capsys):
    """An option the chosen workload takes no argument for was dropped without a word, so the run
    replayed something other than asked."""
    assert message in fails(["demo", *argv], capsys)


@pytest.mark.parametrize("argv,kwargs", [
    ([], {"rate": 35.0, "duration": 60.0}),
    (["--rate", "5"], {"rate": 5.0, "duration": 60.0}),
    (["--workload", "shared_prefix"], {"rate": 35.0, "num_groups": 64, "prompts_per_group": 16}),
    (["--workload", "mooncake", "--limit", "9"], {"time_scale": 4.0, "limit": 9}),
])
def test_demo_gives_a_workload_the_options_it_takes_given_or_the_demos_values(argv, kwargs):
    from experiments.cli import build_parser

    args = build_parser("demo").parse_args(["demo", *argv])
    assert demo.chosen_workload(args)[2] == kwargs


def test_demo_unknown_scheduler_lists_the_valid_ones(capsys):
    error = fails(["demo", "--schedulers", "fcfs,sjf"], capsys)
    assert "--schedulers: unknown sjf" in error and "valid: " in error and "radix_vcg" in error


@pytest.mark.parametrize("command", ["demo", "reproduce"])
def test_trace_must_be_an_existing_file(command, tmp_path, capsys):
    assert "argument --trace: not a file" in fails([command, "--trace", str(tmp_path)], capsys)
    missing = tmp_path / "missing.jsonl"
    assert f"argument --trace: no such file: {missing}" in fails([command, "--trace", str(missing)], capsys)


def test_demo_trace_errors_name_file_and_line(tmp_path, capsys):
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes((line() + "\n").encode() + b'{"timestamp": 1, "caf\xe9": 0}\n')
    assert f"{latin1}: line 2: not UTF-8" in fails(["demo", "--trace", str(latin1)], capsys)
    unsorted = write_trace(tmp_path, [line(0), line(2000), line(1000)], "unsorted.jsonl")
    error = fails(["demo", "--trace", str(unsorted)], capsys)
    assert f"{unsorted}: line 3: timestamp out of order" in error and "sorted" in error


def test_demo_with_nothing_to_run_fails(tmp_path, capsys):
    empty = write_trace(tmp_path, [], "empty.jsonl")
    assert "nothing to run, the workload has no request" in fails(["demo", "--trace", str(empty)], capsys)
    error = fails(["demo", "--kv-capacity", "100", "--rate", "5", "--duration", "2"], capsys)
    assert "nothing to run: the engine rejected all" in error
    assert "exceeds kv_capacity_tokens = 100" in error and "--kv-capacity" in error


def test_demo_reports_loaded_and_rejected_requests(capsys):
    main(["demo", "--trace", str(SLICE), "--schedulers", "fcfs"])
    out = capsys.readouterr().out
    assert "requests: 1000 loaded, 34 rejected by the engine (e.g. request " in out
    assert "exceeds kv_capacity_tokens = 60000" in out
    fcfs = next(text.split() for text in out.splitlines() if text.startswith("fcfs "))
    assert fcfs[-2] == "966"  # the "done" column: the others finished
    main(["demo", "--trace", str(SLICE), "--schedulers", "fcfs", "--kv-capacity", "200000", "--limit", "10"])
    assert "requests: 10 loaded, none rejected" in capsys.readouterr().out


# ---------------------------------------------------------------- reproduce


@pytest.mark.parametrize("option", ["--seeds", "--jobs"])
def test_reproduce_counts_must_be_positive(option, tmp_path, capsys):
    error = fails(["reproduce", "--quick", "--out", str(tmp_path), option, "0"], capsys)
    assert f"argument {option}: must be >= 1, got 0" in error


def test_default_trace_is_the_full_one_else_the_shipped_slice(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "conversation_trace.jsonl"
    monkeypatch.setattr(reproduce_trace, "DEFAULT_TRACES", (missing, SLICE))
    assert pick_trace(None, sweep_of("quick")) == SLICE
    out = capsys.readouterr().out
    assert f"Mooncake trace: {SLICE}: 300 requests from its first 300 lines" in out
    monkeypatch.setattr(reproduce_trace, "DEFAULT_TRACES", (missing, tmp_path / "slice.jsonl"))
    assert pick_trace(None, sweep_of("quick")) is None
    assert "Mooncake trace: none" in capsys.readouterr().out


def test_shipped_slice_is_a_default_trace():
    assert SLICE.resolve() in [p.resolve() for p in reproduce_trace.DEFAULT_TRACES]


def _no_sweep(*args, **kwargs):
    pytest.fail("the sweep started before the trace was checked")


@pytest.mark.parametrize("lines,message", [
    ([line(0), line(1), "{not json"], "line 3: invalid JSON"),
    ([], "hold 0 request(s); the sweep needs two or more"),
    ([line(5), "", line(5)], "hold 2 request(s); the sweep needs two or more with different timestamps"),
    ([line(0, 250_000), line(1, 200_001)], "every request's prompt + output exceeds the sweep's 200000 KV tokens"),
])
def test_reproduce_checks_the_trace_before_the_sweep(lines, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reproduce, "run_sweep", _no_sweep)
    trace = write_trace(tmp_path, lines)
    error = fails(["reproduce", "--quick", "--jobs", "1", "--trace", str(trace), "--out", str(tmp_path)], capsys)
    assert str(trace) in error and message in error


def test_check_trace_counts_what_the_engine_will_reject(tmp_path):
    """At 1,000 KV tokens a 900-token prompt may have 98 output tokens (`EngineConfig.output_room`:
    the pool less the prompt, a page and a token, as SGLang clips the cap), not 99."""
    trace = write_trace(tmp_path, [line(0, 900, 98), line(5, 900, 99), line(10, 600), line(20, 1200, 1)])
    sweep = Sweep({"mooncake": SweepGrid((1000, 5000), (1.0,), {"limit": 4})})
    text = check_trace(trace, sweep)
    assert text == "4 requests from its first 4 lines; rejected for KV capacity (KV tokens): 2 at 1000, 0 at 5000"
    engine = SimEngine("fcfs", EngineConfig(kv_capacity_tokens=1000))
    engine.run(iter_mooncake(trace, limit=4))
    assert sum(rec.rejected is not None for rec in engine.records.values()) == 2


TINY_AGENTIC = SweepGrid((15_000,), (1.0,), {**load_sweep("agentic").quick.kwargs, "duration": 5.0})
# With no trace the mooncake grid is left out: the rows are agentic ones.
TINY = Sweep({"agentic": TINY_AGENTIC, "mooncake": SweepGrid((200_000,), (1.0,), {"limit": 10})})


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        return list(reader)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_failed_sweep_keeps_the_tasks_it_finished(jobs, tmp_path, monkeypatch, capsys):
    """The second task's KV capacity (100 tokens) is below every request: it fails, clearly, and
    the first task's rows are already in reproduce.csv."""
    monkeypatch.setattr(reproduce, "sweep_of", lambda size: Sweep({"agentic": replace(TINY_AGENTIC, kv_capacities=(15_000, 100))}))
    monkeypatch.setattr(reproduce_trace, "DEFAULT_TRACES", (tmp_path / "none.jsonl",))
    error = fails(["reproduce", "--quick", "--jobs", jobs, "--out", str(tmp_path)], capsys)
    assert "the agentic workload at 100 KV tokens (seed 0): nothing can run: the engine rejected all" in error
    rows = _rows(tmp_path / "reproduce.csv")
    assert len(rows) == len(policies("tokens"))
    assert {r["kv_capacity"] for r in rows} == {"15000"} and all(r["mean_latency"] != "nan" for r in rows)
    assert not (tmp_path / "reproduce.md").exists()


def test_a_complete_sweep_writes_rows_in_sweep_order_and_its_wall_time(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reproduce, "sweep_of", lambda size: TINY)
    monkeypatch.setattr(reproduce_trace, "DEFAULT_TRACES", (tmp_path / "none.jsonl",))
    main(["reproduce", "--quick", "--seeds", "2", "--jobs", "2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "Mooncake trace: none" in out and "the mooncake workload is left out" in out
    assert f"reproduce: {2 * len(policies('tokens'))} rows in " in out and " s wall time (2 processes)" in out
    rows = _rows(tmp_path / "reproduce.csv")
    assert [(r["seed"], r["policy"]) for r in rows] == [(s, p) for s in "01" for p in policies("tokens")]
    assert (tmp_path / "reproduce.md").stat().st_size > 0

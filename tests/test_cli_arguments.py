"""The command line refuses a wrong option value before the command starts its work: a seed, a
sweep's list of numbers, a path where the outputs go or an input is read, a torch device, an env
id. Each is a one-line usage error naming the option, exit status 2."""

from __future__ import annotations

import argparse
import importlib

import pytest

from experiments.argtypes import names, optional_names, positive_floats, positive_ints
from experiments.cli import COMMANDS, main


def _refused(argv: list[str], monkeypatch, capsys) -> str:
    """The error line `argv` exits with (status 2), the command's run replaced by a failure, so a
    value accepted at parse time fails the test instead of starting minutes of work."""
    def never(args):
        raise AssertionError(f"{argv[0]} ran with a wrong value")

    monkeypatch.setattr(importlib.import_module(COMMANDS[argv[0]][0]), "run", never)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("argv", [
    ["train", "--seed", "-1"],
    ["train", "--eval-seed", "-5"],
    ["train", "--seed", "4294967296"],
    ["train-multi", "--seed", "-1"],
    ["train-multi", "--eval-seed", "-1"],
    ["evaluate", "--seed", "-1"],
    ["tune", "--seed", "-1"],
    ["compare", "--eval-seed", "-1"],
    ["headroom", "--eval-seed", "-3"],
    ["evaluate-multi", "--eval-seed", "-1"],
    ["calibrate", "--seed", "-1"],
    ["fidelity", "--seed", "-1"],
])
def test_a_seed_is_an_integer_numpy_can_seed_with(argv, monkeypatch, capsys):
    assert f"argument {argv[1]}:" in _refused(argv, monkeypatch, capsys)


NAME_LISTS = [("markets", "--designs"), ("markets", "--workloads"), ("markets", "--levels"), ("cluster", "--routers"),
              ("cluster", "--policies"), ("cluster", "--workloads"), ("demo", "--schedulers"), ("bench", "--benches"),
              ("bench", "--commands"), ("incentives", "--mechanisms"), ("incentives", "--cost-models"),
              ("compare", "--algos"), ("compare", "--baselines"), ("evaluate-multi", "--baselines")]
"""Every option that takes a comma-separated list of names."""


@pytest.mark.parametrize("command, option", NAME_LISTS)
def test_a_list_of_names_refuses_a_repeat_by_name(command, option, monkeypatch, capsys):
    """A repeated name would run the same design (policy, bench) twice; refused whether it is known or not."""
    for given in ("fcfs,lpm,fcfs", "x, y,x"):
        repeat = given.split(",")[0]
        assert f"argument {option}: {repeat} named more than once in {given!r}" in _refused(
            [command, option, given], monkeypatch, capsys)
    assert f"argument {option}: expected comma-separated names" in _refused(
        [command, option, "fcfs,,lpm"], monkeypatch, capsys)


def test_the_names_argument_types():
    assert names(" fcfs, lpm ") == ["fcfs", "lpm"] and optional_names("") == [] and optional_names("a") == ["a"]
    for text in ("", "a,", ",a", "a, ,b"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected comma-separated names"):
            names(text)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^a, b named more than once in 'b,a,b,a'$"):
        names("b,a,b,a")


def test_a_list_of_numbers_refuses_a_repeat_by_its_value():
    """Lists of numbers and of names are read by one reader: "1" and "1.0" are one load."""
    assert positive_floats("0.7, 1,1.4") == [0.7, 1.0, 1.4] and positive_ints("1,4") == [1, 4]
    with pytest.raises(argparse.ArgumentTypeError, match=r"^1.0 named more than once in '1,2,1.0'$"):
        positive_floats("1,2,1.0")
    with pytest.raises(argparse.ArgumentTypeError, match="expected comma-separated values"):
        positive_ints("1,,4")


@pytest.mark.parametrize("argv", [
    ["markets", "--loads", "nan"],
    ["markets", "--loads", "inf"],
    ["markets", "--loads", "0"],
    ["markets", "--loads", "-1"],
    ["markets", "--loads", ""],
    ["markets", "--loads", "1,,2"],
    ["markets", "--loads", "1,1"],
    ["cluster", "--loads", "-1"],
    ["cluster", "--replicas", "0"],
    ["cluster", "--replicas", "x"],
    ["cluster", "--replicas", "1.5"],
    ["cluster", "--kv-weights", "nan"],
    ["cluster", "--kv-weights", "inf"],
    ["cluster", "--kv-weights", "-1"],
])
def test_a_sweeps_numbers_are_checked_one_by_one(argv, monkeypatch, capsys):
    assert f"argument {argv[1]}:" in _refused(argv, monkeypatch, capsys)


@pytest.mark.parametrize("argv", [
    ["markets", "--out", "{file}"],
    ["cluster", "--out", "{file}/sub"],
    ["reproduce", "--out", "{file}"],
    ["fidelity", "--out", "{file}"],
    ["calibrate", "--out", "{folder}"],
    ["bench", "--out", "{folder}"],
    ["leaderboard", "--board", "{folder}"],
    ["leaderboard", "--build", "--learned", "{file}"],
    ["leaderboard", "--build", "--learned", "{folder}/missing"],
    ["fidelity", "--cost-model", "{folder}"],
    ["cluster", "--trace", "{folder}"],
])
def test_a_path_of_the_wrong_kind_is_refused_before_the_work(argv, tmp_path, monkeypatch, capsys):
    file = tmp_path / "a_file"
    file.write_text("")
    argv = [a.format(file=file, folder=tmp_path) for a in argv]
    assert f"argument {argv[-2]}:" in _refused(argv, monkeypatch, capsys)


@pytest.mark.parametrize("command", ["calibrate", "fidelity"])
@pytest.mark.parametrize("device", ["nope", "cuda:99"])
def test_a_device_torch_cannot_use_is_a_usage_error(command, device, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--device", device])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and f"--device {device}" in err.replace("'", "")


@pytest.mark.parametrize("dtype", ["nope", "int64", "nn"])
def test_a_dtype_that_is_not_a_floating_torch_dtype_is_a_usage_error(dtype, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--device", "cpu", "--dtype", dtype])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "--dtype" in err and repr(dtype) in err


@pytest.mark.parametrize("command", ["train", "tune"])
def test_an_unknown_env_id_is_blamed_on_env_id(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--env-id", "NoSuchEnv-v0"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--env-id" in err and "--env-kwargs" not in err

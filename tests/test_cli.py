"""The radix-auction command line: every subcommand has --help; the demo runs; bad input exits."""

from __future__ import annotations

import argparse

import pytest

from experiments.cli import COMMANDS, build_parser, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"radix-auction {command}" in capsys.readouterr().out


def test_top_level_help_lists_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_demo_prints_a_row_per_scheduler(capsys):
    main(["demo", "--rate", "5", "--duration", "5", "--schedulers", "fcfs,radix_vcg"])
    out = capsys.readouterr().out
    assert "fcfs" in out and "radix_vcg" in out and "hit rate" in out


def test_demo_replays_the_shared_prefix_benchmark(capsys):
    main(["demo", "--workload", "shared_prefix", "--num-groups", "4", "--prompts-per-group", "8",
          "--schedulers", "lpm,klpm,radix_vcg"])
    out = capsys.readouterr().out
    assert "shared_prefix workload: 32 requests" in out and "num_groups=4, prompts_per_group=8" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["lpm"], ["klpm"], ["radix_vcg"])}
    assert set(rows) == {"lpm", "klpm", "radix_vcg"}
    assert all(row[-2] == "32" for row in rows.values())  # the "done" column: every request finished


def test_bad_input_exits_with_a_message(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--schedulers", "sjf"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().startswith("radix-auction demo: error: --schedulers: unknown sjf")
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_library_errors_are_one_line_unless_debugging(tmp_path, capsys, monkeypatch):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [0]}\n{"oops"\n')
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--trace", str(trace)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and f"{trace}: line 2: invalid JSON" in err
    monkeypatch.setenv("RADIX_AUCTION_DEBUG", "1")
    with pytest.raises(ValueError, match="line 2"):
        main(["demo", "--trace", str(trace)])


def test_a_bug_keeps_its_traceback(monkeypatch):
    import experiments.commands.demo

    def bug(args):
        raise KeyError("ours")

    monkeypatch.setattr(experiments.commands.demo, "run", bug)
    with pytest.raises(KeyError):
        main(["demo"])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_says_what_it_does_and_its_default(command):
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = action.option_strings[0] if action.option_strings else action.dest
        assert action.help, f"{command} {name} has no help text"
        shown = action.default not in (None, False, True, [], argparse.SUPPRESS) and action.nargs != 0
        if shown and not action.required:
            assert "default" in action.help, f"{command} {name}: its default {action.default!r} is not shown"

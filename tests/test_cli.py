"""The radix-auction command line: every subcommand has --help; the demo runs; bad input exits."""

from __future__ import annotations

import pytest

from experiments.cli import COMMANDS, main


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


def test_bad_input_exits_with_a_message(capsys):
    with pytest.raises(SystemExit, match="unknown scheduler"):
        main(["demo", "--schedulers", "sjf"])
    with pytest.raises(SystemExit):
        main(["no-such-command"])

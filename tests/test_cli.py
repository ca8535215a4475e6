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


def test_demo_replays_the_shared_prefix_benchmark(capsys):
    main(["demo", "--workload", "shared_prefix", "--num-groups", "4", "--prompts-per-group", "8",
          "--schedulers", "lpm,klpm,radix_vcg"])
    out = capsys.readouterr().out
    assert "4 groups x 8 prompts" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["lpm"], ["klpm"], ["radix_vcg"])}
    assert set(rows) == {"lpm", "klpm", "radix_vcg"}
    assert all(row[-2] == "32" for row in rows.values())  # the "done" column: every request finished


def test_bad_input_exits_with_a_message(capsys):
    with pytest.raises(SystemExit, match="unknown scheduler"):
        main(["demo", "--schedulers", "sjf"])
    with pytest.raises(SystemExit):
        main(["no-such-command"])

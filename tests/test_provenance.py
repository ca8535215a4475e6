"""Results pages say what made them: the command as parsed, the machine and the date, and link the
figures written beside them."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path

from experiments.cli import build_parser
from experiments.provenance import command_line, figure_links, machine, made_by


def test_the_command_line_re_runs_what_was_parsed():
    args = build_parser("cluster").parse_args(["cluster", "--quick", "--out", "docs/cluster", "--kv-weights", "0,2",
                                               "--routers", "round_robin,cache_aware"])
    line = command_line(args)
    assert line.startswith("radix-auction cluster ")
    for words in ("--quick", "--out docs/cluster", "--kv-weights 0.0,2.0", "--routers round_robin,cache_aware"):
        assert words in line, (words, line)
    assert "--merge" not in line and "False" not in line and "None" not in line
    reparsed = build_parser("cluster").parse_args(line.split()[1:])
    assert vars(reparsed) == vars(args)


def test_made_by_names_the_command_the_machine_and_the_date():
    args = argparse.Namespace(command="reproduce", quick=True, seeds=None, out=Path("results"))
    text = made_by(args, datetime(2026, 12, 3, 9, 30, tzinfo=timezone.utc))
    assert "`radix-auction reproduce --quick --out results`" in text
    assert "2026-12-03 09:30 UTC" in text and machine() in text and "\n" not in text.rstrip("\n")


def test_figures_are_linked_relative_to_the_page(tmp_path):
    page = tmp_path / "reproduce.md"
    links = figure_links([tmp_path / "latency_vs_load.png", tmp_path / "sub" / "hit.png"], page)
    assert links.splitlines() == ["![latency vs load](latency_vs_load.png)", "![hit](sub/hit.png)"]

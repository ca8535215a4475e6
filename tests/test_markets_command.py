"""`radix-auction markets`: a small grid writes its outputs, its targets read the rows, bad names are refused."""

from __future__ import annotations

import csv

import pytest

from experiments.cli import main
from experiments.commands.markets_report import paired, targets


def test_markets_writes_its_outputs_and_every_design_joins_by_name(tmp_path, capsys):
    main(["markets", "--designs", "lpm,tiers,congestion,radix_vcg", "--workloads", "agentic", "--loads", "1.4",
          "--seeds", "2", "--size", "120", "--out", str(tmp_path)])
    rows = list(csv.DictReader(open(tmp_path / "markets.csv")))
    designs = {r["design"] for r in rows}
    assert designs == {"lpm", "tiers", "congestion", "radix_vcg", "tiers (welfare)", "tiers (revenue)"}
    assert len(rows) == 2 * len(designs)
    assert all(float(r["revenue"]) == 0 for r in rows if r["design"] == "lpm")
    assert all(0 <= float(r["spent_share"]) <= 1 + 1e-9 for r in rows)
    page = (tmp_path / "markets.md").read_text()
    assert page.startswith("# Markets") and "Made by `radix-auction markets" in page
    assert "radix auction welfare - best tiers'" in page and "(markets_welfare.png)" in page
    prices = list(csv.DictReader(open(tmp_path / "markets_prices.csv")))
    assert prices and {r["design"] for r in prices} == {"congestion"}
    for name in ("markets_welfare.png", "markets_latency.png", "markets_prices.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_markets_refuses_an_unknown_design(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["markets", "--designs", "tiers,auction9", "--out", str(tmp_path)])
    assert e.value.code == 2 and "unknown auction9; valid: fcfs" in capsys.readouterr().err


def test_the_welfare_target_is_a_paired_interval_and_says_when_the_claim_fails():
    base = {"workload": "w", "load": 1.0, "revenue": 0.0, "spent_share": 0.0, "hit_rate": 0.5,
            "urgent_latency_p99": 1.0, "urgent_slo_share": 1.0, "interactive_latency_mean": 1.0,
            "background_latency_mean": 1.0}
    rows = [{**base, "design": d, "seed": s, "welfare": w}
            for d, ws in (("radix_vcg", (10.0, 20.0, 30.0)), ("tiers", (12.0, 21.9, 32.1)), ("lpm", (0.0,) * 3))
            for s, w in enumerate(ws)]
    diff, half = paired(rows, "w", 1.0, "radix_vcg", "tiers")
    assert diff == pytest.approx(-2.0) and half == pytest.approx(4.303 * 0.1 / 3 ** 0.5, rel=1e-3)  # -2, -1.9, -2.1
    line = next(x for x in targets(rows) if "welfare" in x)
    assert "best tiers' (tiers)" in line and "does not hold" in line

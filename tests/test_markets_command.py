"""`radix-auction markets`: a small grid writes its outputs; budget levels come from a run on tuning
seeds; tuning never reads an evaluation seed; the report's comparison is a paired interval."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from experiments.cli import main
from experiments.commands import markets_tuning
from experiments.commands.markets_points import Point, run_point
from experiments.commands.markets_report import best_tiers, paired
from experiments.commands.markets_tuning import (
    GAINS,
    TUNING_SEED,
    Episodes,
    calibrate,
    tune_gains,
    tune_prices,
    tuning_seeds,
)
from experiments.executor import Executor


def test_markets_writes_its_outputs_and_every_design_joins_by_name(tmp_path, capsys):
    main(["markets", "--designs", "lpm,tiers,congestion,radix_vcg", "--workloads", "agentic", "--loads", "1.4",
          "--seeds", "2", "--tuning-seeds", "1", "--levels", "unlimited,0.3", "--size", "120", "--jobs", "1",
          "--out", str(tmp_path)])
    rows = list(csv.DictReader(open(tmp_path / "markets.csv")))
    labels = {(r["level"], r["design"]) for r in rows}
    assert {("any", "lpm"), ("unlimited", "tiers"), ("0.3", "tiers"), ("0.3", "radix_vcg"),
            ("0.3", "radix_vcg (OGD)"), ("0.3", "radix_vcg (bidder 0 x2)"), ("unlimited", "congestion")} <= labels
    assert len(rows) == 2 * len(labels)
    assert all(float(r["revenue"]) == 0 for r in rows if r["design"] == "lpm")
    assert all(0 <= float(r["spent_share"]) <= 1 + 1e-9 for r in rows)
    paced = [r for r in rows if r["level"] == "0.3" and r["design"] == "radix_vcg"]
    assert all(r["bidding"].startswith("pid kp=") for r in paced)
    page = (tmp_path / "markets.md").read_text()
    assert page.startswith("# Markets") and "Made by `radix-auction markets" in page
    assert "## The radix auction against the best tiers" in page and "(markets_welfare.png)" in page
    tuning = list(csv.DictReader(open(tmp_path / "markets_tuning.csv")))
    assert {r["what"] for r in tuning} == {"price", "gains"}
    assert "wall time" in capsys.readouterr().out
    (tmp_path / "markets.md").unlink()
    main(["markets", "--rewrite", "--out", str(tmp_path)])  # the page again, from the CSVs alone
    again = (tmp_path / "markets.md").read_text()
    assert again.split("## The radix auction")[1] == page.split("## The radix auction")[1]
    assert "Wall time" in again and "Page re-written by `radix-auction markets" in again and "--rewrite`" in again


def test_markets_of_designs_that_tune_nothing_writes_its_page(tmp_path):
    main(["markets", "--designs", "fcfs", "--workloads", "agentic", "--loads", "1", "--seeds", "1",
          "--tuning-seeds", "1", "--levels", "unlimited", "--size", "20", "--jobs", "1", "--out", str(tmp_path)])
    assert (tmp_path / "markets.csv").is_file() and (tmp_path / "markets.md").is_file()
    assert not (tmp_path / "markets_tuning.csv").exists()  # nothing was tuned
    main(["markets", "--rewrite", "--out", str(tmp_path)])


def test_markets_refuses_an_unknown_design(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["markets", "--designs", "tiers,auction9", "--out", str(tmp_path)])
    assert e.value.code == 2 and "unknown auction9; valid: fcfs" in capsys.readouterr().err


def test_budget_levels_come_from_the_truthful_auction_on_tuning_seeds():
    seeds = tuning_seeds(2, 10)
    scale = calibrate([("shared_prefix", 1.4)], 200, seeds, Episodes(Executor(1)))[("shared_prefix", 1.4)]
    runs = [run_point(Point("radix_vcg", "shared_prefix", 1.4, 200), s)[0] for s in seeds]
    assert scale.spend == pytest.approx(np.mean([r["revenue"] for r in runs]) / 4)
    assert scale.rounds == round(np.mean([r["rounds"] for r in runs]))
    bidders = scale.bidders(0.3)
    assert bidders.budget == pytest.approx(0.3 * scale.spend) and bidders.budget_rounds == scale.rounds
    assert bidders.start == 0.3 and bidders.rule == "pid"
    assert scale.bidders(None).budget is None and scale.bidders(None).rule == "truthful"


def test_tuning_never_reads_an_evaluation_seed(monkeypatch):
    seen = []

    def recording(point, seed):
        seen.append(seed)
        return run_point(point, seed)

    monkeypatch.setattr(markets_tuning, "run_point", recording)
    seeds = tuning_seeds(1, 5)
    episodes = Episodes(Executor(1))
    scale = calibrate([("agentic", 1.4)], 80, seeds, episodes)[("agentic", 1.4)]
    key = ("agentic", 1.4, "0.3", "tiers")
    base = Point("tiers", "agentic", 1.4, 80, bidders=scale.bidders(0.3))
    tuned, _ = tune_prices({key: base}, {key: scale.price_scale(0.3)}, seeds, episodes, log=lambda *_: None)
    priced = len(seen)
    tune_gains(tuned, seeds, episodes, log=lambda *_: None)
    assert seen and min(seen) >= TUNING_SEED
    # The base gains at the tuned price were played by the price tuning: not again.
    assert len(seen) - priced == len(GAINS) - 1
    with pytest.raises(ValueError, match="evaluation seeds"):
        tuning_seeds(3, TUNING_SEED + 1)


def test_the_comparison_is_paired_and_the_best_tiers_are_chosen_on_tuning_seeds():
    rows = [{"workload": "w", "load": 1.0, "level": "0.3", "design": d, "seed": s, "welfare": v}
            for d, ws in (("radix_vcg", (10.0, 20.0, 30.0)), ("tiers", (12.0, 21.9, 32.1))) for s, v in enumerate(ws)]
    diff, half = paired(rows, ("w", 1.0, "0.3"), "radix_vcg", "tiers")
    assert diff == pytest.approx(-2.0) and half == pytest.approx(4.303 * 0.1 / 3 ** 0.5, rel=1e-3)
    tuning = [{"workload": "w", "load": "1.0", "level": "0.3", "design": d, "what": what, "welfare": v}
              for d, what, v in (("tiers", "gains", 5.0), ("tiers_lpm", "gains", 7.0), ("tiers", "price", 9.0))]
    assert best_tiers(tuning) == {("w", 1.0, "0.3"): "tiers_lpm"}  # the paced level reads the gains' scores

"""A tiny `reproduce` run on a cache-pressured configuration shows the paper's qualitative findings."""

from __future__ import annotations

import csv
import math
from argparse import Namespace
from pathlib import Path

import pytest

from experiments.reproduce import COLUMNS, POLICIES, Sweep, run, run_sweep, write_csv
from experiments.reproduce_report import write_report

# 15k KV tokens for 8 tenants' agentic traffic at twice what LPM sustains: the cache is contested.
PRESSURED = Sweep(loads=(2.0,), agentic_kv=(15_000,), agentic_duration=15.0, mooncake_kv=(), mooncake_lines=0)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, dict]]:
    """cost model -> policy -> row."""
    return {
        model: {r["policy"]: r for r in run_sweep(PRESSURED, 1, None, model, progress=False)}
        for model in ("unit", "tokens")
    }


@pytest.fixture(params=["unit", "tokens"])
def rows(runs, request):
    return request.param, runs[request.param]


def test_strict_priority_loses_hit_rate_and_latency_to_radix(rows):
    _, by = rows
    assert set(by) == set(POLICIES)
    assert by["strict_vcg"]["hit_rate"] < by["radix_vcg"]["hit_rate"]
    assert by["strict_vcg"]["mean_latency"] > by["radix_vcg"]["mean_latency"]


def test_welfare_capture_in_unit_interval(rows):
    _, by = rows
    assert 0 < by["radix_vcg"]["welfare_capture"] <= 1
    assert math.isnan(by["lpm"]["welfare_capture"])
    assert by["strict_vcg"]["model_welfare"] >= by["radix_vcg"]["model_welfare"]


def test_radix_keeps_hit_rate_of_lpm_with_the_tokens_model(runs):
    # Under the paper's "unit" model the auction ignores what is cached and falls just short here
    # (0.89 of LPM's; README, "Reproducing the paper").
    by = runs["tokens"]
    assert by["radix_vcg"]["hit_rate"] >= 0.9 * by["lpm"]["hit_rate"]


def test_outputs_are_written(rows, tmp_path):
    _, by = rows
    write_csv(list(by.values()), tmp_path / "reproduce.csv")
    with (tmp_path / "reproduce.csv").open() as f:
        read = list(csv.DictReader(f))
    assert tuple(read[0]) == COLUMNS and len(read) == len(POLICIES)
    text = write_report(list(by.values()), tmp_path)
    assert "latency strict / radix" in text
    for name in ("reproduce.md", "latency_vs_load.png", "hit_rate_vs_load.png", "welfare_capture_vs_load.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_bad_arguments():
    with pytest.raises(SystemExit):
        run(Namespace(quick=True, trace=Path("/nonexistent.jsonl"), seeds=1, out=Path("/tmp"), cost_model="unit"))
    with pytest.raises(SystemExit):
        run(Namespace(quick=True, trace=None, seeds=0, out=Path("/tmp"), cost_model="unit"))

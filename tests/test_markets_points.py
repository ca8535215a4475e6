"""A markets point's row against one collected as the command first collected it: every round's
all-out test read with numpy, and the request kinds drawn again for each episode."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from auction_gym.market import Market
from experiments.commands import markets_points
from experiments.commands.markets_points import Bidders, Point, _Playing, _Totals, run_point


class _EveryRound(_Totals):
    """The totals with the all-out test read after every round."""

    def add(self, report, market: Market) -> None:
        super().add(report, market)
        if self.all_out_round is None and bool(np.all(market.spent >= market.budget * (1 - 1e-9))):
            self.all_out_round = market.round


def _reference_row(point: Point, seed: int) -> dict:
    config = point.config()
    market = Market(config)
    market.reset(seed)
    kinds = {r.id: r.kind for r in config.make_workload(seed, market.draws)}
    totals, play = _EveryRound(), _Playing(point.bidders, config)
    while not market.done:
        totals.add(market.step(play.multipliers(market)), market)
    return totals.row(market, kinds)


@pytest.mark.parametrize("design,budget", [("tiers", 0.02), ("congestion", 0.05), ("radix_vcg", None)])
def test_a_points_row_is_the_row_collected_every_round(design, budget):
    bidders = Bidders() if budget is None else Bidders("pid", (0.05, 0.3), budget=budget, budget_rounds=150, start=0.3)
    point = Point(design, "agentic", 1.4, 200, bidders=bidders)
    if design != "radix_vcg":
        point = point.with_kwargs(**{"base_price" if design == "tiers" else "price": 1e-6})
    for seed in (3, 4):
        row, _ = run_point(point, seed)
        want = _reference_row(point, seed)
        row.pop("wall_s")
        assert row.keys() == want.keys()
        assert all(row[k] == want[k] or (row[k] != row[k] and want[k] != want[k]) for k in row)  # NaN alike


class _Round(SimpleNamespace):
    """What `_Totals.add` reads of a market and its round's report."""


@pytest.mark.parametrize("seed", range(20))
def test_the_all_out_round_is_the_first_whose_spend_reaches_every_budget(seed):
    """Rounds as a market plays them (spend moves only in a round that charges; a budget may be 0):
    the round found is the first after which numpy's test holds."""
    rng = np.random.default_rng(seed)
    budget = np.zeros(3) if seed % 4 == 0 else rng.choice([0.0, 1.0, 2.0], size=3)
    spent, totals, want = np.zeros(3), _Totals(), None
    for t in range(40):
        payments = np.where(rng.random(3) < 0.3, rng.choice([0.0, 0.1, 0.5, 1.0], size=3), 0.0) * (t or seed % 2)
        spent = np.minimum(spent + payments, budget)
        market = _Round(spent=spent, budget=budget, round=t)
        totals.add(_Round(welfare=0.0, revenue=0.0, utility=np.zeros(3), finished=[], payments=payments,
                          capped=()), market)
        if want is None and bool(np.all(spent >= budget * (1 - 1e-9))):
            want = t
    assert totals.all_out_round == want


def test_request_kinds_are_drawn_once_for_the_points_that_share_a_workload():
    markets_points._kinds.cache_clear()
    for design in ("fcfs", "lpm"):
        run_point(Point(design, "agentic", 1.4, 100), 7)
    assert markets_points._kinds.cache_info().misses == 1 and markets_points._kinds.cache_info().hits == 1

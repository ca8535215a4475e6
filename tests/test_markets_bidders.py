"""How `radix-auction markets`' bidders bid: claiming free priority is a best response, and a
deviating bidder's pacer keeps reading the multiplier it chose itself."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from auction_gym.market import Market
from auction_gym.market.observation import Obs
from auction_gym.pacing import PIDPacer
from experiments.commands.markets_points import (
    ALPHA_MIN,
    CLAIM_MULTIPLIER,
    CLAIMED_PRIORITY,
    Bidders,
    Point,
    _Playing,
    run_point,
)


def _bidder0_utility(point: Point, seed: int, claims: list[float]) -> float:
    """Bidder 0's realized utility over an episode in which each bidder plays its fixed multiplier."""
    config = point.config()
    market = Market(config)
    market.reset(seed)
    total = 0.0
    while not market.done:
        total += float(market.step(claims).utility[0])
    return total


@pytest.mark.parametrize("design", ["sglang_priority", "qos_lpm"])
def test_escalating_claims_pay_when_priority_is_free(design):
    """Against honest bidders, one bidder that raises every request's claim (x CLAIM_MULTIPLIER, so
    all its requests outrank everyone else's and keep their own order) gains: the priority costs
    it nothing, so honest claims are not an equilibrium. Under a cap on claims (`max_priority`)
    claiming the top for every request is no best response either: its own urgent requests then
    wait behind its background ones."""
    point = Point(design, "shared_prefix", 1.4, 300)
    capped = point.with_kwargs(max_priority=CLAIMED_PRIORITY)
    claims, honest = [CLAIM_MULTIPLIER, 1.0, 1.0, 1.0], [1.0] * 4
    gains = [_bidder0_utility(point, s, claims) - _bidder0_utility(point, s, honest) for s in range(3)]
    assert min(gains) > 0, gains
    at_cap = [_bidder0_utility(capped, s, claims) - _bidder0_utility(capped, s, honest) for s in range(3)]
    assert np.mean(at_cap) < np.mean(gains), (at_cap, gains)


def test_when_every_bidder_claims_the_top_the_priority_order_is_gone():
    """Every request at the cap: sglang_priority serves first come, first served (fcfs's row)."""
    claimed = run_point(Point("sglang_priority", "shared_prefix", 1.4, 300, bidders=Bidders("claim")), 0)[0]
    fcfs = run_point(Point("fcfs", "shared_prefix", 1.4, 300), 0)[0]
    assert claimed["welfare"] == pytest.approx(fcfs["welfare"]) and claimed["hit_rate"] == fcfs["hit_rate"]


class _Observed:
    """A market stand-in that only serves observations."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def observations(self) -> np.ndarray:
        return self.rows


def test_a_deviating_bidder_plays_a_factor_of_what_its_own_pacer_says():
    point = Point("radix_vcg", "agentic", 1.4, 100, bidders=Bidders("pid", (0.05, 0.3), budget=1.0, start=0.3))
    config = point.config()
    honest = _Playing(point.bidders, config)
    deviant = _Playing(replace(point.bidders, deviation=2.0), config)
    rows = np.zeros((4, Obs.SIZE), dtype=np.float32)
    rows[:, Obs.PREV_MULTIPLIER] = 0.3 / config.alpha_max
    rows[:, Obs.LAST_SPEND_LOG] = np.log1p(1.0)
    rows[:, Obs.TIME_LEFT], rows[:, Obs.BUDGET_LEFT] = 0.5, 0.5
    first = honest.multipliers(_Observed(rows))
    played = deviant.multipliers(_Observed(rows))
    assert played[0] == pytest.approx(2 * first[0]) and played[1:] == first[1:]
    rows[0, Obs.PREV_MULTIPLIER] = played[0] / config.alpha_max  # the market records what was played
    again = deviant.multipliers(_Observed(rows))
    pacer = PIDPacer(0.05, 0.3, alpha_min=ALPHA_MIN, alpha_max=config.alpha_max)
    own = rows[0].tolist()
    own[Obs.PREV_MULTIPLIER] = first[0] / config.alpha_max  # its pacer reads its own last choice
    assert again[0] == pytest.approx(2 * pacer.multipliers([own])[0], rel=1e-6)

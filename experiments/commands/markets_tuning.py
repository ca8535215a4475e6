"""What `radix-auction markets` fixes on tuning seeds before it scores anything: the scale of each
point (what truthful bidders pay under the radix auction, how long an episode lasts, how long the
engine spends on a request), the budgets of each level, every priced design's price and every
design's pacer gains. Tuning seeds are `TUNING_SEED` + k; the evaluation seeds (0 .. K-1) are
never read here (`tuning_seeds` refuses an overlap).

Design parameters are chosen for welfare, as a provider that sets them to serve its users best
would; so are the pacers' gains (a pacer that every bidder runs, tuned for the bidders' own summed
utility, would pick the one that spends least: scaling every bid alike leaves the radix auction's
order as it is and its payments smaller). A price whose best is at an edge of its grid gets the
grid extended past that edge, so the chosen price lies inside what was searched.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from auction_gym.market import MarketConfig
from auction_gym.registry import get_mechanism

from ..executor import Executor
from .markets_points import ALPHA_MIN, Bidders, Point, run_point

TUNING_SEED = 1000
"""Tuning seeds start here; evaluation seeds are 0 .. K-1 with K <= TUNING_SEED."""
PRICE_KEYS = {"tiers": "base_price", "tiers_lpm": "base_price", "congestion": "price"}
"""The priced designs and the keyword of the price that scales them (per prompt token)."""
PRICE_STEPS = (0.01, 0.03, 0.1, 0.3, 1.0)
"""A priced design's grid, in units of the level's price scale (`Scale.price_scale`)."""
EXTENSIONS = 3
"""How many steps of sqrt(10) a grid may grow past an edge its best lies on."""
GAINS = tuple(itertools.product((0.02, 0.05, 0.2), (0.03, 0.1, 0.3)))
"""The PI pacer's (kp, ki) candidates."""
PACES = {"spent_share": 0.85, "all_out_share": 0.9}
"""What gains must reach on the tuning seeds to count as pacing (mean share of the budgets spent, and
of the episode played before every bidder is out of budget); the most welfare among those that do
is chosen, or, where none does, the gains that spend most."""
BASE_GAINS = (0.05, 0.3)
"""The gains a priced design's price is searched with (ones that pace at every level on tuning seeds)."""


def tuning_seeds(count: int, evaluation: int) -> list[int]:
    """The tuning seeds; ValueError if they could reach the evaluation seeds."""
    if evaluation > TUNING_SEED:
        raise ValueError(f"at most {TUNING_SEED} evaluation seeds (tuning seeds start at {TUNING_SEED})")
    return [TUNING_SEED + k for k in range(count)]


def charges(design: str) -> bool:
    return get_mechanism(design).charges


@dataclass(frozen=True)
class Scale:
    """A workload at a load, measured with truthful bidders under the radix auction on tuning seeds."""

    spend: float
    """A bidder's truthful VCG spend over an episode (mean over bidders and seeds)."""
    rounds: int
    """An episode's rounds (mean)."""
    seconds_per_request: float
    """Engine busy seconds per admitted request: the tier designs' best response's wait per request."""
    prompt_tokens: float
    """A bidder's finished prompt tokens over an episode (mean)."""

    def bidders(self, level: float | None) -> Bidders:
        """The bidders of a budget level: truthful and unlimited (None), or paced against `level` x
        `spend`, over the episode's rounds, from multiplier `level` (VCG payments scale with a
        common multiplier, so that start spends about the budget)."""
        if level is None:
            return Bidders()
        return Bidders("pid", BASE_GAINS, budget=level * self.spend, budget_rounds=self.rounds,
                       start=min(max(level, ALPHA_MIN), 1.0))

    def price_scale(self, level: float | None) -> float:
        """The price per prompt token at which a bidder buying the standard tier for every request
        spends its budget (truthful spend when unlimited)."""
        return (level or 1.0) * self.spend / self.prompt_tokens


class Episodes:
    """The episodes (`run_point`) a command plays on its executor, each (point, seed) once: a later
    sweep that asks for one an earlier sweep played (the gains tuning's base gains at the price the
    price tuning chose, on the same tuning seeds) reads its result."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self._played: dict[tuple[Point, int], tuple[dict, list[float]]] = {}

    def play(self, tasks: list[tuple[Point, int]]) -> list[tuple[dict, list[float]]]:
        """`run_point(point, seed)` of each (point, seed), in order."""
        todo = [task for task in dict.fromkeys(tasks) if task not in self._played]
        self._played.update(zip(todo, self.executor.map(run_point, todo)))
        return [self._played[task] for task in tasks]


def calibrate(points: list[tuple[str, float]], size: int, seeds: list[int], episodes: Episodes,
              ) -> dict[tuple[str, float], Scale]:
    """The `Scale` of each (workload, load)."""
    columns = ("revenue", "rounds", "seconds_per_request", "prompt_tokens")
    measured = _means([Point("radix_vcg", w, load, size) for w, load in points], seeds, episodes, columns)
    n = MarketConfig.num_bidders  # every point's
    return {point: Scale(spend=m["revenue"] / n, rounds=int(round(m["rounds"])),
                         seconds_per_request=m["seconds_per_request"], prompt_tokens=m["prompt_tokens"] / n)
            for point, m in zip(points, measured)}


def _means(candidates: list[Point], seeds: list[int], episodes: Episodes,
           columns: tuple[str, ...]) -> list[dict[str, float]]:
    """Each candidate's mean of `columns` over its episodes on `seeds`."""
    tasks = [(p, s) for p in candidates for s in seeds]
    rows = [row for row, _ in episodes.play(tasks)]
    per = [rows[k * len(seeds):(k + 1) * len(seeds)] for k in range(len(candidates))]
    return [{c: float(np.mean([r[c] for r in mine])) for c in columns} for mine in per]


def _score_all(candidates: list[Point], seeds: list[int], episodes: Episodes) -> list[dict[str, float]]:
    """Each candidate's mean welfare, spend share and all-out share over `seeds`."""
    return _means(candidates, seeds, episodes, ("welfare", *PACES))


def _paces(score: dict[str, float]) -> bool:
    return all(score[c] >= least for c, least in PACES.items())


def tune_prices(bases: dict[tuple, Point], scales: dict[tuple[float, ...], float], seeds: list[int],
                episodes: Episodes, log=print) -> tuple[dict[tuple, Point], list[dict]]:
    """Each base point (a priced design) with its price of most welfare on `seeds`: PRICE_STEPS x
    its price scale, extended past an edge where the best lies on it. Returns the tuned points and
    the tuning's rows (key, price, welfare)."""
    steps = {key: list(PRICE_STEPS) for key in bases}
    scored: dict[tuple, dict[float, dict[str, float]]] = {key: {} for key in bases}
    for _ in range(EXTENSIONS + 1):
        todo = [(key, step) for key in bases for step in steps[key] if step not in scored[key]]
        if not todo:
            break
        candidates = [_priced(bases[key], scales[key] * step) for key, step in todo]
        for (key, step), score in zip(todo, _score_all(candidates, seeds, episodes)):
            scored[key][step] = score
        for key in bases:
            grid = sorted(scored[key])
            best = max(grid, key=lambda step: scored[key][step]["welfare"])  # among equals, the lowest price
            if best == grid[0]:
                steps[key].append(grid[0] / math.sqrt(10))
            elif best == grid[-1]:
                steps[key].append(grid[-1] * math.sqrt(10))
    tuned, rows = {}, []
    for key, base in bases.items():
        best = max(sorted(scored[key]), key=lambda step: scored[key][step]["welfare"])
        tuned[key] = _priced(base, scales[key] * best)
        rows += [{**_named(key), "what": "price", "value": f"{scales[key] * step:.4g}", "step": f"{step:.4g}", **sc,
                  "paces": ""} for step, sc in sorted(scored[key].items())]
        log(f"{key}: price {scales[key] * best:.3g} ({best:.3g} x scale), welfare {scored[key][best]['welfare']:.1f}")
    return tuned, rows


def _named(key: tuple) -> dict:
    """A tuning key (workload, load, level, design) as a row's columns."""
    return dict(zip(("workload", "load", "level", "design"), key))


def _priced(point: Point, price: float) -> Point:
    return point.with_kwargs(**{PRICE_KEYS[point.design]: float(f"{price:.4g}")})


def tune_gains(bases: dict[tuple, Point], seeds: list[int], episodes: Episodes, log=print,
               ) -> tuple[dict[tuple, Point], list[dict]]:
    """Each paced base point with the GAINS of most welfare on `seeds` among those that pace
    (`PACES`; where none does, the gains that spend most)."""
    keys = list(bases)
    candidates = [replace(bases[key], bidders=replace(bases[key].bidders, gains=g)) for key in keys for g in GAINS]
    scores = _score_all(candidates, seeds, episodes)
    tuned, rows = {}, []
    for k, key in enumerate(keys):
        mine = scores[k * len(GAINS):(k + 1) * len(GAINS)]
        pacing = [i for i, sc in enumerate(mine) if _paces(sc)]
        best = (max(pacing, key=lambda i: mine[i]["welfare"]) if pacing
                else max(range(len(mine)), key=lambda i: mine[i]["spent_share"]))
        tuned[key] = candidates[k * len(GAINS) + best]
        rows += [{**_named(key), "what": "gains", "value": f"kp={g[0]:g} ki={g[1]:g}", "step": "", **sc,
                  "paces": _paces(sc)} for g, sc in zip(GAINS, mine)]
        log(f"{key}: PI gains {GAINS[best]}, welfare {mine[best]['welfare']:.1f}, spent "
            f"{mine[best]['spent_share']:.0%}{'' if pacing else ' (none of the gains paces)'}")
    return tuned, rows

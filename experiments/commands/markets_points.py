"""One point of `radix-auction markets`: a market episode under one design, its bidders' bidding rule
and budgets, and the row of measures it gives. Everything here runs in a worker: a point is a
plain, picklable `Point`, and `run_point` returns plain values.

How bidders bid (`Bidders`):
- "truthful": every bidder's multiplier is 1 (bids equal urgencies), with an unlimited budget.
- "claim": priority is free under the designs that charge nothing, so a bidder gains by claiming
  more than the others (`tests/test_markets_bidders.py`); where every bidder escalates, claims
  bounded by the design (`max_priority` of `CLAIMED_PRIORITY`) all reach the cap: every request
  claims it (`CLAIM_MULTIPLIER`), and the priority order is gone. The end point of that race,
  not an equilibrium (under the cap one bidder would rather keep its own urgent requests first).
- "pid": every bidder paces with the PI pacer (`auction_gym.pacing.PIDPacer`, in log space, down to
  `ALPHA_MIN`) with the point's gains, from the multiplier `start`.
- "ogd": every bidder paces with `OGDPacer`'s defaults (the paper's step, `lambda_max` 20) from
  multiplier 1, as the paper's pacer starts.
`deviation` != 1 makes bidder 0 play that factor times what its own pacer says (its pacer still reads
the multiplier it chose itself), to measure its gain from deviating.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from operator import ge

import numpy as np

from auction_gym.market import Market, MarketConfig
from auction_gym.market.observation import Obs
from auction_gym.pacing import MultiplierPolicy, OGDPacer, PIDPacer
from auction_gym.workload import SAMPLE_TRACE, get_workload

from ..sweeps import replica_scale

SLO_SECONDS = 3.0
"""An urgent request's latency objective: its class's median break-even latency (V / w, s)."""
UNLIMITED = 1e12
"""The budget of truthful bidders: far beyond what any design charges in an episode."""
ALPHA_MIN = 1e-4
"""The PI pacer's smallest multiplier: budgets a tenth of truthful spend need shading by 10-100x
in some rounds, and the controller works on log alpha, so its floor is far below that."""
CLAIM_MULTIPLIER = 1e6
"""The multiplier of a bidder claiming the highest priority: every urgency in the workloads is
above 1e-6, so every request's priority reaches the cap."""
CLAIMED_PRIORITY = 0
"""The highest priority the free-priority designs accept when bidders claim it (`max_priority`)."""
CLASSES = ("urgent", "interactive", "background")
"""The urgency classes (`auction_gym.workload.classes`)."""
RULES = ("truthful", "claim", "pid", "ogd")


@dataclass(frozen=True)
class Bidders:
    """How every bidder bids at a point, and what it may spend (see the module docstring)."""

    rule: str = "truthful"
    gains: tuple[float, float] = (0.05, 0.01)
    """The PI pacer's (kp, ki)."""
    budget: float | None = None
    """Each bidder's budget for the episode; None: UNLIMITED."""
    budget_rounds: int | None = None
    """The rounds the budget is paced over (`MarketConfig.budget_rounds`)."""
    start: float = 1.0
    """The multiplier the pacers start from (`MarketConfig.initial_multiplier`)."""
    deviation: float = 1.0

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown bidding rule {self.rule!r}; valid: {', '.join(RULES)}")

    def pacer(self, alpha_max: float) -> MultiplierPolicy | None:
        """The pacer every bidder runs; None for the fixed multipliers of "truthful" and "claim"."""
        if self.rule == "pid":
            return PIDPacer(*self.gains, alpha_min=ALPHA_MIN, alpha_max=alpha_max)
        if self.rule == "ogd":
            return OGDPacer(alpha_max=alpha_max)
        return None


@dataclass(frozen=True)
class Point:
    """One market to run: a design with its keyword arguments, at a workload, load and size."""

    design: str
    workload: str
    load: float
    size: int
    kwargs: tuple[tuple[str, object], ...] = ()
    """The design's keyword arguments, as sorted (name, value) pairs (hashable)."""
    bidders: Bidders = Bidders()

    def with_kwargs(self, **kwargs: object) -> Point:
        return replace(self, kwargs=tuple(sorted({**dict(self.kwargs), **kwargs}.items())))

    def config(self) -> MarketConfig:
        """The market of the point: `size` requests (and at most as many rounds), offered at `load`."""
        entry = get_workload(self.workload)
        scale = replica_scale(self.workload)
        trace = SAMPLE_TRACE if entry.trace_argument is not None else None
        bidders = self.bidders
        claim = bidders.rule == "claim"
        kwargs = dict(self.kwargs)
        if claim:
            kwargs["max_priority"] = CLAIMED_PRIORITY
        return MarketConfig(
            mechanism=self.design, mechanism_kwargs=kwargs, workload=self.workload, trace_path=trace,
            workload_kwargs=scale.workload_kwargs(entry.intensity, self.load, self.size, 1),
            engine_kwargs=dict(scale.engine_kwargs), horizon=self.size, warmup=0.0,
            budget=UNLIMITED if bidders.budget is None else bidders.budget, budget_rounds=bidders.budget_rounds,
            initial_multiplier=bidders.start if bidders.rule == "pid" else 1.0,
            alpha_max=CLAIM_MULTIPLIER if claim else MarketConfig.alpha_max,
        )


def run_point(point: Point, seed: int) -> tuple[dict, list[float]]:
    """One episode of `point` seeded `seed`: its row of measures, and the posted price of each round
    (empty for a design that posts none)."""
    t0 = time.perf_counter()
    config = point.config()
    market = Market(config)
    market.reset(seed)
    kinds = _kinds(point.workload, point.load, point.size, seed)
    totals = _Totals()
    play = _Playing(point.bidders, config)
    prices: list[float] = []
    while not market.done:
        report = market.step(play.multipliers(market))
        totals.add(report, market)
        if report.decision is not None and len(posted := report.decision.prices) == 1:
            prices.append(posted[0])
    row = totals.row(market, kinds)
    row["wall_s"] = time.perf_counter() - t0
    return row, prices


@lru_cache(maxsize=32)
def _kinds(workload: str, load: float, size: int, seed: int) -> dict[int, str]:
    """Each request's kind in the episode seeded `seed` of the points at `workload`, `load` and
    `size` (read-only): every design and bidding rule there replays the same requests (a point's
    config draws no episode parameters), so a process draws them once for all of those points."""
    config = Point("fcfs", workload, load, size).config()
    return {r.id: r.kind for r in config.make_workload(seed)}


class _Playing:
    """The multipliers every bidder plays each round under a `Bidders` rule."""

    def __init__(self, bidders: Bidders, config: MarketConfig) -> None:
        self.pacer = bidders.pacer(config.alpha_max)
        self.fixed = [config.alpha_max if bidders.rule == "claim" else 1.0] * config.num_bidders
        self.deviation, self.alpha_max = bidders.deviation, config.alpha_max
        self.own = config.initial_multiplier  # bidder 0's own pacer's last multiplier

    def multipliers(self, market: Market) -> list[float]:
        if self.pacer is None:
            return self.fixed
        rows = market.observations().tolist()
        if self.deviation == 1.0:
            return self.pacer.multipliers(rows)
        rows[0][Obs.PREV_MULTIPLIER] = self.own / self.alpha_max  # its pacer reads what it chose
        alpha = self.pacer.multipliers(rows)
        self.own = alpha[0]
        alpha[0] = min(self.deviation * alpha[0], self.alpha_max)
        return alpha


class _Totals:
    """What an episode adds up to, round by round."""

    def __init__(self) -> None:
        self.welfare = self.revenue = 0.0
        self.bidder0 = 0.0
        self.finished: list[int] = []
        self.charged = self.capped = 0
        self.all_out_round: int | None = None
        self._out_at: list[float] | None = None  # each bidder's spend at which it is out of budget

    def add(self, report, market: Market) -> None:
        self.welfare += report.welfare
        payments = report.payments.tolist()
        self.revenue += sum(payments, 0.0)  # `RoundReport.revenue`, from the list read once
        if len(utility := report.utility):
            self.bidder0 += utility.item(0)
        self.finished += report.finished
        charging, capped = any(payments), report.capped
        if charging or capped:  # payments are >= 0: a round that charges nothing pays none
            paid = [i for i, p in enumerate(payments) if p > 0]
            self.charged += len(set(paid).union(capped)) if capped else len(paid)
            self.capped += len(capped)
        # Spend moves only in a round that charges (budgets are fixed within an episode): the test
        # is read again only after one, and in the first round, against the budgets' floor.
        if self.all_out_round is None and (self._out_at is None or charging):
            if self._out_at is None:
                self._out_at = (market.budget * (1 - 1e-9)).tolist()
            if all(map(ge, market.spent.tolist(), self._out_at)):
                self.all_out_round = market.round

    def row(self, market: Market, kinds: dict[int, str]) -> dict:
        records = market.engine.records
        finished = [records[i] for i in self.finished]
        prompt_tokens = sum(r.prompt_len for r in finished)
        rounds = max(market.round, 1)
        row = {"welfare": self.welfare, "revenue": self.revenue, "utility": self.welfare - self.revenue,
               "bidder0_utility": self.bidder0, "requests": len(self.finished),
               # Which requests finished, as one number (ints hash alike in every process).
               "finished_digest": hash(tuple(sorted(self.finished))) & 0xFFFFFFFF, "rounds": market.round,
               "spent_share": float(np.mean(market.spent / market.budget)),
               "capped_share": self.capped / self.charged if self.charged else 0.0,
               "all_out_share": 1.0 if self.all_out_round is None else self.all_out_round / rounds,
               # The engine's hit rate (`Metrics.hit_rate`): every request that finished did in a round.
               "hit_rate": sum(r.cached_tokens for r in finished) / prompt_tokens if finished else math.nan,
               "seconds_per_request": market.busy_time / max(market.admitted_total, 1),
               "prompt_tokens": float(prompt_tokens)}
        for cls in CLASSES:
            recs = [r for r in finished if kinds[r.id] == cls]
            for what in ("ttft", "latency"):
                values = np.array([getattr(r, what) for r in recs]) if recs else np.array([np.nan])
                row[f"{cls}_{what}_mean"] = float(np.mean(values))
                row[f"{cls}_{what}_p99"] = float(np.percentile(values, 99))
        urgent = [records[i].latency for i in self.finished if kinds[i] == "urgent"]
        row["urgent_slo_share"] = float(np.mean([x <= SLO_SECONDS for x in urgent])) if urgent else float("nan")
        return row

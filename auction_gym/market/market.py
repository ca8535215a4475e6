"""The market: bidders with budgets bid through an auction for admission to a serving engine.

One step (`Market.step`) is one admission round: the bidders' multipliers are set, the engine runs
(decoding, idling until arrivals) up to and including its next prefill iteration, whose admission
order the mechanism decides with bids alpha_i x urgency over the whole waiting queue. So a step
covers the engine time from the end of the previous round to the end of this one; requests that
finish in that time count in it. An episode is `horizon` rounds, or fewer if the workload runs dry;
it starts after `warmup` engine seconds served with truthful bids and no charges.

Charging (DESIGN.md section 3): the auction prices the whole queue every round, but bidder i pays
only in rounds that admit some of its requests, p_i x a_i / q_i x seconds_per_unit (a_i admitted,
q_i queued), never more than its remaining budget; a bidder with no budget left bids 0.
seconds_per_unit turns the auction's completion units into seconds: under "unit" the engine's busy
seconds per admitted request so far (warm-up included, so the mean is settled by the first round);
under "tokens" the cost model's seconds per prefill token.

Invariants: spent_i <= budget_i; payments >= 0; bids of a bidder out of budget are 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..engine import Iteration
from ..radix_cache import RadixCache
from ..request import Request
from ..scheduler import Scheduler
from .config import AUCTIONS, MarketConfig
from .observation import LATENCY_SCALE, QUEUE_SCALE, TOTAL_QUEUE_SCALE, TTFT_SCALE, URGENCY_LOG_SCALE, Obs, ema


@dataclass
class RoundReport:
    """What one step did. Per-bidder arrays are indexed by bidder; money in workload units."""

    round: int
    time: float
    """Engine clock at the end of the step (s)."""
    admitted: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    payments: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Charged this round (after the budget cap)."""
    utility: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Realized utility: sum of V - w x latency over finished requests, minus payments."""
    welfare: float = 0.0
    """Sum of V - w x latency over the requests finished in the step (all bidders)."""
    hit_rate: float = math.nan
    """Cached / prompt tokens of the requests admitted this round."""
    mean_latency: float = math.nan
    mean_ttft: float = math.nan
    exhausted: bool = False
    """The workload ran dry before this round could happen (nothing was admitted)."""

    @property
    def revenue(self) -> float:
        return float(self.payments.sum())


class _Bidding:
    """Scheduler wrapper that stamps the current bids on the queue before the mechanism orders it."""

    def __init__(self, inner: Scheduler, num_bidders: int) -> None:
        self.inner, self.name = inner, inner.name
        self.alpha = np.ones(num_bidders)
        self.queued = np.zeros(num_bidders, dtype=np.int64)

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        alpha = self.alpha
        queued = [0] * len(alpha)
        for r in queue:
            r.bid = alpha[r.bidder] * r.urgency
            queued[r.bidder] += 1
        self.queued = np.array(queued)
        return self.inner.order(queue, cache)


class Market:
    """Runs one scenario (`MarketConfig`) round by round. Call `reset(seed)` before `step`."""

    def __init__(self, config: MarketConfig | None = None) -> None:
        self.config = config or MarketConfig()
        self.n = self.config.num_bidders
        self.budget = np.array(self.config.budgets())
        self.rho = self.budget / self.config.horizon
        self.obs_high = Obs.high(self.config.horizon)
        self.engine = None

    def reset(self, seed: int) -> None:
        cfg, n = self.config, self.n
        self._bidding = _Bidding(cfg.make_scheduler(), n)
        self.engine = cfg.make_engine(self._bidding)
        self.engine.submit(cfg.make_workload(seed))
        self.busy_time = 0.0
        self.admitted_total = 0
        while self.engine.now < cfg.warmup and self._advance() is not None:
            pass
        self.round = 0
        self.spent = np.zeros(n)
        self.alpha = np.ones(n)
        self.last_spend = np.zeros(n)
        self.price_ema = 0.0
        self.hit_ema = 0.0
        self.latency_ema = np.zeros(n)
        self.ttft_ema = np.zeros(n)
        self.exhausted = False

    @property
    def remaining(self) -> np.ndarray:
        return self.budget - self.spent

    @property
    def terminated(self) -> bool:
        """All `horizon` rounds were played: the budget period is over."""
        return self.round >= self.config.horizon

    @property
    def truncated(self) -> bool:
        """The workload ran dry before the horizon."""
        return self.exhausted and not self.terminated

    @property
    def done(self) -> bool:
        return self.exhausted or self.terminated

    def step(self, multipliers: Sequence[float] | np.ndarray) -> RoundReport:
        """Play one round with bid multipliers alpha (one per bidder, finite, >= 0)."""
        if self.engine is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed)")
        alpha = np.asarray(multipliers, dtype=np.float64).reshape(-1)
        if alpha.shape != (self.n,) or not np.all(np.isfinite(alpha)) or np.any(alpha < 0):
            raise ValueError(f"need {self.n} finite multipliers >= 0, got {multipliers!r}")
        self.alpha = alpha
        self._bidding.alpha = np.where(self.remaining > 0, alpha, 0.0)
        report = RoundReport(round=self.round, time=self.engine.now, payments=np.zeros(self.n), utility=np.zeros(self.n))
        while True:
            it = self._advance()
            if it is None:
                self.exhausted = report.exhausted = True
                break
            report.finished += it.finished
            if it.kind == "prefill":
                report.admitted = it.admitted
                break
        report.time = self.engine.now
        self._account_finished(report)
        if report.admitted:
            self._charge(report)
            self.round += 1
        report.utility -= report.payments
        self.spent += report.payments
        self.last_spend = report.payments
        return report

    def _advance(self) -> Iteration | None:
        """One engine iteration, keeping the busy time and admissions behind seconds_per_unit."""
        it = self.engine.step()
        if it is not None and it.kind != "idle":
            self.busy_time += it.end - it.start
            self.admitted_total += len(it.admitted)
        return it

    def _account_finished(self, report: RoundReport) -> None:
        records = self.engine.records
        lat = [[] for _ in range(self.n)]
        ttft = [[] for _ in range(self.n)]
        for rid in report.finished:
            rec = records[rid]
            u = rec.value - rec.urgency * rec.latency
            report.utility[rec.bidder] += u
            report.welfare += u
            lat[rec.bidder].append(rec.latency)
            ttft[rec.bidder].append(rec.ttft)
        if report.finished:
            report.mean_latency = sum(map(sum, lat)) / len(report.finished)
            report.mean_ttft = sum(map(sum, ttft)) / len(report.finished)
        for i in range(self.n):
            if lat[i]:
                self.latency_ema[i] = ema(self.latency_ema[i], sum(lat[i]) / len(lat[i]))
                self.ttft_ema[i] = ema(self.ttft_ema[i], sum(ttft[i]) / len(ttft[i]))

    def _charge(self, report: RoundReport) -> None:
        records = self.engine.records
        admitted = np.zeros(self.n, dtype=np.int64)
        cached = prompt = 0
        for rid in report.admitted:
            rec = records[rid]
            admitted[rec.bidder] += 1
            cached += rec.cached_tokens
            prompt += rec.prompt_len
        report.hit_rate = cached / prompt
        self.hit_ema = ema(self.hit_ema, report.hit_rate)
        inner = self._bidding.inner
        if isinstance(inner, tuple(AUCTIONS.values())):
            if self.config.cost_model == "unit":
                seconds_per_unit = self.busy_time / self.admitted_total
            else:
                seconds_per_unit = self.engine.cost.prefill_per_token
            queued = self._bidding.queued
            for i, p in inner.last_outcome.payments.items():
                if admitted[i]:
                    due = p * admitted[i] / queued[i] * seconds_per_unit
                    report.payments[i] = min(due, max(self.remaining[i], 0.0))
        self.price_ema = ema(self.price_ema, report.payments.sum() / len(report.admitted))

    def observations(self) -> np.ndarray:
        """Every bidder's observation, shape (num_bidders, Obs.SIZE), float32 (see observation.py)."""
        n, T = self.n, self.config.horizon
        count = np.zeros(n)
        urgency = np.zeros(n)
        waiting = self.engine.waiting
        for r in waiting:
            count[r.bidder] += 1
            urgency[r.bidder] += r.urgency
        obs = np.empty((n, Obs.SIZE))
        obs[:, Obs.BUDGET_LEFT] = self.remaining / self.budget
        obs[:, Obs.TIME_LEFT] = (T - self.round) / T
        obs[:, Obs.SPEND_VS_TARGET] = self.spent / max(self.round, 1) / self.rho
        obs[:, Obs.LAST_SPEND_LOG] = np.log1p(self.last_spend / self.rho)
        obs[:, Obs.OWN_QUEUED] = count / QUEUE_SCALE
        obs[:, Obs.OWN_URGENCY] = np.log1p(urgency / np.maximum(count, 1)) / URGENCY_LOG_SCALE
        obs[:, Obs.TOTAL_QUEUE] = len(waiting) / TOTAL_QUEUE_SCALE
        obs[:, Obs.CLEARING_PRICE] = self.price_ema / self.rho
        obs[:, Obs.OWN_LATENCY] = self.latency_ema / LATENCY_SCALE
        obs[:, Obs.OWN_TTFT] = self.ttft_ema / TTFT_SCALE
        obs[:, Obs.CACHE_HIT_RATE] = self.hit_ema
        obs[:, Obs.PREV_MULTIPLIER] = self.alpha / self.config.alpha_max
        return np.clip(obs, Obs.LOW, self.obs_high).astype(np.float32)

"""The market: bidders with budgets bid through an auction for admission to a serving engine.

One step (`Market.step`) is one admission round: the bidders' multipliers are set and the engine
runs up to and including its next prefill iteration that admits a request, in the order the
policy decides with bids alpha_i x urgency over the whole waiting queue. Requests that finish in
that time count in the step. An episode is `horizon` rounds, or fewer if the workload runs dry,
after `warmup` engine seconds served with truthful bids and no charges.

Charging (docs/design.md section 3): the round the policy decided says what it charges
(`charges`); an auction's bidder i pays p_i x a_i / q_i x seconds_per_unit (a_i admitted, q_i
queued) only in rounds that admit some of its requests, a posted-price design each admitted
request's price, both capped by the budget left. The round, call by call: docs/engine.md
section 2 ("One step").

Invariants: spent_i <= budget_i; payments >= 0; bids of a bidder out of budget are 0.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .. import core
from .._checks import check_int, config_or_default
from ..engine import Iteration, RequestRecord, rejections
from ..policy import Decision
from .config import MarketConfig
from .observation import EMA, LATENCY_SCALE, QUEUE_SCALE, TOTAL_QUEUE_SCALE, TTFT_SCALE, URGENCY_LOG_SCALE, Obs, ema

_ROW = (Obs.BUDGET_LEFT, Obs.TIME_LEFT, Obs.SPEND_VS_TARGET, Obs.LAST_SPEND_LOG, Obs.OWN_QUEUED, Obs.OWN_URGENCY,
        Obs.TOTAL_QUEUE, Obs.CLEARING_PRICE, Obs.OWN_LATENCY, Obs.OWN_TTFT, Obs.CACHE_HIT_RATE, Obs.PREV_MULTIPLIER)
"""The features in the order `Market.observations` writes a bidder's row, which must be the
vector's (`observation.FEATURES` defines it; checked here, at import): a row is then one tuple,
not a dozen indexed stores."""
if _ROW != tuple(range(Obs.SIZE)):
    raise ImportError(f"Market.observations writes the features in the order {_ROW}, not the vector's")

_NO_BIDDERS = np.zeros(0)
_NO_BIDDERS.flags.writeable = False


def _no_bidders() -> np.ndarray:
    """RoundReport's arrays before the round fills them: one shared empty array, read-only (every
    step replaces both, where a new empty array each would cost two numpy calls a step)."""
    return _NO_BIDDERS


class _AskedOnce:
    """A round's decision whose charges are asked of it once: the compiled settlement asks first,
    and where it then declines the round, the Python settlement reads the same answer (or error)
    rather than asking a decision, whose `charges` may keep state, a second time."""

    __slots__ = ("decision", "_answer")

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self._answer: tuple[Any, Exception | None] | None = None

    def charges(self, admitted: Sequence[int], per_bidder: Sequence[int], seconds_per_unit: float) -> Any:
        if self._answer is None:
            try:
                self._answer = (self.decision.charges(admitted, per_bidder, seconds_per_unit), None)
            except Exception as e:  # what the compiled call leaves to Python, which raises it
                self._answer = (None, e)
        due, error = self._answer
        if error is not None:
            raise error
        return due


@dataclass
class RoundReport:
    """What one step did. Per-bidder arrays are indexed by bidder; money in workload units."""

    round: int
    time: float
    """Engine clock at the end of the step (s)."""
    admitted: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    payments: np.ndarray = field(default_factory=_no_bidders)
    """Charged this round (after the budget cap)."""
    utility: np.ndarray = field(default_factory=_no_bidders)
    """Realized utility: sum of V - w x latency over finished requests, minus payments."""
    welfare: float = 0.0
    """Sum of V - w x latency over the requests finished in the step (all bidders)."""
    latency_cost: np.ndarray | None = None
    """Per bidder, the latency cost its requests accrued during the step: urgency w x the seconds
    each spent in the system within the step (finished in it or not). Only when the Market was made
    with `accrue_latency_cost=True`, else None. Summed over an episode it is the latency cost of the
    requests finished in it plus what the unfinished ones have accrued so far (from the episode's
    start for those that arrived during the warm-up)."""
    hit_rate: float = math.nan
    """Cached / prompt tokens of the requests admitted this round."""
    mean_latency: float = math.nan
    mean_ttft: float = math.nan
    exhausted: bool = False
    """The workload ran dry before this round could happen (nothing was admitted)."""
    capped: tuple[int, ...] = ()
    """The bidders whose charge this round was cut to what was left of their budget: where that
    happens the auction is no longer VCG."""
    decision: Decision | None = None
    """The round this step admitted from and charged for (`Iteration.decision`): an auction's
    `AuctionRound`, a posted-price design's or a priority order's `PostedRound`; None under the
    policies that only order (`AdmissionPolicy.order_round`), and when nothing was admitted."""

    @property
    def revenue(self) -> float:
        return sum(self.payments.tolist(), 0.0)


class Market:
    """Runs one scenario (`MarketConfig`) round by round. Call `reset(seed)` before `step`.

    Attributes:
        draws: the current episode's drawn parameters (`MarketConfig.draw_episode`; empty unless
            `episode_draws` is set); `budget` and `rho` are the episode's.

    Constructed on the compiled core (`auction_gym.core.active()`), the loops over requests and
    bidders of `_accrued` and `observations` run compiled (`_core.LatencyAccrual`,
    `_core.ObservationRows`), and so do a round's `_bids` and `_settle` (`_core.RoundLedger`), bit
    for bit the Python below, which runs wherever the compiled code declines an input
    (docs/design.md section 8); on the compiled engine a round's iterations, and the warm-up's, run
    in one call (`_play`).

    With `replicas` > 1 every replica runs its own policy over its own queue; a round is one
    admission by any replica, charged from the round that replica's auction decided. Budgets are
    global: every replica's charges draw on them.
    """

    def __init__(self, config: MarketConfig | None = None, accrue_latency_cost: bool = False) -> None:
        self.config = config_or_default("config", config, MarketConfig)
        self.accrue_latency_cost = accrue_latency_cost
        self.n = self.config.num_bidders
        self.draws: dict = {}
        self._set_budgets(self.config.budgets())
        self.obs_high = Obs.high(self.config.pacing_rounds)
        self._obs_bounds = np.tile(Obs.LOW, self.n), np.tile(self.obs_high, self.n)  # all rows, flat
        self._pack_obs = struct.Struct(f"{self.n * Obs.SIZE}f").pack  # all rows' features, as float32
        self._compiled = core.compiled_module() if core.active() == "compiled" else None
        self._rows = None if self._compiled is None else self._compiled.ObservationRows(
            self.n, int(self.config.pacing_rounds), self.config.alpha_max, QUEUE_SCALE, TOTAL_QUEUE_SCALE,
            URGENCY_LOG_SCALE, LATENCY_SCALE, TTFT_SCALE, Obs.LOW.tolist(), self.obs_high.tolist())
        self._ledger = None if self._compiled is None else self._compiled.RoundLedger(self.n, EMA, RequestRecord)
        self.engine = None

    def __reduce_ex__(self, protocol: Any) -> Any:
        # What copy.copy, copy.deepcopy and pickle ask first: refused here with what to do instead,
        # where the engine's workload stream (a generator) or a compiled object would refuse later.
        raise TypeError(
            f"a {type(self).__name__}, and an env holding one, cannot be copied or pickled: its engine, workload "
            "stream and compiled core objects cannot be duplicated. An episode is fixed by its seed and the "
            "actions played: to play one again, make a new env, reset it with the same seed and play the same "
            "actions.")

    def reset(self, seed: int) -> None:
        """A new episode drawn from `seed` (an int >= 0; ValueError otherwise): its parameters
        (`MarketConfig.episode_draws`), a fresh engine serving its workload, warmed up for
        `MarketConfig.warmup` seconds with truthful bids and no charges, and full budgets."""
        seed = check_int("seed", seed, 0)  # numpy's refusal speaks of "entropy", and a string was read by int()
        cfg, n = self.config, self.n
        self.draws = cfg.draw_episode(seed)
        if "budget_scale" in self.draws:
            self._set_budgets(cfg.episode_budgets(self.draws))
        if cfg.replicas == 1:
            self.engine = cfg.make_engine(cfg.make_scheduler())
        else:  # a policy per replica: each auction keeps its own tree across rounds
            self.engine = cfg.make_cluster([cfg.make_scheduler() for _ in range(cfg.replicas)])
        self.engine.submit(cfg.make_workload(seed, self.draws))
        self.busy_time = 0.0
        self.admitted_total = 0
        truthful = [1.0] * n
        # An engine that plays a round's iterations in one call (the compiled one) does, unless its
        # `step` was replaced; any other is stepped here, one iteration at a time, with the same result.
        self._play_round = getattr(self.engine, "play_round", None)
        if self._play_round is not None and self._plays_own_steps():
            self.busy_time, self.admitted_total = self._in_one_call(self.engine.warm_up, float(cfg.warmup), truthful)
        else:
            while self.engine.now < cfg.warmup and self._advance(truthful, None) is not None:
                pass
        self.round = 0
        self._episode_start = self.engine.now
        self._accrued_to: dict[int, float] = {}
        self._accrual = None if self._compiled is None else self._compiled.LatencyAccrual(n, self._episode_start)
        self._held_call, self._held_engine = self._compiled_in_system()
        self.spent = np.zeros(n)
        self.alpha = np.full(n, cfg.initial_multiplier)
        self.last_spend = np.zeros(n)
        self.price_ema = 0.0
        self.hit_ema = 0.0
        self._latency_ema = [0.0] * n
        self._ttft_ema = [0.0] * n
        self.exhausted = False

    def _set_budgets(self, budgets: list[float]) -> None:
        """The episode's budgets and per-round targets rho = B / T (T: `MarketConfig.pacing_rounds`)."""
        self.budget = np.array(budgets)
        self.rho = self.budget / self.config.pacing_rounds
        # Constant within an episode and read every step: kept as Python floats (hot path).
        self._budget = self.budget.tolist()
        self._rho = self.rho.tolist()

    def _check_anything_ran(self) -> None:
        """ValueError when the workload ran dry with every request rejected by the engine (a KV
        capacity below every request's prompt + output): an episode of one empty round otherwise."""
        records = self.engine.records
        rejected = rejections(records)
        if records and len(rejected) == len(records):
            first = next(iter(rejected))
            raise ValueError(
                f"nothing can run: the engine rejected all {len(records)} requests of the workload (e.g. request "
                f"{first}: {rejected[first]}); raise engine_kwargs['kv_capacity_tokens']")

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
        spent = self.spent  # before the round (the round's charges replace the array)
        bids = None if self._ledger is None else self._ledger.bids(multipliers, spent, self._budget)
        self.alpha, alpha_now, remaining = self._bids(multipliers) if bids is None else bids
        # Positional, every default given (hot path); payments and utility are replaced below.
        report = RoundReport(self.round, self.engine.now, [], [], _NO_BIDDERS, _NO_BIDDERS)
        self._play(report, alpha_now, remaining)
        report.time = self.engine.now
        if self.accrue_latency_cost:
            report.latency_cost = self._accrued(report)
        # Asked of its charges once, whichever settlement reads them (`_AskedOnce`), unless asking
        # twice is alike.
        decision = report.decision
        asked = None if self._ledger is None or decision is None else (
            decision if decision.stateless_charges else _AskedOnce(decision))
        if self._ledger is None or not self._settled(report, spent, asked):
            self._settle(report, spent.tolist(), asked)
        if report.admitted:
            self.round += 1
        return report

    def _settled(self, report: RoundReport, spent: np.ndarray, asked: _AskedOnce | Decision | None) -> bool:
        """`_settle` in one compiled call (`_core.RoundLedger`), the round's charges read of `asked`
        (its decision, None where there is none); False, nothing changed, where it declines the input."""
        charged = report.decision is not None and report.admitted
        settled = self._ledger.settle(report.finished, report.admitted, asked, self.engine.records,
                                      self._budget, spent, self._latency_ema, self._ttft_ema, self.hit_ema,
                                      self.price_ema, self._seconds_per_unit() if charged else 0.0)
        if settled is None:
            return False
        (report.utility, report.payments, spent_after, report.welfare, report.mean_latency, report.mean_ttft,
         report.hit_rate, report.capped, self.hit_ema, self.price_ema) = settled
        self.last_spend = report.payments
        if spent_after is not None:
            self.spent = spent_after
        return True

    def _settle(self, report: RoundReport, spent: list[float], asked: _AskedOnce | Decision | None = None) -> None:
        """The round's welfare, utilities, charges and moving averages, given each bidder's spend
        before it: fills the report's and updates the market's. The charges are read of `asked` where
        given (the decision the compiled settlement asked already), else of the round's decision."""
        utility = self._account_finished(report)
        payments = [0.0] * self.n
        if report.admitted:
            self._charge(report, spent, payments, asked)
        # The round's arrays, one numpy call each.
        report.payments = self.last_spend = np.array(payments)
        if any(payments):
            report.utility = np.array(utility) - report.payments
            self.spent = self.spent + report.payments
        else:  # nothing charged (most rounds): x - 0.0 and x + 0.0 are x (spend is never -0.0)
            report.utility = np.array(utility)

    def _bids(self, multipliers: Sequence[float] | np.ndarray) -> tuple[np.ndarray, list[float], list[float]]:
        """The multipliers as an array, and the round's multipliers and budgets left, 0 for a
        bidder out of budget; ValueError unless they are one per bidder, finite and >= 0."""
        alpha = np.array(multipliers, dtype=np.float64)
        if alpha.ndim != 1:
            if alpha.size != max(alpha.shape, default=1):  # (1, n) or (n, 1) is one row of them; (2, 2) is not
                raise ValueError(f"need {self.n} finite multipliers >= 0 in one row, got an array of shape {alpha.shape}")
            alpha = alpha.reshape(-1)
        values, spent = alpha.tolist(), self.spent.tolist()
        if len(values) != self.n or not all(0.0 <= a < math.inf for a in values):  # NaN fails too
            raise ValueError(f"need {self.n} finite multipliers >= 0, got {multipliers!r}")
        alpha_now = [a if s < b else 0.0 for a, s, b in zip(values, spent, self._budget)]
        return alpha, alpha_now, [b - s if s < b else 0.0 for s, b in zip(spent, self._budget)]

    def _play(self, report: RoundReport, multipliers: list[float], remaining: list[float]) -> None:
        """The round's engine iterations, up to one that admits or the workload's end: fills the
        report's `admitted`, `decision`, `finished` and `exhausted`."""
        if self._play_round is not None and self._plays_own_steps():
            report.admitted, report.decision, report.finished, self.busy_time, self.admitted_total, dry = (
                self._in_one_call(self._play_round, multipliers, remaining))
        else:
            while True:
                it = self._advance(multipliers, remaining)
                if it is None:
                    dry = True
                    break
                report.finished += it.finished
                if it.admitted:  # a prefill that only continues a chunk or resumes is not a round
                    report.admitted, report.decision, dry = it.admitted, it.decision, False
                    break
        if dry:
            self.exhausted = report.exhausted = True
            self._check_anything_ran()

    def _in_one_call(self, call: Callable[..., tuple], *args: Any) -> tuple:
        """The engine's `play_round` or `warm_up` with the busy time and admissions so far; where an
        iteration raises, those of the iterations before it are kept, as the loop keeps them."""
        try:
            return call(*args, self.busy_time, self.admitted_total)
        except BaseException:
            self.busy_time, self.admitted_total = self.engine.tally
            raise

    def _plays_own_steps(self) -> bool:
        """Whether the engine's `step` is still the one its `play_round` and `warm_up` run."""
        engine = self.engine
        return engine.step is getattr(engine, "compiled_step", None)

    def _advance(self, multipliers: list[float], remaining: list[float] | None) -> Iteration | None:
        """One engine iteration with the round's `multipliers` and budgets left (None: no budget
        binds, the warm-up), keeping the busy time and admissions behind seconds_per_unit."""
        it = self.engine.step(multipliers, remaining)
        if it is not None and it.kind != "idle":
            self.busy_time += it.end - it.start
            self.admitted_total += len(it.admitted)
        return it

    def _accrued(self, report: RoundReport) -> np.ndarray:
        """Each bidder's latency cost accrued in the step (`RoundReport.latency_cost`): for every
        request the engine holds or finished in the step, w x the time from where its accrual last
        stopped (its arrival, or the episode's start for a warm-up request, when new) to the step's
        end or its finish. A request that arrived during the step's last iteration enters the
        engine's queue, and the accrual, in the next step, from its arrival: nothing is lost."""
        if self._accrual is not None:
            in_system = self.engine.in_system
            held = self._held_engine if in_system is self._held_call else in_system()
            compiled = self._accrual.accrue(report.finished, self.engine.records, held, report.time)
            if compiled is not None:
                return compiled
            # An input only Python handles: the episode goes on in Python from the compiled state.
            self._accrued_to, self._accrual = self._accrual.accrued_to(), None
        end, cost, since = report.time, [0.0] * self.n, self._accrued_to
        records, start = self.engine.records, self._episode_start
        for rid in report.finished:
            rec = records[rid]
            cost[rec.bidder] += rec.urgency * (rec.finish - since.pop(rid, max(start, rec.arrival)))
        for r in self.engine.in_system():
            rid = r.id
            t = since.get(rid)
            if t is None:  # new this step (not `max` as a default: that ran for every request, every step)
                t = r.arrival if r.arrival > start else start
            cost[r.bidder] += r.urgency * (end - t)
            since[rid] = end
        return np.array(cost)

    def _compiled_in_system(self) -> tuple[Any, Any]:
        """(the engine's `in_system`, the compiled engine whose requests it lists) where that method
        is the compiled engine's own: the compiled accrual then reads those requests off the engine,
        in the same order, without the list (docs/engine.md section 8). (None, None) otherwise."""
        in_system = getattr(self.engine, "in_system", None)
        owner = getattr(in_system, "__self__", None)
        if self._compiled is not None and type(owner) is self._compiled.Engine:
            return in_system, owner
        return None, None

    def _account_finished(self, report: RoundReport) -> list[float]:
        """Welfare and latencies of the requests finished in the round; returns each bidder's
        realized value (before payments)."""
        n = self.n
        utility = [0.0] * n
        if not report.finished:
            return utility
        records = self.engine.records
        lat, ttft, count = [0.0] * n, [0.0] * n, [0] * n
        for rid in report.finished:
            rec = records[rid]
            b, latency = rec.bidder, rec.latency
            u = rec.value - rec.urgency * latency
            utility[b] += u
            report.welfare += u
            lat[b] += latency
            ttft[b] += rec.ttft
            count[b] += 1
        report.mean_latency = sum(lat) / len(report.finished)
        report.mean_ttft = sum(ttft) / len(report.finished)
        for i in range(n):
            if count[i]:
                self._latency_ema[i] = ema(self._latency_ema[i], lat[i] / count[i])
                self._ttft_ema[i] = ema(self._ttft_ema[i], ttft[i] / count[i])
        return utility

    def _charge(self, report: RoundReport, spent: list[float], payments: list[float],
                asked: _AskedOnce | Decision | None = None) -> None:
        """Hit rate and clearing price of the round; writes the charges into `payments`, given
        each bidder's spend before the round (the charges of `asked` where given, `_settle`)."""
        records = self.engine.records
        admitted = [0] * self.n
        cached = prompt = 0
        for rid in report.admitted:
            rec = records[rid]
            admitted[rec.bidder] += 1
            cached += rec.cached_tokens
            prompt += rec.prompt_len
        report.hit_rate = cached / prompt
        self.hit_ema = ema(self.hit_ema, report.hit_rate)
        decided = report.decision  # the round admitted from
        if decided is not None:
            budget = self._budget
            ask = decided.charges if asked is None else asked.charges
            for i, due in ask(report.admitted, admitted, self._seconds_per_unit()).items():
                left = max(budget[i] - spent[i], 0.0)
                if due > left:
                    report.capped += (i,)
                    due = left
                payments[i] = due
        self.price_ema = ema(self.price_ema, sum(payments) / len(report.admitted))

    def _seconds_per_unit(self) -> float:
        """What a unit of the auction's completion model costs in engine seconds, to charge in money."""
        if self.config.cost_model == "unit":
            return self.busy_time / self.admitted_total
        return self.engine.cost.prefill_per_token

    def observations(self) -> np.ndarray:
        """Every bidder's observation, shape (num_bidders, Obs.SIZE), float32: the features of
        `observation.FEATURES`, each clipped to [0, its bound]."""
        if self._rows is not None:
            compiled = self._rows(self.engine.waiting, self._budget, self._rho, self.spent, self.last_spend,
                                  self._latency_ema, self._ttft_ema, self.alpha, self.round, self.price_ema,
                                  self.hit_ema)
            if compiled is not None:
                return compiled
        # Built from Python floats: hot path, every step, for a handful of bidders.
        n, T = self.n, self.config.pacing_rounds
        count = [0] * n
        urgency = [0.0] * n
        waiting = self.engine.waiting
        for r in waiting:  # the whole queue, every step: the bidder read once per request
            bidder = r.bidder
            count[bidder] += 1
            urgency[bidder] += r.urgency
        rounds, alpha_max, price, hit = max(self.round, 1), self.config.alpha_max, self.price_ema, self.hit_ema
        time_left, total_queue = max(T - self.round, 0) / T, math.log1p(len(waiting) / TOTAL_QUEUE_SCALE)
        flat: list[float] = []  # row after row, made into one array
        for b, p, s, last, c, u, latency, ttft, a in zip(
            self._budget, self._rho, self.spent.tolist(), self.last_spend.tolist(), count, urgency,
            self._latency_ema, self._ttft_ema, self.alpha.tolist(),
        ):
            flat += (  # one row, in the order of _ROW
                (b - s) / b,
                time_left,
                s / rounds / p,
                math.log1p(last / p),
                math.log1p(c / QUEUE_SCALE),
                math.log1p(u / (c or 1)) / URGENCY_LOG_SCALE,  # max(c, 1)
                total_queue,
                price / p,
                math.log1p(latency / LATENCY_SCALE),
                math.log1p(ttft / TTFT_SCALE),
                hit,
                a / alpha_max,
            )
        # Packed by struct (hot path). Rounding to float32 before clipping to float32 bounds gives
        # what clipping first would.
        low, high = self._obs_bounds
        try:
            packed = np.frombuffer(self._pack_obs(*flat), np.float32)
        except OverflowError:  # a value beyond float32's range (say, a price over a tiny budget): inf, as numpy rounds it
            packed = np.fromiter(flat, np.float32, len(flat))
        obs = np.maximum(packed, low)
        np.minimum(obs, high, out=obs)
        return obs.reshape(n, Obs.SIZE)

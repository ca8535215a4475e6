"""The simulated engine: iteration times come from a `CostModel`, not from running a model.

Because time is computed, not measured, a decode iteration takes every step up to the next event
at once (the first request to finish, or the first step that ends after the next arrival when a
running slot is free, so that it may be admitted, or with priority preemption on whether or not
one is, so that it may preempt); the clock and every record are the same as stepping one token at
a time. On the compiled core it is `CompiledSimEngine`, the same engine in C++, where it runs the
config (`supports`).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from .. import core
from .._checks import within_int64
from ..policy import AdmissionPolicy
from ..radix_cache import RadixCache
from ..request import Request
from ..waiting_prefixes import WaitingPrefixes
from .arrivals import check_batch
from .config import COUNTS, EngineConfig
from .cost_model import CostModel
from .rules import RULES, EngineRules, OracleRules, SGLangRules
from .serving_engine import Admission, ServingEngine, as_policy


def prefill_work(batch: list[Admission]) -> tuple[int, float]:
    """The cost model's prefill terms of a batch: tokens computed, and query-key pairs of their
    causal attention (each new token attends to the tokens with KV before it, the cached prefix
    and earlier chunks, and to the new tokens before it: on average cached + new / 2 keys)."""
    new, attention = 0, 0
    for adm in batch:  # one pass, each admission's `extend` read once: this runs every prefill
        extend = adm.extend
        new += extend
        attention += extend * (adm.cached + extend / 2)
    return new, attention


class SimEngine(ServingEngine, core.EitherCore):
    """Simulated serving engine (see `ServingEngine` for scheduling, memory and cache).

    Args:
        scheduler: an `AdmissionPolicy` or the name of one (`auction_gym.scheduler_names()`).
        config: capacity limits and the cost model that times iterations.

    Constructed on the compiled core (`auction_gym.core.active()`), `SimEngine(scheduler, config)`
    is the compiled engine, `CompiledSimEngine`, when it runs the config (not with priority
    preemption, nor with `rules` given: `supports`); a subclass is always built as itself.
    """

    def __new__(
        cls, scheduler: AdmissionPolicy | str = "fcfs", config: EngineConfig | None = None,
        rules: EngineRules | None = None,
    ) -> SimEngine:
        if cls is SimEngine and rules is None and core.active() == "compiled":
            if supports(config):
                return object.__new__(CompiledSimEngine)
        return super().__new__(cls)

    def _execute_prefill(self, batch: list[Admission]) -> float:
        return self.cost.prefill_time(*prefill_work(batch))

    def _execute_decode(self) -> tuple[int, float]:
        batch, cost = len(self.running), self.cost
        first = cost.decode_time(batch, self._context)  # one step's time, which every count below starts from
        steps = self._decode_limit()
        # An arrival can only change what happens next if it could be admitted; with every running
        # slot taken it waits for a finish anyway, so decoding need not stop for it, unless it may
        # preempt a running request.
        if batch < self.config.max_running_requests or self.config.priority_preemption:
            steps = min(steps, self._steps_until(self.arrivals.next_possible() - self.now, batch, first))
        return steps, cost.decode_steps_after(first, steps, batch)

    def _steps_until(self, dt: float, batch: int, a: float) -> int:
        """Fewest decode steps (>= 1) of `batch` requests, the first taking `a` seconds
        (`CostModel.decode_time`), whose total time reaches `dt` seconds; a huge number (2**62) if
        never or later than that many steps, where counting one step at a time would not end."""
        if dt <= 0:
            return 1
        never = 2**62
        if math.isinf(dt):
            return never
        cost = self.cost
        q = cost.decode_per_context_token * batch
        # T(k) = a k + q k (k - 1) / 2 is increasing; solve T(k) = dt, then fix rounding. A root
        # beyond `never` (free steps, or so cheap that it overflows to inf) is `never`.
        if q == 0:
            root = dt / a if a > 0 else math.inf
        else:
            b = a - q / 2
            root = (-b + math.sqrt(b * b + 2 * q * dt)) / q
        k = max(math.ceil(root), 1) if root < never else never
        while k > 1 and cost.decode_steps_after(a, k - 1, batch) >= dt:
            k -= 1
        while k < never and cost.decode_steps_after(a, k, batch) < dt:
            k += 1
        return k


class PythonSimEngine(SimEngine):
    """The Python `SimEngine` whatever the core (a subclass is never swapped for the compiled
    engine): for a reader of its internals (`queue`, `rules`, `running`'s records), on the
    cache and waiting prefixes of the active core."""


def supports(config: EngineConfig | None) -> bool:
    """Whether the compiled engine runs `config`: the built-in rule sets and config types, without
    priority preemption, with every count an int within 64 bits (the others keep the Python engine,
    which also takes a count given as an integral float, or a larger one)."""
    if config is None:
        return True
    return (type(config) is EngineConfig and type(config.cost_model) is CostModel and not config.priority_preemption
            and RULES.get(config.reservation) in (SGLangRules, OracleRules) and _counts_fit(config))


def _counts_fit(config: EngineConfig) -> bool:
    counts = [getattr(config, name) for name in COUNTS]  # the compiled engine holds them as 64-bit ints
    if config.chunked_prefill_size is not None:
        counts.append(config.chunked_prefill_size)
    return all(isinstance(n, int) and within_int64(n) for n in counts)


class CompiledSimEngine(SimEngine):
    """`SimEngine` on the compiled core: the iteration, its rules, the waiting queue and the arrivals
    in C++ (`auction_gym._core.Engine`, csrc/engine*.cpp), bit-identical to the Python engine
    (docs/engine.md section 8); the admission policy is still asked in Python, once per admission
    round, with the same `WaitingRound`. It offers what the engine's users read (`step`, `submit`,
    `run`, `metrics`, `records`, `waiting`, `in_system`, `now`, `cache`, `reserved`, `used_tokens`,
    `active_tokens`, `new_token_ratio`, `waiting_prefixes`, `arrivals`), not the Python engine's
    internals (`queue`, `rules`, `_chunked`); its `running` lists requests, not `Running` records.
    For the market it also runs a round's iterations, or the warm-up's, in one call (`play_round`,
    `warm_up`: `Market._play`, `Market.reset`), those its own `step` runs (`compiled_step`: a caller
    that replaced `step`, or a subclass that overrides it, is stepped through it instead). Its
    `scheduler`, `config` and `records` are read-only: the compiled engine holds those it was built with."""

    def __init__(self, scheduler: AdmissionPolicy | str = "fcfs", config: EngineConfig | None = None,
                 rules: None = None) -> None:
        if rules is not None or not supports(config) or core.active() != "compiled":
            raise ValueError("the compiled engine runs the configs `supports` accepts, on the compiled core")
        self._scheduler = as_policy(scheduler)
        self._config = config or EngineConfig()
        self.cost = self._config.cost_model
        self.cache = RadixCache(page_size=self._config.page_size, eviction_policy=self._config.radix_eviction_policy)
        self._prefixes = WaitingPrefixes()
        self._records: dict = {}
        self._core = core.compiled_module().Engine(self._scheduler, self._config, self.cache, self._prefixes,
                                                   self._records)
        self.compiled_step = self._core.step
        # The compiled methods themselves, not Python ones that call them (`step` runs every
        # iteration), where a subclass has not overridden them.
        for name in ("step", "in_system", "play_round", "warm_up"):
            if getattr(type(self), name) is getattr(CompiledSimEngine, name):
                setattr(self, name, self.compiled_step if name == "step" else getattr(self._core, name))

    # What the compiled engine was built with, which it holds: read-only, as replacing one would
    # change nothing it runs.
    scheduler = property(lambda self: self._scheduler, doc="Its admission policy.")
    config = property(lambda self: self._config, doc="Its config.")
    records = property(lambda self: self._records, doc="Its requests' records, by id.")

    def step(self, multipliers: Any = None, remaining: Any = None) -> Any:
        return self._core.step(multipliers, remaining)

    def in_system(self) -> list[Request]:
        return self._core.in_system()

    @property
    def tally(self) -> tuple[float, int]:
        """(busy_time, admitted_total) after the last `play_round`'s or `warm_up`'s iterations, as
        far as they ran: where one raised, the market keeps those before it."""
        return self._core.tally

    def play_round(self, multipliers: Any, remaining: Any, busy_time: float, admitted_total: int) -> tuple:
        """The iterations up to one that admits, or the workload's end, in one call (`Market._play`)."""
        return self._core.play_round(multipliers, remaining, busy_time, admitted_total)

    def warm_up(self, until: float, multipliers: Any, busy_time: float, admitted_total: int) -> tuple:
        """The iterations while the clock is before `until`, in one call (`Market.reset`)."""
        return self._core.warm_up(until, multipliers, busy_time, admitted_total)

    def submit(self, requests: Request | Iterable[Request]) -> None:
        if isinstance(requests, Sequence):  # the compiled arrivals take a batch one by one
            check_batch(requests, self._records)
        self._core.arrivals.submit(requests)

    @property
    def arrivals(self) -> Any:
        """Its arrivals (`pending`, `pending_requests()`, `next_time()`, `upstream`); a view made
        on each read, which keeps the engine alive only while it is held."""
        return self._core.arrivals

    @property
    def now(self) -> float:
        return self._core.now

    @property
    def waiting(self) -> list[Request]:
        return self._core.waiting

    @property
    def running(self) -> list[Request]:
        """The running requests, in the order they joined the batch."""
        return self._core.running

    @property
    def waiting_prefixes(self) -> WaitingPrefixes:
        return self._prefixes

    @property
    def reserved(self) -> int:
        return self._core.reserved

    @property
    def used_tokens(self) -> int:
        return self._core.used_tokens

    @property
    def active_tokens(self) -> int:
        return self._core.active_tokens

    @property
    def new_token_ratio(self) -> float:
        return self._core.new_token_ratio

"""The simulated engine: iteration times come from a `CostModel`, not from running a model.

Because time is computed, not measured, a decode iteration takes every step up to the next event
at once (the first request to finish, or the first step that ends after the next arrival when a
running slot is free, so that it may be admitted, or with priority preemption on whether or not
one is, so that it may preempt); the clock and every record are the same as stepping one token at
a time.
"""

from __future__ import annotations

import math

from .. import core
from ..policy import AdmissionPolicy
from .config import EngineConfig
from .rules import EngineRules
from .serving_engine import Admission, ServingEngine


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


class SimEngine(ServingEngine):
    """Simulated serving engine (see `ServingEngine` for scheduling, memory and cache).

    Args:
        scheduler: an `AdmissionPolicy` or the name of one (`auction_gym.scheduler_names()`).
        config: capacity limits and the cost model that times iterations.

    Constructed on the compiled core (`auction_gym.core.active()`), `SimEngine(scheduler, config)`
    is the compiled engine, `compiled_engine.CompiledSimEngine`, when it runs the config (not
    with priority preemption, nor with `rules` given: `compiled_engine.supports`); a subclass
    is always built as itself.
    """

    def __new__(
        cls, scheduler: AdmissionPolicy | str = "fcfs", config: EngineConfig | None = None,
        rules: EngineRules | None = None,
    ) -> SimEngine:
        if cls is SimEngine and rules is None and core.active() == "compiled":
            from .compiled_engine import CompiledSimEngine, supports

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
        (`CostModel.decode_time`), whose total time reaches `dt` seconds; a huge number if never."""
        if dt <= 0:
            return 1
        if math.isinf(dt):
            return 2**62
        cost = self.cost
        q = cost.decode_per_context_token * batch
        # T(k) = a k + q k (k - 1) / 2 is increasing; solve T(k) = dt, then fix rounding.
        if q == 0:
            k = math.ceil(dt / a)
        else:
            b = a - q / 2
            k = math.ceil((-b + math.sqrt(b * b + 2 * q * dt)) / q)
        k = max(k, 1)
        while k > 1 and cost.decode_steps_after(a, k - 1, batch) >= dt:
            k -= 1
        while cost.decode_steps_after(a, k, batch) < dt:
            k += 1
        return k


class PythonSimEngine(SimEngine):
    """The Python `SimEngine` whatever the core (a subclass is never swapped for the compiled
    engine): for a reader of its internals (`queue`, `rules`, `running`'s records), on the
    cache and waiting prefixes of the active core."""

"""`SimEngine` on the compiled core: the iteration, its rules, the waiting queue and the arrivals in
C++ (`auction_gym._core.Engine`, csrc/engine*.cpp), bit-identical to the Python engine
(docs/engine.md section 8).

`SimEngine(scheduler, config)` builds one when the compiled core is active (`auction_gym.core`)
and `supports(config)`; otherwise, and for every subclass of `SimEngine` (the torch engine), the
Python engine. The admission policy stays in Python: it is asked once per admission round with
the same `WaitingRound` as from the Python engine.
"""

from __future__ import annotations

from typing import Iterable

from .. import core
from ..policy import AdmissionPolicy
from ..radix_cache import RadixCache
from ..registry import make_scheduler
from ..request import Request
from ..waiting_prefixes import WaitingPrefixes
from .config import EngineConfig
from .cost_model import CostModel
from .rules import RULES, OracleRules, SGLangRules
from .sim_engine import SimEngine


def supports(config: EngineConfig | None) -> bool:
    """Whether the compiled engine runs `config`: the built-in rule sets and config types, without
    priority preemption (those keep the Python engine)."""
    if config is None:
        return True
    return (type(config) is EngineConfig and type(config.cost_model) is CostModel and not config.priority_preemption
            and RULES.get(config.reservation) in (SGLangRules, OracleRules))


class CompiledSimEngine(SimEngine):
    """A `SimEngine` whose state lives in the compiled core. It offers what the engine's users read
    (`step`, `submit`, `run`, `metrics`, `records`, `waiting`, `in_system`, `now`, `cache`,
    `reserved`, `used_tokens`, `active_tokens`, `new_token_ratio`, `waiting_prefixes`, `arrivals`'s
    `pending` and `upstream`), not the Python engine's internals (`queue`, `rules`, `_chunked`...);
    `running` holds the running requests (not `state.Running` records)."""

    def __init__(self, scheduler: AdmissionPolicy | str = "fcfs", config: EngineConfig | None = None,
                 rules: None = None) -> None:
        if rules is not None or not supports(config) or core.active() != "compiled":
            raise ValueError("the compiled engine runs the configs `compiled_engine.supports` accepts, on the compiled core")
        self.scheduler = make_scheduler(scheduler) if isinstance(scheduler, str) else AdmissionPolicy.adopt(scheduler)
        self.config = config or EngineConfig()
        self.cost = self.config.cost_model
        self.cache = RadixCache(page_size=self.config.page_size, eviction_policy=self.config.radix_eviction_policy)
        self._prefixes = WaitingPrefixes()
        self.records = {}
        self._core = core.compiled_module().Engine(self.scheduler, self.config, self.cache, self._prefixes, self.records)
        # The compiled methods themselves, not Python ones that call them: `step` runs every iteration.
        self.step = self._core.step
        self.in_system = self._core.in_system

    def submit(self, requests: Request | Iterable[Request]) -> None:
        self._core.arrivals.submit(requests)

    @property
    def arrivals(self):
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

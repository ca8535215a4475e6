"""What a market is made of: workload, engine, mechanism, bidders and budgets."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from .._checks import check_count, check_number, is_real
from ..cluster import ROUTERS, ClusterEngine, make_router
from ..engine import EngineConfig, ServingEngine
from ..mechanism.smith import check_tie_break
from ..mechanism.validation import validate_cost_model
from ..policy import AdmissionPolicy
from ..registry import AuctionClasses, Names, get_mechanism, make_scheduler, mechanism_names, resolve
from ..request import Request
from ..workload import AgenticConfig, get_workload, workload_names

MECHANISMS = Names(mechanism_names)
"""The registered admission policies, in the order tables list them: no-money baselines (FCFS, then
cache-aware ones), then the auctions; a live view of `auction_gym.registry`, so a policy registered
later is in it."""
WORKLOADS = Names(workload_names)
"""The registered workloads, in table order; a live view of `auction_gym.workload.registry`, so a
workload registered later is in it."""
# Engines by backend name, as "module:Class", imported on first use: the PyTorch engine lives in
# gpu_backend, which builds on auction_gym, so auction_gym must not import it up front.
BACKENDS = {"sim": "auction_gym.engine:SimEngine", "torch": "gpu_backend:TorchEngine"}
AUCTIONS = AuctionClasses()
"""{name: class} of the registered auctions, which the market charges (a live view of the registry)."""
COST_MODELS = ("tokens", "unit", "service")
"""The auctions' completion-time models (docs/design.md, "The economic model"): the mechanism's
"tokens" and "unit", and "service", which is "tokens" with the per-request work set to the
engine's service time of a request (`MarketConfig.service_overhead`)."""
EPISODE_DRAWS = ("rate", "budget_scale")
"""Scenario parameters `MarketConfig.episode_draws` may draw per episode."""
DEFAULT_WORKLOAD = get_workload("agentic").defaults
"""The default scenario's agentic traffic (the registry entry's defaults over AgenticConfig's)."""
DEFAULT_ENGINE = {"kv_capacity_tokens": 60_000, "max_running_requests": 32}
DECODE_STEPS_PER_REQUEST = 230
"""Decode steps for which a default agentic request holds a running slot, counting the prefill
iterations interleaved with them: about 157 output tokens (the mean of those served) plus prefill.
Fitted so that `MarketConfig.served_rate` is 14.5 requests/s for the default engine (below)."""
CONTEXT_PER_REQUEST = 1700
"""Tokens (prompt + output so far) a running default agentic request holds: measured 1,670-1,680."""
LONG_HORIZON = 1000
"""Rounds after which an overloaded queue outgrows the episode (measured: docs/environment.md,
"Load and episode length")."""


def check_readable_file(path: str | Path, name: str) -> None:
    """Raise ValueError naming argument `name` and `path` unless `path` is a file this process can
    open for reading (checked by opening it, so a missing file, a directory and a file without read
    permission all fail here rather than when the episode first reads it)."""
    p = Path(path)
    if not p.is_file():
        what = "a directory" if p.is_dir() else "not a regular file" if p.exists() else "not found"
        raise ValueError(f"{name} must be a readable file, got {str(path)!r} ({what})")
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ValueError(f"{name} must be a readable file, got {str(path)!r} ({e.strerror})") from None


@dataclass
class MarketConfig:
    """A market scenario. Money is in the workload's units (`auction_gym.workload.classes`).

    The defaults are the default scenario of `RadixAuction-v0`: four alike bidders
    (`bidder_heterogeneity` 0) sending stationary agentic traffic (Poisson, no bursts; 60% growing
    sessions, 40% short urgent calls; 20 requests/s) to an engine with 60k KV tokens and 32 running
    slots. That is above what the engine serves (about 14.5 requests/s, `served_rate`), so a queue
    builds (about 6 waiting on average over the 500 rounds with every bidder pacing; episodes differ
    widely, from under 1 to over 15) and the auction has something to decide. Over longer horizons
    it keeps growing (LONG_HORIZON, `queue_warning`). Budgets bind: with unlimited budgets, truthful
    bidding would spend 0.7 to 56 times the budget (median 18x); with everyone pacing by OGD a
    bidder spends 86% of it on average (66% of bidder-episodes within 90-100%). 8 seeds;
    `python -m experiments.studies.scenario` re-measures. Payments are in seconds of prefill work
    under the default "tokens" cost model.
    `workload_kwargs` and `engine_kwargs` are merged over DEFAULT_WORKLOAD and DEFAULT_ENGINE.
    """

    num_bidders: int = 4
    mechanism: str = "radix_vcg"
    """A registered mechanism (`auction_gym.registry`); the auctions charge VCG payments, the others nothing."""
    mechanism_kwargs: dict[str, Any] = field(default_factory=dict)
    """The mechanism's own keyword arguments (e.g. a tier design's `base_price`), passed to
    `make_scheduler`; a name its class does not take is a TypeError there."""
    cost_model: str = "tokens"
    """The auction's completion-time model (docs/design.md section 3), one of COST_MODELS: "tokens"
    (cache-aware, the default), "unit" (the paper's literal average subtree bid), or "service"
    ("tokens" pricing each request's running-slot time too: `service_overhead`)."""
    request_overhead: float = 1.0
    """Per-request work under "tokens" (prefill tokens); "service" sets its own."""
    tie_break: str = "cached_prefix"
    """How an auction orders requests whose keys tie, as those of bidders out of budget (bids of 0)
    do (docs/design.md section 3; `mechanism.smith.TIE_BREAKS`): "cached_prefix", longest cached
    prefix first, so unpaid requests keep the cache; "request_id", smallest id first, the rule of
    `RadixAuction-v0` and `-v1`. Ties cost the same, so payments do not depend on it."""
    workload: str = "agentic"
    """A registered workload (`auction_gym.workload.registry`)."""
    trace_path: str | Path | None = None
    """The trace (the Mooncake trace, JSONL), required by a workload that replays one (mooncake)."""
    workload_kwargs: dict[str, Any] = field(default_factory=dict)
    """The workload's keyword arguments, over its registry entry's defaults: AgenticConfig fields
    (over DEFAULT_WORKLOAD), SharedPrefixConfig fields, or iter_mooncake keyword arguments (start,
    limit, time_scale (default 4), ...)."""
    backend: str = "sim"
    """A name in BACKENDS: "sim" (simulated) or "torch" (gpu_backend, CUDA when present)."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """EngineConfig fields, over DEFAULT_ENGINE."""
    backend_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of the backend's engine class (e.g. the torch engine's model preset),
    checked against its constructor when the config is made."""
    replicas: int = 1
    """Engine replicas, each with its own KV pool, cache, queue and admission policy (this
    `mechanism`); more than one runs them as an `auction_gym.cluster.ClusterEngine`."""
    router: str = "identity"
    """"identity" (one engine, no router: the only choice for replicas=1) or a name in
    `auction_gym.cluster.ROUTERS` (needed for replicas > 1)."""
    router_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the router's class (only with a router, replicas > 1)."""
    horizon: int = 500
    """Rounds per episode (T)."""
    budget: float | Sequence[float] | None = None
    """Budget per bidder for the episode (money); one number for all, or one per bidder. None:
    budget_per_round x horizon."""
    budget_per_round: float = 0.0001
    """Target spend per round, rho = B / T, when `budget` is None (B = rho x `pacing_rounds`)."""
    budget_rounds: int | None = None
    """The rounds a budget is paced over, T in rho = B / T and in the observation's time left; None:
    `horizon`. An episode that ends when its workload runs dry lasts fewer rounds than a horizon
    set to hold it, so a pacer aiming at B / horizon would leave most of its budget unspent;
    `radix-auction markets` sets it to the episode's length measured on tuning seeds."""
    initial_multiplier: float = 1.0
    """The multiplier each bidder is taken to have played before the first round (the
    observation's `prev_multiplier` at reset), from which a stateless pacer starts: 1 is truthful;
    a pacer against a budget far below truthful spend needs to start lower."""
    alpha_max: float = 2.0
    """Largest bid multiplier a bidder may play (the action bound)."""
    episode_draws: dict[str, Sequence[float]] = field(default_factory=dict)
    """Scenario parameters drawn anew for each episode from its seed, uniformly among the values
    listed, as days differ: "rate" (the agentic arrival rate, requests/s, in place of
    workload_kwargs' rate, which must then be left out) and "budget_scale" (a multiplier of each
    bidder's budget, drawn for every bidder independently). Empty: every episode has the same
    parameters. `Market.draws` has the values of the current episode."""
    warmup: float = 10.0
    """Engine seconds served before the first round, with truthful bids and no charges, so an
    episode starts from a running engine instead of an empty one. (In the default scenario, after
    10 s half the 32 running slots and about 40% of the KV tokens are in use, and nothing waits
    yet; 20 s would fill about 90% of the KV.)"""

    def __post_init__(self) -> None:
        # Kept as the int check_count returns: an integral float (4.0, as JSON or 2e4 give) is
        # accepted, and a float count would break the lists and ranges built from it.
        self.num_bidders = check_count("num_bidders", self.num_bidders)
        get_mechanism(self.mechanism)  # ValueError listing the valid names
        if self.mechanism_kwargs:  # refused now, not at the first reset
            try:
                self.make_scheduler()
            except TypeError as e:
                raise ValueError(f"mechanism_kwargs for {self.mechanism!r}: {e}") from None
        workload = get_workload(self.workload)  # ValueError listing the valid names
        if workload.trace_argument is not None and self.trace_path is None:
            raise ValueError(f"workload={self.workload!r} needs trace_path, the trace it replays")
        if self.trace_path is not None:
            check_readable_file(self.trace_path, "trace_path")
        if self.cost_model not in COST_MODELS:
            raise ValueError(f"unknown cost_model {self.cost_model!r}; valid: {', '.join(COST_MODELS)}")
        if self.cost_model != "service":  # "service" sets its own overhead
            validate_cost_model(self.cost_model, self.request_overhead)
        self._check_episode_draws()
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; valid: {', '.join(BACKENDS)}")
        self.horizon = check_count("horizon", self.horizon)
        self.replicas = check_count("replicas", self.replicas)
        if self.router != "identity" and self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}; valid: identity, {', '.join(ROUTERS)}")
        if self.replicas > 1 and self.router == "identity":
            raise ValueError(f"replicas={self.replicas} needs a router; valid: {', '.join(ROUTERS)}")
        self._check_construction_kwargs()
        known = {f.name for f in fields(EngineConfig)}
        if unknown := set(self.engine_kwargs) - known:
            raise ValueError(f"unknown engine_kwargs {sorted(unknown)}; known: {sorted(known)}")
        # The engine's and the workload's values, which the first reset would meet: refused now,
        # so that a check that only builds the config (`check_env_kwargs`) refuses them too.
        EngineConfig(**{**DEFAULT_ENGINE, **self.engine_kwargs})
        workload.check_kwargs(self.workload_kwargs)
        workload.check_values(self.num_bidders, self.workload_kwargs)
        check_number("warmup", self.warmup, 0, finite=True, unit="(s)")
        check_number("alpha_max", self.alpha_max, 0, above=True, finite=True)
        check_number("initial_multiplier", self.initial_multiplier, 0, finite=True)
        if self.budget_rounds is not None:
            self.budget_rounds = check_count("budget_rounds", self.budget_rounds)
        check_tie_break(self.tie_break)
        self.budgets()  # validates the budget settings

    def _check_construction_kwargs(self) -> None:
        """router and router_kwargs only where replicas are routed, and the router's and the
        backend engine's keyword arguments checked against their constructors, so that a wrong one
        is refused now rather than at the first reset, and none is silently unused."""
        if self.replicas == 1 and self.router != "identity":
            raise ValueError(f"router={self.router!r} needs replicas > 1: one engine has no router (leave router out)")
        if self.router == "identity" and self.router_kwargs:
            raise ValueError(f"router_kwargs {sorted(self.router_kwargs)} given without a router (replicas > 1)")
        if self.router != "identity":
            try:
                make_router(self.router, **self.router_kwargs)
            except TypeError as e:
                raise ValueError(f"router_kwargs for {self.router!r}: {e}") from None
        engine_class = resolve(BACKENDS[self.backend])
        try:
            inspect.signature(engine_class).bind(None, None, **self.backend_kwargs)
        except TypeError as e:
            raise ValueError(f"backend_kwargs for backend {self.backend!r} ({engine_class.__name__}): {e}") from None

    def _check_episode_draws(self) -> None:
        if unknown := set(self.episode_draws) - set(EPISODE_DRAWS):
            raise ValueError(f"unknown episode_draws {sorted(unknown)}; known: {', '.join(EPISODE_DRAWS)}")
        for name, given in self.episode_draws.items():
            values = list(given) if isinstance(given, Iterable) and not isinstance(given, str) else None
            if not values or not all(is_real(v) and math.isfinite(v) and v > 0 for v in values):
                raise ValueError(f"episode_draws[{name!r}] must be a non-empty list of finite numbers > 0, "
                                 f"got {given if values is None else values!r}")
        if "rate" in self.episode_draws and not get_workload(self.workload).open_ended:
            # RadixAuction-v1 and v2 draw the rate by default, so a user who only named a workload lands here.
            raise ValueError(
                f"episode_draws['rate'] needs an open-ended workload (agentic), not {self.workload!r}: leave 'rate' "
                "out of episode_draws (RadixAuction-v1 and v2 draw it by default; give episode_draws={} or "
                "{'budget_scale': [...]}), and their load curve too (workload_kwargs' wave_*, which only the "
                "agentic workload takes)")
        if "rate" in self.episode_draws and "rate" in self.workload_kwargs:
            # Each episode's drawn rate replaces the configured one, which would be silently unused.
            raise ValueError(
                f"workload_kwargs['rate'] = {self.workload_kwargs['rate']!r} would never be used: each episode draws "
                f"its rate from episode_draws['rate'] = {list(self.episode_draws['rate'])!r}. For a fixed rate, give "
                "it as episode_draws['rate'] (one value) or leave 'rate' out of episode_draws")

    def draw_episode(self, seed: int) -> dict[str, Any]:
        """The episode's drawn parameters (`episode_draws`) for `seed`: "rate" a number,
        "budget_scale" one number per bidder. A stream of its own (not the workload's), so a
        scenario without draws sees exactly the workload it saw before."""
        rng = np.random.default_rng([int(seed), 0x5CE7A210])
        draws: dict[str, Any] = {}
        if "rate" in self.episode_draws:
            draws["rate"] = float(rng.choice(np.asarray(self.episode_draws["rate"], dtype=float)))
        if "budget_scale" in self.episode_draws:
            scales = np.asarray(self.episode_draws["budget_scale"], dtype=float)
            draws["budget_scale"] = rng.choice(scales, self.num_bidders).tolist()
        return draws

    def episode_budgets(self, draws: dict[str, Any]) -> list[float]:
        """Each bidder's budget in an episode with `draws` (`draw_episode`)."""
        scales = draws.get("budget_scale", [1.0] * self.num_bidders)
        return [b * s for b, s in zip(self.budgets(), scales)]

    def service_overhead(self) -> float:
        """The per-request work of the "service" cost model, in prefill tokens: 1 / served_rate()
        (a request's running-slot time when every slot is busy) over one prefill token's seconds
        (about 2,130 with the default engine; docs/economic-model.md section 3)."""
        engine = EngineConfig(**{**DEFAULT_ENGINE, **self.engine_kwargs})
        return 1.0 / self.served_rate() / engine.cost_model.prefill_per_token

    def budgets(self) -> list[float]:
        """Each bidder's budget for one episode (money)."""
        if self.budget is None:
            rho = check_number("budget_per_round", self.budget_per_round, 0, above=True, finite=True)
            return [rho * self.pacing_rounds] * self.num_bidders
        if is_real(self.budget):
            values = [self.budget] * self.num_bidders
        elif isinstance(self.budget, Iterable) and not isinstance(self.budget, str):
            values = list(self.budget)
        else:
            raise ValueError(f"budget must be a number > 0, one per bidder, or None, got {self.budget!r}")
        if len(values) != self.num_bidders:
            raise ValueError(f"budget has {len(values)} entries for {self.num_bidders} bidders")
        for b in values:
            check_number("each budget", b, 0, above=True, finite=True)
        return [float(b) for b in values]

    def served_rate(self) -> float:
        """Estimated agentic requests/s the engine serves with every running slot busy: B / (S x
        decode_time(B, B x C)) for B = max_running_requests, S = DECODE_STEPS_PER_REQUEST, C =
        CONTEXT_PER_REQUEST, from the engine's cost model (checked against long episodes:
        docs/environment.md, "Load and episode length")."""
        engine = EngineConfig(**{**DEFAULT_ENGINE, **self.engine_kwargs})
        slots = engine.max_running_requests
        step = engine.cost_model.decode_time(slots, slots * CONTEXT_PER_REQUEST)
        return slots / (DECODE_STEPS_PER_REQUEST * step)

    def queue_warning(self) -> str | None:
        """Why the waiting queue will not stay stable over the horizon, or None. It will not when the
        workload is agentic (an open stream that lasts as long as the horizon), its long-run mean
        arrival rate (where episodes draw it, the largest of `episode_draws['rate']`) exceeds
        `served_rate()`, and the horizon exceeds LONG_HORIZON rounds. The queue then grows by about
        (arrival rate / served rate - 1) requests a round (the default scenario: measured 0.35,
        predicted 0.38). The shared-prefix and Mooncake workloads are finite."""
        if self.workload != "agentic" or self.horizon <= LONG_HORIZON:
            return None
        traffic = AgenticConfig(num_bidders=self.num_bidders, **{**DEFAULT_WORKLOAD, **self.workload_kwargs})
        rate = max(self.episode_draws.get("rate", [traffic.rate]))  # the busiest episode's
        if traffic.burst_period > 0:  # the long-run mean (AgenticConfig.rate)
            rate *= 1 + (traffic.burst_factor - 1) * traffic.burst_duration / traffic.burst_period
        served = self.served_rate()
        if rate <= served:
            return None
        where_rate = "episode_draws['rate']" if "rate" in self.episode_draws else "workload_kwargs['rate']"
        return (f"horizon={self.horizon} rounds is long for a load above the engine's capacity: agentic "
                f"arrivals at {rate:.3g} requests/s exceed the ~{served:.3g}/s it serves, so the waiting "
                f"queue grows by ~{rate / served - 1:.2f} requests a round and steps slow down with it "
                f"(MarketConfig.queue_warning). For a stable queue keep the arrival rate "
                f"({where_rate}) at most {served:.3g}, raise engine_kwargs['max_running_requests'], "
                f"or keep horizon <= {LONG_HORIZON}.")

    def make_scheduler(self) -> AdmissionPolicy:
        """The mechanism with the market's cost model (`make_scheduler`, the one factory): "service"
        is "tokens" with the service time as the per-request work."""
        if self.cost_model == "service":
            return make_scheduler(self.mechanism, "tokens", self.service_overhead(), self.tie_break,
                                  **self.mechanism_kwargs)
        return make_scheduler(self.mechanism, self.cost_model, self.request_overhead, self.tie_break,
                              **self.mechanism_kwargs)

    @property
    def pacing_rounds(self) -> int:
        """T, the rounds a budget is paced over: `budget_rounds`, or `horizon`."""
        return self.horizon if self.budget_rounds is None else self.budget_rounds

    def make_engine(self, scheduler: AdmissionPolicy) -> ServingEngine:
        engine_class = resolve(BACKENDS[self.backend])
        config = EngineConfig(**{**DEFAULT_ENGINE, **self.engine_kwargs})
        return engine_class(scheduler, config, **self.backend_kwargs)

    def make_cluster(self, schedulers: Sequence[AdmissionPolicy]) -> ClusterEngine:
        """`replicas` engines, one per scheduler, behind the router."""
        engines = [self.make_engine(s) for s in schedulers]
        return ClusterEngine(engines, make_router(self.router, **self.router_kwargs))

    def make_workload(self, seed: int, draws: dict[str, Any] | None = None) -> Iterable[Request]:
        """The episode's requests, as a stream the engine reads as its clock advances (so only the
        traffic an episode reaches is drawn). Agentic traffic lasts, unless set, warmup + 2.5 x
        horizon / rate seconds: every round admits at least one request, and in the default
        scenario a round admits about 1.1, so that lasts `horizon` rounds with room to spare. The
        shared-prefix workload has its fixed number of requests. (If the traffic runs out first,
        the episode is truncated.) `draws` are the episode's drawn parameters (`draw_episode`):
        a drawn "rate" replaces the configured one."""
        workload = get_workload(self.workload)
        kwargs = {**workload.defaults, **self.workload_kwargs}
        if draws and "rate" in draws:
            kwargs["rate"] = draws["rate"]
        if workload.open_ended and "duration" not in kwargs and "num_requests" not in kwargs:
            rate = kwargs.get("rate", workload.parameter_defaults()["rate"])
            kwargs["duration"] = self.warmup + max(30.0, 2.5 * self.horizon / rate)
        trace = self.trace_path if workload.trace_argument is not None else None
        return workload.stream(self.num_bidders, seed, trace, **kwargs)


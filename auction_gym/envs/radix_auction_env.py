"""`RadixAuction-v0`, `-v1` and `-v2`: one learning bidder in a KV-cache-aware priority auction."""

from __future__ import annotations

import math
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..action import DEFAULT_ACTION_TYPE, action_value, clip_multiplier, parse_action
from ..market import Market, MarketConfig, Obs, RoundReport
from ..pacing import TUNED_PI, MultiplierPolicy, Policy, named_pacer
from ..registry import with_mechanism_table
from ..workload.registry import with_workload_table
from .common import (
    check_env_arguments,
    env_action_map,
    market_config,
    market_info,
    opponent_groups,
    refuses_unknown_keywords,
    warn_if_queue_unstable,
    with_observation_table,
    with_v1_table,
)
from .rendering import market_frame

REWARDS = ("utility", "cost", "paired")
"""The focal bidder's reward: see Rewards in `RadixAuctionEnv`'s docstring."""


@refuses_unknown_keywords
class RadixAuctionEnv(gym.Env):
    """One bidder paces its bids in an auction for LLM serving priority that respects the KV cache.

    A simulated serving engine (continuous batching, radix prefix cache) admits requests in the order
    an auction decides: by default the cache-aware radix-tree auction with VCG payments (docs/design.md
    section 3: completion times count the prompt tokens the cache does not hold).
    Several bidders (tenants) send agentic traffic; each bids alpha x urgency for its requests and
    pays from an episode budget. The learner controls one bidder's multiplier alpha (the focal
    bidder); the others follow built-in policies (OGD pacing by default).

    ## Action Space

    The focal bidder's bid multiplier alpha for the next round (alpha = 1 bids true urgency; 0 bids
    nothing), in one of five types (`action_type`; the maps are defined once, in `auction_gym.action`):

    | action_type  | space                              | multiplier alpha of action a                       |
    |--------------|------------------------------------|----------------------------------------------------|
    | "normalized" | `Box(-1, 1, (1,), float32)`        | 1 + a for a <= 0, 1 + a (alpha_max - 1) for a > 0: |
    | (default)    |                                    | a = -1 bids nothing, 0 truthful, +1 alpha_max      |
    | "log"        | `Box(-1, 1, (1,), float32)`        | 0.001^(-a) for a <= 0, alpha_max^a for a > 0:      |
    |              |                                    | equal steps are equal ratios; a = 0 truthful       |
    | "multiplier" | `Box(0, alpha_max, (1,), float32)` | a itself                                           |
    | "delta"      | `Box(-1, 1, (1,), float32)`        | alpha_prev x exp(delta_bound x a): a = 0 holds the |
    | (v1)         |                                    | multiplier played last (delta_start at reset)      |
    | "residual"   | `Box(-1, 1, (1,), float32)`        | base(obs) x exp(residual_scale x a): a = 0 plays   |
    |              |                                    | the pacer `residual_base` exactly                  |

    "delta" and "residual" are clipped to [0.001, alpha_max]; a change beyond exp(delta_bound) in
    one round cannot be played.

    The normalized type is what SB3 expects (`check_env` passes without warnings) and puts a fresh
    PPO policy's mean action on truthful bidding; with the default alpha_max = 2 it is alpha = 1 + a.
    Out-of-range values are clipped to the box; NaN or inf raise ValueError. `info["multiplier"]` is
    the multiplier played. A bidder whose budget is spent bids 0 whatever it plays.

    `env.action_meaning` (also `env.metadata["action_meaning"]`, which wrappers pass on) says in one
    line what this env's action means, with its parameters.

    The built-in policies (`auction_gym.pacing`) output multipliers, the unit of `other_bidders`;
    `auction_gym.pacing.focal_policy(policy, env)` maps them to this env's actions through
    `action_for`, the inverse of its action map.

    ## Observation Space

    `Box(0, Obs.high(horizon), (Obs.SIZE,), float32)`, one row of `Market.observations`; the
    features are defined once, in `auction_gym.market.observation.FEATURES`, from which this table
    is made and `auction_gym.market.Obs` takes its indices (`Obs.BUDGET_LEFT`, ...):

    {observation_table}

    The names, in the vector's order, are `env.observation_names` (also
    `env.metadata["observation_names"]`, which wrappers pass on, so `gym.make`'s env has them too).
    Values are clipped to the range. "Recent" is an exponential moving average over rounds (weight
    `observation.EMA` on the newest). The queue, latency and TTFT features are on a log scale so
    that they stay informative however long the queue grows (see Load and episode length); where
    they clip, and why, is in `auction_gym.market.observation`.

    ## Rewards

    `reward="utility"` (the default): the focal bidder's realized utility during the step, times
    `reward_scale`: for each of its requests that finished in the step, value V minus urgency w x
    latency, minus the payment charged this round. (Requests still unfinished when the episode ends
    add nothing.)

    `reward="cost"`: minus the latency cost its requests accrued during the step (w x the seconds
    each spent waiting or running within the step, finished or not; `info["latency_cost"]`) minus
    the payment, times `reward_scale`. Its episode return is the utility's less the values V of the
    finished requests, which the focal bidder's bids hardly move (every request is served; only
    which finish before the horizon depends on them), and less the cost those unfinished have
    accrued; so the best policies are the same, and the variance of the values, which no action
    reaches, is gone. The evaluation metrics (`agents.evaluation`) read `info["utility"]` either way.

    `reward="paired"`: the "cost" reward minus that of a shadow copy of the episode, times
    `reward_scale`. The shadow is a second market with the same configuration and market seed in
    which the focal bidder follows `reference_policy` (a built-in pacer, in multipliers) and the
    others the same policies as here; its focal "cost" reward is `info["reference_reward"]`
    (unscaled; 0 once the shadow episode has ended). Episodes differ in kind (arrival rate,
    budgets) and level far more than policies differ within one, and the shadow shares them, so
    they cancel in the difference and what remains is what the actions changed. The shadow never
    sees the learner's actions, so the best policy is the same as under "cost". It costs a second
    market: about twice the time per step.

    ## Starting State

    A fresh workload drawn from the seed, served for `MarketConfig.warmup` (10) engine seconds with
    truthful bids and no charges; full budgets; every multiplier 1.

    ## Episode End

    One step is one admission round: the engine runs up to and including its next prefill
    iteration that admits a request (one that only continues a chunked prompt or resumes retracted
    requests is not a round). The episode terminates after `horizon` rounds (the budget period ends; time left is
    observed, so this is a terminal state). It is truncated if the workload runs dry first.

    ## Load and episode length

    The default load is above the engine's capacity: agentic requests arrive at 20/s, while the
    engine (32 running slots) serves about 14.5/s (estimated by `MarketConfig.served_rate`; the
    queue stays near empty at 12/s and grows on some seeds at 16/s). Over the default
    500 rounds that keeps a short queue for the auction to order, but the queue grows through the
    episode, by about 0.35 requests a round once it forms, and a step costs more as it grows (the
    auction orders the whole queue): from a fraction of a millisecond with tens of requests waiting
    to tens of milliseconds with thousands.
    So the constructor warns (UserWarning) when the horizon exceeds 1,000 rounds with an agentic
    arrival rate above `served_rate()` (`MarketConfig.queue_warning`). For long episodes with a
    stable queue lower `workload_kwargs["rate"]` (12/s keeps the queue near empty over 12,000 rounds).

    ## Info

    `payment` (focal's payment this round), `spent` (its cumulative spend), `budget`, `utility`
    (unscaled), `multiplier` (the one played, whatever the action type), `round`, `time`
    (engine seconds), and market metrics of the step: `welfare` (sum of V - w x latency of all
    requests finished), `revenue` (all payments), `hit_rate` (cache hit rate of the requests
    admitted), `latency`, `ttft` (means over the requests finished), `admitted`, `finished`
    (counts). A mean over no requests is 0; weight means by the counts when aggregating. With
    `reward="cost"` or "paired" also `latency_cost`, and with "paired" `reference_reward`.

    ## Arguments

    | argument         | default      | meaning                                                          |
    |------------------|--------------|------------------------------------------------------------------|
    | num_bidders      | 4            | bidders in the market (focal included)                           |
    | mechanism        | "radix_vcg"  | a registered mechanism (auction_gym.registry; Mechanisms below)  |
    | cost_model       | "tokens"     | the auction's completion model: "tokens" (cache-aware), "unit"   |
    |                  |              | (the paper's literal average subtree bid), docs/design.md        |
    |                  |              | section 3, or "service" (tokens + a request's running-slot time) |
    | request_overhead | 1.0          | per-request work under "tokens" (tokens)                         |
    | tie_break        | "request_id" | an auction's order of tied requests (those bidding 0):           |
    |                  |              | "request_id" (smallest first) or "cached_prefix" (longest cached |
    |                  |              | prefix first; MarketConfig.tie_break, docs/design.md section 3)  |
    | workload         | "agentic"    | a registered workload (auction_gym.workload.registry; Workloads  |
    |                  |              | below); "mooncake" needs `trace_path`                            |
    | trace_path       | None         | Mooncake conversation trace (JSONL), a readable file: checked    |
    |                  |              | at construction (ValueError otherwise)                           |
    | workload_kwargs  | None         | the workload's arguments over its entry's defaults: AgenticConfig |
    |                  |              | / SharedPrefixConfig fields, or iter_mooncake's (MarketConfig)   |
    | backend          | "sim"        | serving engine: "sim", or "torch" (gpu_backend)                  |
    | engine_kwargs    | None         | EngineConfig fields (kv_capacity_tokens,                         |
    |                  |              | in_batch_prefix_caching, ...)                                    |
    | backend_kwargs   | None         | extra arguments of the backend's engine (torch: model preset...) |
    | replicas         | 1            | engine replicas behind the router (auction_gym.cluster)          |
    | router           | "identity"   | "identity" (one engine) or a name in auction_gym.cluster.ROUTERS |
    | router_kwargs    | None         | arguments of the router's class                                  |
    | budget           | None         | budget per bidder per episode; None: budget_per_round x horizon  |
    | budget_per_round | 0.0001       | target spend per round rho                                       |
    | horizon          | 500          | rounds per episode                                               |
    | episode_draws    | None         | parameters drawn per episode: {"rate": [...], "budget_scale":    |
    |                  |              | [...]} (MarketConfig.episode_draws); reset's info["draws"]       |
    | other_bidders    | "ogd"        | "ogd", "truthful", "fixed:<alpha>", a policy, or one per other bidder |
    | focal_bidder     | 0            | which bidder the learner plays                                   |
    | alpha_max        | 2.0          | the largest multiplier; > 1 unless action_type is "multiplier"   |
    | reward_scale     | 0.1          | reward = utility x reward_scale                                  |
    | action_type      | "normalized" | "normalized", "log", "multiplier", "delta" or "residual" (see    |
    |                  |              | Action Space)                                                    |
    | delta_bound      | 0.3          | "delta": the largest change of log alpha in one round (> 0)      |
    | delta_start      | 1.0          | "delta": the multiplier before the first round, in               |
    |                  |              | [0.001, alpha_max]                                               |
    | residual_base    | "pid:kp=0.05,ki=0.01" | "residual": the base pacer, a built-in policy's name    |
    | residual_scale   | 1.0          | "residual": the largest correction of log alpha (> 0)            |
    | reward           | "utility"    | "utility", "cost" or "paired" (see Rewards)                      |
    | reference_policy | "pid:kp=0.05,ki=0.01" | "paired": the shadow focal bidder's built-in policy    |

    The v0 defaults (stationary traffic above the engine's capacity, budgets that bind) are
    described in `auction_gym.market.MarketConfig`. `RadixAuction-v1` is the same environment with
    the calibrated pacing market (docs/design.md section 6; `auction_gym.scenarios.V1_KWARGS`)
    by default; its defaults that differ from v0's are below. `RadixAuction-v2` (the current
    version) is v1 with `tie_break="cached_prefix"` (`auction_gym.scenarios.V2_KWARGS`).

    | argument         | v1 default                                                                  |
    |------------------|-----------------------------------------------------------------------------|
    {v1_table}

    ## Mechanisms

    The rows come from `auction_gym.registry` when this module is imported:

    | mechanism        | what it does                                                     |
    |------------------|------------------------------------------------------------------|
    {mechanism_table}

    ## Workloads

    The rows come from `auction_gym.workload.registry` when this module is imported:

    | workload         | what it is                                                       |
    |------------------|------------------------------------------------------------------|
    {workload_table}

    ## Rendering

    `render_mode="ansi"`: `render()` returns one line of text after reset or any step (None before
    the first reset). `render_mode="rgb_array"` (what Stable-Baselines3's `make_vec_env` asks for):
    `render()` returns a uint8 image of shape (64, 4 + 16 x (num_bidders + 2), 3), after reset or
    any step (None before the first reset): on black, 12-pixel bars over grey tracks, left to
    right, one per bidder for the budget left (green; the focal bidder's yellow), the waiting queue
    (red, log scale, full at 4,096 requests) and the focal bidder's multiplier / alpha_max (blue).
    Drawn with numpy alone. `metadata["render_fps"]` (10) is only the playback rate of recordings.

    ## Vectorized environments

    `stable_baselines3.common.env_util.make_vec_env("RadixAuction-v0", n_envs=k)` works with the
    default DummyVecEnv (it asks for `rgb_array`). With `vec_env_cls=SubprocVecEnv` use the id
    "auction_gym:RadixAuction-v0": the workers, started by forkserver (SB3's default), import
    auction_gym only through the id's module prefix, so the plain id fails there ("Environment
    `RadixAuction` doesn't exist") unless the main script itself imports auction_gym, or with
    `vec_env_kwargs={"start_method": "fork"}`. RL Zoo (`python -m rl_zoo3.train --env
    RadixAuction-v0 --gym-packages auction_gym`) works with either vec env.

    ## Version History

    A version's interface (the observation's features and order, the action space, the reward, the
    info keys, the arguments) and its trajectories for given arguments and seed are fixed; a change
    to them gets a new version, as Gymnasium's own environments do (`tests/test_golden.py` pins
    fixed-seed episodes).

    * v2: v1's market with tied requests (those bidding 0) served longest cached prefix first
      (`tie_break="cached_prefix"`); baselines re-tuned on tuning seeds (they chose v1's)
    * v1: the calibrated pacing market by default, delta and residual actions, the paired reward
    * v0: the pre-release market (stationary load above capacity, the "tokens" cost model)
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 10, "observation_names": Obs.NAMES}
    observation_names: tuple[str, ...] = Obs.NAMES
    """The observation's feature names in the vector's order (`auction_gym.market.observation.FEATURES`)."""

    def __init__(
        self,
        num_bidders: int = MarketConfig.num_bidders,
        mechanism: str = MarketConfig.mechanism,
        cost_model: str = MarketConfig.cost_model,
        request_overhead: float = MarketConfig.request_overhead,
        tie_break: str = "request_id",
        workload: str = MarketConfig.workload,
        trace_path: str | None = None,
        workload_kwargs: dict[str, Any] | None = None,
        backend: str = MarketConfig.backend,
        engine_kwargs: dict[str, Any] | None = None,
        backend_kwargs: dict[str, Any] | None = None,
        replicas: int = MarketConfig.replicas,
        router: str = MarketConfig.router,
        router_kwargs: dict[str, Any] | None = None,
        budget: float | Sequence[float] | None = None,
        budget_per_round: float = MarketConfig.budget_per_round,
        horizon: int = MarketConfig.horizon,
        episode_draws: dict[str, Any] | None = None,
        other_bidders: str | Policy | Sequence[str | Policy] = "ogd",
        focal_bidder: int = 0,
        alpha_max: float = MarketConfig.alpha_max,
        reward_scale: float = 0.1,
        render_mode: str | None = None,
        action_type: str = DEFAULT_ACTION_TYPE,
        reward: str = "utility",
        delta_bound: float = 0.3,
        delta_start: float = 1.0,
        residual_base: str = TUNED_PI,
        residual_scale: float = 1.0,
        reference_policy: str | None = TUNED_PI,
    ) -> None:
        self.config = market_config(
            num_bidders=num_bidders, mechanism=mechanism, cost_model=cost_model,
            request_overhead=request_overhead, tie_break=tie_break, workload=workload, trace_path=trace_path,
            workload_kwargs=workload_kwargs, backend=backend, engine_kwargs=engine_kwargs,
            backend_kwargs=backend_kwargs, replicas=replicas, router=router,
            router_kwargs=dict(router_kwargs or {}),
            horizon=horizon, budget=budget, budget_per_round=budget_per_round, alpha_max=alpha_max,
            episode_draws=episode_draws,
        )
        if not 0 <= focal_bidder < num_bidders:
            raise ValueError(f"focal_bidder must be in 0..{num_bidders - 1}, got {focal_bidder}")
        check_env_arguments(reward_scale, render_mode, self.metadata["render_modes"])
        self.action_map = env_action_map(action_type, alpha_max, delta_bound, delta_start, residual_base,
                                         residual_scale)
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {reward!r}")
        # The shadow market of the paired reward (see Rewards), and its focal bidder's policy.
        self._reference = (named_pacer(reference_policy, alpha_max, "reference_policy")
                           if reward == "paired" or reference_policy is not None else None)
        warn_if_queue_unstable(self.config)
        self.reward = reward
        self.action_type = action_type
        self.focal = focal_bidder
        self.others = [i for i in range(num_bidders) if i != focal_bidder]
        self._groups = opponent_groups(other_bidders, self.others, alpha_max)
        self.reward_scale = float(reward_scale)
        self.render_mode = render_mode
        self.market = Market(self.config, accrue_latency_cost=reward != "utility")
        self._shadow = Market(self.config, accrue_latency_cost=True) if reward == "paired" else None
        self.observation_space = spaces.Box(Obs.LOW, Obs.high(self.config.pacing_rounds), dtype=np.float32)
        self.action_space = self.action_map.space
        # On the instance: the meaning depends on the arguments; metadata is what wrappers forward.
        self.metadata = {**self.metadata, "action_meaning": self.action_meaning}
        self._obs: np.ndarray | None = None
        self._prev_alpha = 1.0  # the focal bidder's multiplier of the last round, the action map's prev_alpha
        self._last: RoundReport | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        market_seed = int(self.np_random.integers(2**31 - 1))
        self.market.reset(market_seed)
        if self._shadow is not None:
            self._shadow.reset(market_seed)
        self._obs = self.market.observations()
        self._prev_alpha = self.action_map.reset(self.market.alpha.item(self.focal))
        self._last = None
        return self._obs[self.focal].copy(), {"budget": float(self.market.budget[self.focal]),
                                              "draws": self.market.draws}

    def step(self, action):
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        rows = self._obs.tolist()
        alphas = [0.0] * self.config.num_bidders
        alphas[self.focal] = self.action_map.multiplier(action_value(action), rows[self.focal], self._prev_alpha)
        self._play_others(alphas, self._obs, rows)
        report = self.market.step(alphas)
        self._last = report
        self._prev_alpha = self.market.alpha.item(self.focal)
        self._obs = self.market.observations()
        info = market_info(self.market, report, self.focal)
        # From info's Python floats, the report's values: the same arithmetic without numpy scalars.
        if report.latency_cost is None:
            reward = info["utility"]
        else:
            info["latency_cost"] = report.latency_cost.item(self.focal)
            reward = -(info["latency_cost"] + info["payment"])
        if self._shadow is not None:
            info["reference_reward"] = self._step_shadow()
            reward -= info["reference_reward"]
        return (self._obs[self.focal].copy(), reward * self.reward_scale, self.market.terminated,
                self.market.truncated, info)

    @property
    def action_meaning(self) -> str:
        """What an action means, in one line (`auction_gym.action.ActionMap.meaning`)."""
        return self.action_map.meaning

    def action_for(self, alpha: float, observation: np.ndarray | list[float]) -> float:
        """The action that plays multiplier `alpha` in the next step, given the focal bidder's
        current `observation` (the inverse of the action map, `auction_gym.action`): how
        `auction_gym.pacing.focal_policy` plays a built-in pacer under any action type."""
        row = observation.tolist() if isinstance(observation, np.ndarray) else list(observation)
        return self.action_map.action(alpha, row, self._prev_alpha)

    def _step_shadow(self) -> float:
        """Steps the shadow market of the paired reward (see Rewards) with the focal bidder
        following the reference policy; its focal bidder's "cost" reward, 0 once it has ended."""
        shadow = self._shadow
        if shadow.done:
            return 0.0
        obs = shadow.observations()
        rows = obs.tolist()
        alphas = [0.0] * self.config.num_bidders
        alphas[self.focal] = self._reference.multipliers([rows[self.focal]])[0]
        self._play_others(alphas, obs, rows)
        report = shadow.step(alphas)
        return -(report.latency_cost.item(self.focal) + report.payments.item(self.focal))

    def _play_others(self, alphas: list[float], obs: np.ndarray, rows: list[list[float]]) -> None:
        """Writes the other bidders' multipliers into `alphas`, asking each group's policy once on
        the market's observations `obs` (`rows`: the same, as lists of floats)."""
        alpha_max = self.config.alpha_max
        for policy, bidders, index in self._groups:
            if isinstance(policy, MultiplierPolicy) and type(policy).predict is MultiplierPolicy.predict:
                # A built-in (or a subclass that kept its predict): floats in and out, no arrays between.
                acts = policy.multipliers([rows[i] for i in bidders])
            else:
                out, _ = policy.predict(obs.take(index, 0), deterministic=True)
                out = np.asarray(out, dtype=np.float64)
                # One number per bidder, or each bidder's row, whose parse below names the culprit.
                acts = out.reshape(-1).tolist() if out.size == len(bidders) else out.reshape(len(bidders), -1)
            # A sum is finite only if every action is (inf and NaN carry through it; one that
            # overflows from finite actions only sends the group down the checked path below).
            if isinstance(acts, list) and math.isfinite(sum(acts)):
                for i, a in zip(bidders, acts):  # the group's actions, checked at once
                    alphas[i] = clip_multiplier(a, alpha_max)
                continue
            for i, act in zip(bidders, acts):  # find the culprit
                alphas[i] = parse_action(act, "multiplier", alpha_max, f"policy of bidder {i}")

    def render(self) -> str | np.ndarray | None:
        """The frame of `render_mode` (see Rendering in the class docstring)."""
        if self.render_mode == "rgb_array":
            return None if self._obs is None else market_frame(self._obs, self.focal)
        if self.render_mode != "ansi" or self._obs is None:
            return None
        m, r = self.market, self._last
        admitted, finished = (len(r.admitted), len(r.finished)) if r is not None else (0, 0)
        return (f"round {m.round}/{self.config.horizon} t={m.engine.now:.2f}s queue={len(m.engine.waiting)} "
                f"alpha={np.round(m.alpha, 3).tolist()} spent/budget={np.round(m.spent / m.budget, 3).tolist()} "
                f"admitted={admitted} finished={finished}")


RadixAuctionEnv.__doc__ = with_v1_table(
    with_workload_table(with_mechanism_table(with_observation_table(RadixAuctionEnv.__doc__))))

"""`RadixAuction-v0`, `-v1` and `-v2`: one learning bidder in a KV-cache-aware priority auction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .._checks import check_int
from ..action import action_value, clip_multiplier, parse_action
from ..market import Market, Obs, RoundReport
from ..pacing import TUNED_PI, MultiplierPolicy, Policy, named_pacer
from ..registry import with_mechanism_table
from ..workload.registry import with_workload_table
from .common import (
    ENV_MARKET_ARGUMENTS,
    ActionArguments,
    action_for_observation,
    check_env_arguments,
    field_names,
    grouped,
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


@dataclass(frozen=True)
class LearnerArguments:
    """`RadixAuctionEnv`'s arguments about its learning bidder: which bidder it plays, the other
    bidders' policies, and its reward (see the docstring's Arguments and Rewards)."""

    other_bidders: str | Policy | Sequence[str | Policy] = "ogd"
    focal_bidder: int = 0
    reward_scale: float = 0.1
    reward: str = "utility"
    reference_policy: str | None = TUNED_PI


@refuses_unknown_keywords
class RadixAuctionEnv(gym.Env):
    """One bidder paces its bids in an auction for LLM serving priority that respects the KV cache.

    A simulated serving engine (continuous batching, radix prefix cache) admits requests in the order
    an auction decides, by default the radix-tree auction with VCG payments (docs/design.md section 3).
    Bidders bid alpha x urgency for their requests from an episode budget; the learner sets one
    bidder's alpha (the focal bidder), the others follow built-in policies (OGD pacing by default).

    ## Action Space

    The focal bidder's multiplier alpha for the next round (1 bids true urgency, 0 nothing), in one of
    five types (`action_type`; the maps are `auction_gym.action`'s; "clipped": to [0.001, alpha_max]):

    | action_type            | space                              | multiplier alpha of action a                      |
    |------------------------|------------------------------------|---------------------------------------------------|
    | "normalized" (default) | `Box(-1, 1, (1,), float32)`        | 1 + a for a <= 0, 1 + a (alpha_max - 1) for a > 0 |
    | "log"                  | `Box(-1, 1, (1,), float32)`        | 0.001^(-a) for a <= 0, alpha_max^a for a > 0      |
    | "multiplier"           | `Box(0, alpha_max, (1,), float32)` | a                                                 |
    | "delta"                | `Box(-1, 1, (1,), float32)`        | alpha_prev x exp(delta_bound x a), clipped        |
    | "residual" (v1, v2)    | `Box(-1, 1, (1,), float32)`        | base(obs) x exp(residual_scale x a), clipped      |

    Out-of-range actions are clipped to the box; NaN or inf raise ValueError. `info["multiplier"]` is
    the multiplier played (0 once the budget is spent); `env.action_meaning` says what an action means.

    ## Observation Space

    `Box(0, Obs.high(horizon), (Obs.SIZE,), float32)`, one row of `Market.observations`, the features
    of `auction_gym.market.observation.FEATURES` (their names in order: `env.observation_names`):

    {observation_table}

    Values are clipped to the range; "recent" is an exponential moving average over rounds.

    ## Rewards

    Times `reward_scale`. `"utility"` (the default): the focal bidder's realized utility in the step,
    V - w x latency for each of its requests finished, less its payment. `"cost"`: minus its requests'
    latency cost accrued in the step (w x seconds, finished or not; `info["latency_cost"]`) and its
    payment. `"paired"`: "cost" less that of a shadow episode (same seed) in which the focal bidder
    follows `reference_policy` (`info["reference_reward"]`); it costs twice the time per step.

    ## Starting State

    A fresh workload drawn from the seed, served for `MarketConfig.warmup` (10) engine seconds with
    truthful bids and no charges; full budgets; every multiplier 1.

    ## Episode End

    One step is one admission round (the engine runs up to its next prefill that admits a request).
    The episode terminates after `horizon` rounds and is truncated if the workload runs dry first.

    ## Info

    `payment` (focal's payment this round), `spent` (its cumulative spend), `budget`, `utility`
    (unscaled), `multiplier` (the one played), `round`, `time` (engine seconds), and the step's
    market metrics: `welfare`, `revenue` (all payments), `hit_rate` (of the requests admitted),
    `latency`, `ttft` (means over the requests finished; 0 over none), `admitted`, `finished`. With
    `reward="cost"` or "paired" also `latency_cost`, and with "paired" `reference_reward`.

    ## Arguments

    | argument         | default               | meaning                                                              |
    |------------------|-----------------------|----------------------------------------------------------------------|
    | num_bidders      | 4                     | bidders in the market, the focal one included                        |
    | mechanism        | "radix_vcg"           | a registered mechanism (Mechanisms below)                            |
    | cost_model       | "tokens"              | the auction's completion model: "tokens", "unit" or "service"        |
    | request_overhead | 1.0                   | per-request work under "tokens", in tokens                           |
    | tie_break        | "request_id"          | order of tied requests (bidding 0): "request_id", "cached_prefix"    |
    | workload         | "agentic"             | a registered workload (Workloads below); "mooncake" needs trace_path |
    | trace_path       | None                  | a Mooncake conversation trace (JSONL), checked at construction       |
    | workload_kwargs  | None                  | the workload's arguments over its registered defaults                |
    | backend          | "sim"                 | the serving engine: "sim", or "torch" (gpu_backend)                  |
    | engine_kwargs    | None                  | EngineConfig fields (kv_capacity_tokens, ...)                        |
    | backend_kwargs   | None                  | the backend engine's other arguments (torch: model preset, ...)      |
    | replicas         | 1                     | engine replicas behind the router (auction_gym.cluster)              |
    | router           | "identity"            | "identity" (one engine) or a name in auction_gym.cluster.ROUTERS     |
    | router_kwargs    | None                  | arguments of the router's class                                      |
    | budget           | None                  | budget per bidder per episode; None: budget_per_round x horizon      |
    | budget_per_round | 0.0001                | target spend per round rho                                           |
    | horizon          | 500                   | rounds per episode                                                   |
    | episode_draws    | None                  | parameters drawn per episode (MarketConfig.episode_draws)            |
    | other_bidders    | "ogd"                 | a built-in policy's name or a policy, or one per other bidder        |
    | focal_bidder     | 0                     | which bidder the learner plays                                       |
    | alpha_max        | 2.0                   | the largest multiplier; > 1 unless action_type is "multiplier"       |
    | reward_scale     | 0.1                   | the reward's factor                                                  |
    | action_type      | "normalized"          | see Action Space                                                     |
    | delta_bound      | 0.3                   | "delta": the largest change of log alpha in a round (> 0)            |
    | delta_start      | 1.0                   | "delta": the multiplier before the first round                       |
    | residual_base    | "pid:kp=0.05,ki=0.01" | "residual": the base pacer, a built-in policy's name                 |
    | residual_scale   | 1.0                   | "residual": the largest correction of log alpha (> 0)                |
    | reward           | "utility"             | "utility", "cost" or "paired" (see Rewards)                          |
    | reference_policy | "pid:kp=0.05,ki=0.01" | "paired": the shadow focal bidder's built-in policy                  |
    | render_mode      | None                  | "ansi" or "rgb_array" (see Rendering)                                |

    The market's are `MarketConfig`'s fields (here `tie_break` defaults to "request_id"), the action's
    `ActionArguments`', the learner's `LearnerArguments`'. `RadixAuction-v1`'s defaults that differ
    (`auction_gym.scenarios.V1_KWARGS`; v2 is v1 with `tie_break="cached_prefix"`):

    | argument         | v1 default                                                                  |
    |------------------|-----------------------------------------------------------------------------|
    {v1_table}

    ## Mechanisms

    | mechanism        | what it does                                                     |
    |------------------|------------------------------------------------------------------|
    {mechanism_table}

    ## Workloads

    | workload         | what it is                                                       |
    |------------------|------------------------------------------------------------------|
    {workload_table}

    ## Rendering

    `render_mode="ansi"`: `render()` returns one line of text; `"rgb_array"` a uint8 image of bars
    (budgets left, queue, the focal multiplier). Both None before the first reset.

    ## Version History

    * v2: v1's market with tied requests (those bidding 0) served longest cached prefix first
    * v1: the calibrated pacing market by default, delta and residual actions, the paired reward
    * v0: the pre-release market (stationary load above capacity, the "tokens" cost model)
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 10, "observation_names": Obs.NAMES}
    observation_names: tuple[str, ...] = Obs.NAMES
    """The observation's feature names in the vector's order (`auction_gym.market.observation.FEATURES`)."""

    def __init__(self, render_mode: str | None = None, **arguments: Any) -> None:
        market, action, learner = grouped(arguments, ENV_MARKET_ARGUMENTS, field_names(ActionArguments),
                                          field_names(LearnerArguments))
        # The order of tied requests v0 and v1 have; tie_break="cached_prefix" is v2's.
        self.config = market_config(**{"tie_break": "request_id", **market})
        learner = LearnerArguments(**learner)
        num_bidders, alpha_max = self.config.num_bidders, self.config.alpha_max
        # An int object: 1.5 would match no bidder (all of them playing the other bidders' policies), True bidder 1.
        focal_bidder = check_int("focal_bidder", learner.focal_bidder, 0, num_bidders - 1)
        check_env_arguments(learner.reward_scale, render_mode, self.metadata["render_modes"])
        self.action_map = ActionArguments(**action).action_map(alpha_max)
        if learner.reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {learner.reward!r}")
        # The shadow market of the paired reward (see Rewards), and its focal bidder's policy.
        self._reference = (named_pacer(learner.reference_policy, alpha_max, "reference_policy")
                           if learner.reward == "paired" or learner.reference_policy is not None else None)
        warn_if_queue_unstable(self.config)
        self.reward, self.action_type, self.focal = learner.reward, self.action_map.action_type, focal_bidder
        self.others = [i for i in range(num_bidders) if i != focal_bidder]
        self._groups = opponent_groups(learner.other_bidders, self.others, alpha_max)
        self.reward_scale = float(learner.reward_scale)
        self.render_mode = render_mode
        self.market = Market(self.config, accrue_latency_cost=learner.reward != "utility")
        self._shadow = Market(self.config, accrue_latency_cost=True) if learner.reward == "paired" else None
        self.observation_space = spaces.Box(Obs.LOW, Obs.high(self.config.pacing_rounds), dtype=np.float32)
        self.action_space = self.action_map.space
        # On the instance: the meaning depends on the arguments; metadata is what wrappers forward.
        self.metadata = {**self.metadata, "action_meaning": self.action_meaning}
        self._obs: np.ndarray | None = None
        self._prev_alpha = 1.0  # the focal bidder's multiplier of the last round, the action map's prev_alpha
        self._last: RoundReport | None = None

    @staticmethod
    def extra_keywords() -> list[str]:
        """The names **arguments takes (`valid_keywords`), by group: the market's, the action's, the learner's."""
        return [*ENV_MARKET_ARGUMENTS, *field_names(ActionArguments), *field_names(LearnerArguments)]

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
        return action_for_observation(self.action_map, alpha, observation, self._prev_alpha)

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
                # A built-in, or a subclass that kept its predict, answers in floats.
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

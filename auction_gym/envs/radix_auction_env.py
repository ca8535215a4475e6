"""`RadixAuction-v0`: one learning bidder in a KV-cache-aware priority auction."""

from __future__ import annotations

import math
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..action import DEFAULT_ACTION_TYPE, action_box, check_action_type, clip_multiplier, parse_action
from ..market import Market, MarketConfig, Obs, RoundReport
from ..pacing import MultiplierPolicy, Policy, make_policy
from ..registry import with_mechanism_table
from ..workload.registry import with_workload_table
from .common import check_env_arguments, market_config, market_info, warn_if_queue_unstable, with_observation_table
from .rendering import market_frame

REWARDS = ("utility", "cost")
"""The focal bidder's reward: see Rewards in `RadixAuctionEnv`'s docstring."""


def opponent_groups(other_bidders: str | Policy | Sequence[str | Policy], others: list[int],
                    alpha_max: float) -> list[tuple[Policy, list[int], np.ndarray]]:
    """The other bidders' policies grouped by policy object, (policy, bidders, their rows): bidders
    sharing a policy are asked at once every step (`MultiplierPolicy.multipliers` for a built-in,
    else one batched predict). ValueError for a count that does not match `others`, or a policy
    that does not act in multipliers."""
    if isinstance(other_bidders, (list, tuple)):
        if len(other_bidders) != len(others):
            raise ValueError(f"other_bidders has {len(other_bidders)} policies for {len(others)} other bidders")
        policies = [make_policy(s, alpha_max) for s in other_bidders]
    else:
        policies = [make_policy(other_bidders, alpha_max)] * len(others)
    for policy in policies:
        # The opponents' actions are multipliers; a policy mapped to normalized actions (focal_policy) is not.
        if getattr(policy, "action_type", "multiplier") != "multiplier":
            raise ValueError(f"other_bidders act in multipliers, got a policy of action_type "
                             f"{policy.action_type!r}: {policy!r}")
    groups: dict[int, tuple[Policy, list[int]]] = {}
    for bidder, policy in zip(others, policies):
        groups.setdefault(id(policy), (policy, []))[1].append(bidder)
    return [(policy, bidders, np.array(bidders)) for policy, bidders in groups.values()]


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
    nothing), in one of three types (`action_type`; the maps are defined once, in `auction_gym.action`):

    | action_type  | space                              | multiplier alpha of action a                       |
    |--------------|------------------------------------|----------------------------------------------------|
    | "normalized" | `Box(-1, 1, (1,), float32)`        | 1 + a for a <= 0, 1 + a (alpha_max - 1) for a > 0: |
    | (default)    |                                    | a = -1 bids nothing, 0 truthful, +1 alpha_max      |
    | "log"        | `Box(-1, 1, (1,), float32)`        | 0.001^(-a) for a <= 0, alpha_max^a for a > 0:      |
    |              |                                    | equal steps are equal ratios; a = 0 truthful       |
    | "multiplier" | `Box(0, alpha_max, (1,), float32)` | a itself                                           |

    The normalized type is what SB3 expects (`check_env` passes without warnings) and puts a fresh
    PPO policy's mean action on truthful bidding; with the default alpha_max = 2 it is alpha = 1 + a.
    Out-of-range values are clipped to the box; NaN or inf raise ValueError. `info["multiplier"]` is
    the multiplier played. A bidder whose budget is spent bids 0 whatever it plays.

    The built-in policies (`auction_gym.pacing`) output multipliers, the unit of `other_bidders`;
    `auction_gym.pacing.focal_policy` maps them to this env's actions, and
    `agents.evaluation.evaluate` does so itself.

    ## Observation Space

    `Box(0, Obs.high(horizon), (Obs.SIZE,), float32)`, one row of `Market.observations`; the
    features are defined once, in `auction_gym.market.observation.FEATURES`, from which this table
    is made and `auction_gym.market.Obs` takes its indices (`Obs.BUDGET_LEFT`, ...):

    {observation_table}

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
    auction orders the whole queue). Measured on long default episodes (OGD bidders, seeds 0 and 1,
    2-core machine at load 1-3):

    | round  | waiting requests | ms per step |
    |--------|------------------|-------------|
    | 500    | 10-20            | 0.14-0.23   |
    | 2,000  | 300-550          | 0.9-1.8     |
    | 5,000  | 1,500-2,100      | 3.5-8.4     |
    | 9,000  | 3,000-3,200      | 13-16       |
    | 20,000 | 6,900            | 54 (mean over rounds 15,000-20,000) |

    So the constructor warns (UserWarning) when the horizon exceeds 1,000 rounds with an agentic
    arrival rate above `served_rate()` (`MarketConfig.queue_warning`). For long episodes with a
    stable queue lower `workload_kwargs["rate"]` (12/s keeps the queue near empty over 12,000 rounds).

    ## Info

    `payment` (focal's payment this round), `spent` (its cumulative spend), `budget`, `utility`
    (unscaled reward), `multiplier` (the one played, whatever the action type), `round`, `time`
    (engine seconds), and market metrics of the step: `welfare` (sum of V - w x latency of all
    requests finished), `revenue` (all payments), `hit_rate` (cache hit rate of the requests
    admitted), `latency`, `ttft` (means over the requests finished), `admitted`, `finished`
    (counts). A mean over no requests is 0; weight means by the counts when aggregating.

    ## Arguments

    | argument         | default      | meaning                                                          |
    |------------------|--------------|------------------------------------------------------------------|
    | num_bidders      | 4            | bidders in the market (focal included)                           |
    | mechanism        | "radix_vcg"  | a registered mechanism (auction_gym.registry; Mechanisms below)  |
    | cost_model       | "tokens"     | the auction's completion model: "tokens" (cache-aware), "unit"   |
    |                  |              | (the paper's literal average subtree bid), docs/design.md        |
    |                  |              | section 3, or "service" (tokens + a request's running-slot time) |
    | request_overhead | 1.0          | per-request work under "tokens" (tokens)                         |
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
    | alpha_max        | 2.0          | the largest multiplier; > 1 under action_type "normalized"       |
    | reward_scale     | 0.1          | reward = utility x reward_scale                                  |
    | action_type      | "normalized" | "normalized" (Box(-1, 1)), "log" (Box(-1, 1) on a log scale of  |
    |                  |              | alpha) or "multiplier" (Box(0, alpha_max)), see Action Space     |
    | reward           | "utility"    | "utility" or "cost" (see Rewards)                                |

    The default scenario (stationary traffic above the engine's capacity, budgets that bind) is
    described in `auction_gym.market.MarketConfig`.

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

    What the id promises: `-v0` is the pre-release version. Its interface (the observation's
    features and order, the action space, the reward, the info keys, the arguments) changes only
    with an entry below, and so may its trajectories; `tests/test_golden.py` pins a fixed-seed
    episode per mechanism, so a change that alters them unlisted fails there. From v1 on, a change
    that alters the trajectory of the same arguments and seed will bump the version, as
    Gymnasium's own environments do.

    - v0 (issue 13): own_queued and total_queue are log1p(n / scale) instead of n / scale clipped
      at 4 (which the default load reached by round ~2,000), own_latency and own_ttft
      log1p(t / scale) instead of t / scale clipped at 10, so observations, and the trajectories of
      learned policies, differ from earlier v0 releases (little for short queues and delays, where
      log1p(x) is about x); `rgb_array` rendering; trace_path checked at construction.
    - v0 (issue 14): the action is normalized by default, `Box(-1, 1)` mapped to the multiplier
      (a = 0 truthful), instead of the multiplier in `Box(0, alpha_max)`, which
      `action_type="multiplier"` keeps; models trained before act in the old space and play as
      trained only there (`agents.evaluation.evaluate` refuses a model whose action space is not
      the env's). alpha_max must be > 1 for the normalized type.
    - v0 (issue 15): the engine follows SGLang's admission rules by default (README, "The simulated
      engine"): output reserved by `max_new_tokens` with the adaptive new-token ratio and
      retraction, chunked prefill of 8,192 tokens, waiting requests' prefixes kept warm in the LRU
      order, a split stamping both halves; a step is a round that admits a request (one that only
      continues a chunked prompt or resumes retracted requests is not). Trajectories differ from
      earlier v0 releases; `engine_kwargs={"reservation": "oracle", "chunked_prefill_size": None}`
      restores the old admission rules (not the cache's).
    - v0 (issue 16): no change of behaviour (the golden digests are those of issue 15); the
      observation table is made from `auction_gym.market.observation.FEATURES`.
    - v0 (issue 23): new arguments, each off by default, so the default trajectories (and the
      golden digests) are unchanged: `episode_draws` (scenario parameters drawn per episode,
      reset's `info["draws"]`), `reward="cost"`, `action_type="log"`, and the cost model
      "service"; the load curve of the agentic workload (`wave_amplitude`, `wave_period`,
      `wave_offset` in workload_kwargs). `auction_gym.scenarios` names the pacing scenarios
      ("calibrated", the new default of `compare`; "bursty_v0", the earlier one).
    - v0 (issue 26): `mechanism="dfs_weight"` follows SGLang 0.5.23's `dfs-weight` in two more
      details: a request hangs where its whole prompt matches (was: all but its last token), and
      equal weights keep the order of a node's children in the cache (was: the subtree with the
      earliest request first); its trajectories differ (golden digests env/dfs_weight and
      engine/dfs_weight moved; no other mechanism's did). A resumed request charges its round
      min(max_new_tokens, clip) of output, as SGLang does (no golden digest moved).
    - v0 (issue 26, SGLang's queue rules): in-batch prefix sharing as SGLang's `lpm` applies it, a
      request sharing an uncached prefix with one ahead of it in the queue goes behind the others (a
      batch with room still takes it; until now it waited for the next batch), under `lpm`, `klpm`
      and `radix_vcg` (the registry's `in_batch`); `fcfs`, `dfs_weight` and `strict_vcg` never
      apply it (as SGLang's `fcfs`, with or without priorities, and `dfs-weight`); `lpm` and `dfs_weight` keep
      their order for the next round and `lpm` matches whole prompts; a retracted request waits at
      the queue's end; a split by the round's refresh of waiting prefixes is stamped at its
      request's turn. The engine replays' golden digests of every mechanism but strict_vcg moved;
      the env episodes' did not (their trajectories are unchanged).
    - v0 (issue 26, the torch engine's clock): `backend="torch"` times CPU iterations by the
      computing thread's CPU time by default (`gpu_backend/timer.py`), so its clock no longer
      stretches with other processes' load; it needs `torch.set_num_threads(1)` (else RuntimeError),
      or `backend_kwargs={"clock": "wall"}` for the elapsed time as before. The simulated backend is
      unchanged.
    - v0 (issue 26, SGLang's memory check): the engine admits a request only if its uncached
      prompt + output reservation + a page is strictly below the room, charges each admission (and
      chunk) a page more for the rest of its round, clips a request's cap to the pool less the
      paged prompt, a page and a token (rejecting at arrival one whose true output exceeds that),
      and promises a chunked request's output with its last chunk, as SGLang 0.5.23 does. Golden
      digest engine/fcfs moved; no other did (the chunk rule alone moves none).
    - v0 (issue 26, the env's step): `mechanism="radix_vcg"` decides a market's rounds over its
      queue tree kept in urgency units (`mechanism/factored.py`), which sums alpha x (urgencies)
      where the build from scratch sums alpha x urgency, so values agree to rounding: over the
      golden episodes every observation, reward and info value within 6e-13 relative, or 4e-14
      absolute for values under 1e-9 (rounding noise around 0, e.g. 9.2e-15 against 0.0). Golden
      digests env/radix_vcg and parallel/radix_vcg moved; no other did.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 10}

    def __init__(
        self,
        num_bidders: int = MarketConfig.num_bidders,
        mechanism: str = MarketConfig.mechanism,
        cost_model: str = MarketConfig.cost_model,
        request_overhead: float = MarketConfig.request_overhead,
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
    ) -> None:
        self.config = market_config(
            num_bidders=num_bidders, mechanism=mechanism, cost_model=cost_model,
            request_overhead=request_overhead, workload=workload, trace_path=trace_path,
            workload_kwargs=workload_kwargs, backend=backend, engine_kwargs=engine_kwargs,
            backend_kwargs=backend_kwargs, replicas=replicas, router=router,
            router_kwargs=dict(router_kwargs or {}),
            horizon=horizon, budget=budget, budget_per_round=budget_per_round, alpha_max=alpha_max,
            episode_draws=episode_draws,
        )
        if not 0 <= focal_bidder < num_bidders:
            raise ValueError(f"focal_bidder must be in 0..{num_bidders - 1}, got {focal_bidder}")
        check_env_arguments(reward_scale, render_mode, self.metadata["render_modes"])
        check_action_type(action_type, alpha_max)
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {reward!r}")
        warn_if_queue_unstable(self.config)
        self.reward = reward
        self.action_type = action_type
        self.focal = focal_bidder
        self.others = [i for i in range(num_bidders) if i != focal_bidder]
        self._groups = opponent_groups(other_bidders, self.others, alpha_max)
        self.reward_scale = float(reward_scale)
        self.render_mode = render_mode
        self.market = Market(self.config, accrue_latency_cost=reward == "cost")
        self.observation_space = spaces.Box(Obs.LOW, Obs.high(self.config.horizon), dtype=np.float32)
        self.action_space = action_box(action_type, alpha_max)
        self._obs: np.ndarray | None = None
        self._last: RoundReport | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.market.reset(int(self.np_random.integers(2**31 - 1)))
        self._obs = self.market.observations()
        self._last = None
        return self._obs[self.focal].copy(), {"budget": float(self.market.budget[self.focal]),
                                              "draws": self.market.draws}

    def step(self, action):
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        alphas = [0.0] * self.config.num_bidders
        alphas[self.focal] = parse_action(action, self.action_type, self.config.alpha_max)
        self._play_others(alphas)
        report = self.market.step(alphas)
        self._last = report
        self._obs = self.market.observations()
        info = market_info(self.market, report, self.focal)
        # From info's Python floats, the report's values: the same arithmetic without numpy scalars.
        if report.latency_cost is None:
            reward = info["utility"]
        else:
            info["latency_cost"] = report.latency_cost.item(self.focal)
            reward = -(info["latency_cost"] + info["payment"])
        return (self._obs[self.focal].copy(), reward * self.reward_scale, self.market.terminated,
                self.market.truncated, info)

    def _play_others(self, alphas: list[float]) -> None:
        """Writes the other bidders' multipliers into `alphas`, asking each group's policy once."""
        alpha_max, rows = self.config.alpha_max, self._obs.tolist()
        for policy, bidders, index in self._groups:
            if isinstance(policy, MultiplierPolicy) and type(policy).predict is MultiplierPolicy.predict:
                # A built-in (or a subclass that kept its predict): floats in and out, no arrays between.
                acts = policy.multipliers([rows[i] for i in bidders])
            else:
                out, _ = policy.predict(self._obs.take(index, 0), deterministic=True)
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


RadixAuctionEnv.__doc__ = with_workload_table(with_mechanism_table(with_observation_table(RadixAuctionEnv.__doc__)))

"""The same market for all bidders at once, as a PettingZoo ParallelEnv."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from .._checks import check_int
from ..action import action_value
from ..market import Market, MarketConfig, Obs
from ..scenarios import V1_KWARGS, V2_KWARGS
from .common import (
    ActionArguments,
    action_for_observation,
    check_env_arguments,
    field_names,
    grouped,
    market_config,
    market_info,
    refuses_unknown_keywords,
    valid_keywords,
    warn_if_queue_unstable,
)
from .rendering import market_frame

VERSIONS = {"v0": {}, "v1": V1_KWARGS, "v2": V2_KWARGS}
"""The versions `parallel_env` builds, as `RadixAuction-v0`, `-v1` and `-v2`, with their defaults."""


@refuses_unknown_keywords
class RadixAuctionParallelEnv(ParallelEnv):
    """Every bidder acts each round. Agents are "bidder_0" ... "bidder_{n-1}".

    Observation, action, reward (each agent's own utility x `reward_scale`), episode end and info
    are those of `RadixAuctionEnv`, per agent; see its docstring. All agents terminate together
    after `horizon` rounds (or are truncated together if the workload runs dry). `step` takes one
    action per agent and no others: a missing or unknown agent, or an action that is not one finite
    number, raises ValueError before the market steps.

    `observation_names` and `action_meaning` (also in `metadata`) name the features and say what an
    action means, as `RadixAuctionEnv`'s.

    Arguments: `reward_scale`, `render_mode`, `action_type` (every agent's; "normalized" by
    default) with its parameters `delta_bound`, `delta_start`, `residual_base`, `residual_scale`
    (see `RadixAuctionEnv`'s Action Space; under "delta" and "residual" each agent's map reads its
    own last multiplier and observation), and the market's keyword arguments (the fields of
    `MarketConfig`), as for `RadixAuctionEnv`; it warns as that does for a long horizon over an
    unstable queue, and checks `trace_path` at construction. An unknown keyword raises an error
    that lists the valid ones. `parallel_env(version="v1")` takes `RadixAuction-v1`'s defaults
    (the calibrated market and action type; `auction_gym.scenarios.V1_KWARGS`), "v2" v2's. Built
    directly, tied (unpaid) requests keep the order by request id (`tie_break="request_id"`).

    Version History: as `RadixAuctionEnv`'s (v0: the pre-release market; v1: the calibrated pacing
    market by default, delta and residual actions; v2: tied requests by cached prefix).

    Rendering: "ansi" gives one line of text after each step (None before the first); "rgb_array"
    a uint8 image of shape (64, 4 + 16 x (2 x num_bidders + 1), 3) after reset or any step (None
    before the first reset), drawn as `RadixAuctionEnv`'s with no focal bidder: bars for every
    bidder's budget left (green), the queue (red, log scale, full at 4,096 waiting), then every
    bidder's multiplier / alpha_max (blue).
    """

    metadata = {"name": "radix_auction_v0", "render_modes": ["ansi", "rgb_array"], "render_fps": 10,
                "is_parallelizable": True, "observation_names": Obs.NAMES}
    observation_names: tuple[str, ...] = Obs.NAMES
    """Every agent's observation's feature names, in the vector's order (as `RadixAuctionEnv`'s)."""

    def __init__(self, reward_scale: float = 0.1, render_mode: str | None = None, **arguments: Any) -> None:
        market, action = grouped(arguments, field_names(MarketConfig), field_names(ActionArguments))
        # The order of tied requests this env has always had; tie_break="cached_prefix" is v2's.
        self.config = market_config(**{"tie_break": "request_id", **market})
        check_env_arguments(reward_scale, render_mode, self.metadata["render_modes"])
        self.action_map = ActionArguments(**action).action_map(self.config.alpha_max)
        warn_if_queue_unstable(self.config)
        self.metadata = {**self.metadata, "action_meaning": self.action_meaning}
        self.action_type = self.action_map.action_type
        self.reward_scale = float(reward_scale)
        self.render_mode = render_mode
        self.possible_agents = [f"bidder_{i}" for i in range(self.config.num_bidders)]
        self.agents: list[str] = []
        self.market = Market(self.config)
        self._rng = np.random.default_rng()
        self._obs: list[list[float]] = []  # every agent's observation, the action map's obs
        self._prev_alpha: list[float] = []  # every agent's multiplier of the last round, its prev_alpha

    @staticmethod
    def extra_keywords() -> list[str]:
        """The names **arguments takes (`valid_keywords`): the action's (`ActionArguments`), then
        the market's (the fields of MarketConfig)."""
        return [*field_names(ActionArguments), *field_names(MarketConfig)]

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent: str) -> spaces.Box:
        self._check_agent(agent)
        return spaces.Box(Obs.LOW, Obs.high(self.config.pacing_rounds), dtype=np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent: str) -> spaces.Box:
        self._check_agent(agent)
        return self.action_map.space

    @property
    def action_meaning(self) -> str:
        """What every agent's action means, in one line (`auction_gym.action.ActionMap.meaning`)."""
        return self.action_map.meaning

    def action_for(self, alpha: float, observation: np.ndarray | list[float], agent: str) -> float:
        """The action of `agent` that plays multiplier `alpha` in the next step, given its current
        `observation` (the inverse of the action map; see `RadixAuctionEnv.action_for`)."""
        self._check_agent(agent)
        if not self._prev_alpha:  # its last multiplier, which the delta map reads, comes with the first reset
            raise RuntimeError("call reset() before action_for()")
        prev_alpha = self._prev_alpha[self.possible_agents.index(agent)]
        return action_for_observation(self.action_map, alpha, observation, prev_alpha)

    def _check_agent(self, agent: str) -> None:
        if agent not in self.possible_agents:
            raise ValueError(f"no agent {agent!r} in this env; its agents: {self.possible_agents}")

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:  # checked here: numpy's refusal speaks of "entropy", not the seed
            self._rng = np.random.default_rng(check_int("seed", seed, 0))
        self.market.reset(int(self._rng.integers(2**31 - 1)))
        self.agents = list(self.possible_agents)
        obs = self.market.observations()
        self._obs = obs.tolist()
        self._prev_alpha = [self.action_map.reset(alpha) for alpha in self.market.alpha.tolist()]
        infos = {a: {"budget": float(self.market.budget[i])} for i, a in enumerate(self.agents)}
        return {a: obs[i] for i, a in enumerate(self.agents)}, infos

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise RuntimeError("call reset() before step()" if self.market.engine is None
                               else "the episode is over; call reset()")
        if missing := set(self.agents) - set(actions):
            if not isinstance(actions, Mapping):  # a list of actions, say: named here, on the failing path only
                raise ValueError(f"actions must be a dict of each agent's action, {{agent: action}}, got {actions!r:.80}")
            raise ValueError(f"missing actions for {sorted(missing)}")
        if unknown := set(actions) - set(self.agents):  # every agent lives the whole episode
            raise ValueError(f"actions for agents this env does not have: {sorted(map(str, unknown))}; "
                             f"its agents: {self.agents}")
        multiplier = self.action_map.multiplier
        alphas = [multiplier(action_value(actions[a], f"action of {a}"), self._obs[i], self._prev_alpha[i])
                  for i, a in enumerate(self.agents)]
        report = self.market.step(alphas)
        self._prev_alpha = self.market.alpha.tolist()
        obs = self.market.observations()
        self._obs = obs.tolist()
        terminated, truncated = self.market.terminated, self.market.truncated
        agents = self.agents
        out = (
            {a: obs[i] for i, a in enumerate(agents)},
            {a: float(report.utility[i] * self.reward_scale) for i, a in enumerate(agents)},
            {a: bool(terminated) for a in agents},
            {a: bool(truncated) for a in agents},
            {a: market_info(self.market, report, i) for i, a in enumerate(agents)},
        )
        if terminated or truncated:
            self.agents = []
        self._last = report
        return out

    def render(self) -> str | np.ndarray | None:
        """The frame of `render_mode` (see the class docstring)."""
        if self.render_mode == "rgb_array":
            return None if self.market.engine is None else market_frame(self.market.observations())
        if self.render_mode != "ansi" or not hasattr(self, "_last"):
            return None
        m = self.market
        return (f"round {m.round}/{self.config.horizon} queue={len(m.engine.waiting)} "
                f"alpha={np.round(m.alpha, 3).tolist()} spent/budget={np.round(m.spent / m.budget, 3).tolist()}")

    def close(self) -> None:
        pass


def parallel_env(version: str = "v0", **kwargs: Any) -> RadixAuctionParallelEnv:
    """`RadixAuctionParallelEnv(**kwargs)`, PettingZoo's conventional constructor name, with the
    defaults of `version` (of VERSIONS): "v1" and "v2" take the arguments of V1_KWARGS and
    V2_KWARGS this env has (the market and action type; the reward is each agent's utility),
    keywords given overriding them."""
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {list(VERSIONS)}, got {version!r}")
    return RadixAuctionParallelEnv(**{**parallel_kwargs(VERSIONS[version]), **kwargs})


def parallel_kwargs(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A copy of the arguments of `env_kwargs` (a `RadixAuction-v*` scenario's) that this env has:
    the market and the action type; not the single-agent env's reward or focal bidder."""
    valid = valid_keywords(RadixAuctionParallelEnv)
    return {k: v for k, v in copy.deepcopy(env_kwargs).items() if k in valid}

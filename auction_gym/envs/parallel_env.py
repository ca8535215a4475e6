"""The same market for all bidders at once, as a PettingZoo ParallelEnv."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from ..action import DEFAULT_ACTION_TYPE, action_box, check_action_type, parse_action
from ..market import Market, Obs
from .common import check_env_arguments, market_config, market_info, warn_if_queue_unstable
from .rendering import market_frame


class RadixAuctionParallelEnv(ParallelEnv):
    """Every bidder acts each round. Agents are "bidder_0" ... "bidder_{n-1}".

    Observation, action, reward (each agent's own utility x `reward_scale`), episode end and info
    are those of `RadixAuctionEnv`, per agent; see its docstring. All agents terminate together
    after `horizon` rounds (or are truncated together if the workload runs dry).

    Arguments: `reward_scale`, `render_mode`, `action_type` (every agent's; "normalized" by default,
    `Box(-1, 1)`, or "multiplier", `Box(0, alpha_max)`, see `RadixAuctionEnv`'s Action Space), and
    the market's keyword arguments, as for `RadixAuctionEnv` (everything but `other_bidders` and
    `focal_bidder`); it warns as that does for a long horizon over an unstable queue, and checks
    `trace_path` at construction.

    Version history: as `RadixAuctionEnv`'s (issue 14: normalized actions by default).

    Rendering: "ansi" gives one line of text after each step (None before the first); "rgb_array"
    a uint8 image of shape (64, 4 + 16 x (2 x num_bidders + 1), 3) after reset or any step (None
    before the first reset), drawn as `RadixAuctionEnv`'s with no focal bidder: bars for every
    bidder's budget left (green), the queue (red, log scale, full at 4,096 waiting), then every
    bidder's multiplier / alpha_max (blue).
    """

    metadata = {"name": "radix_auction_v0", "render_modes": ["ansi", "rgb_array"], "render_fps": 10,
                "is_parallelizable": True}

    def __init__(self, reward_scale: float = 0.1, render_mode: str | None = None,
                 action_type: str = DEFAULT_ACTION_TYPE, **market: Any) -> None:
        self.config = market_config(**market)
        check_env_arguments(reward_scale, render_mode, self.metadata["render_modes"])
        check_action_type(action_type, self.config.alpha_max)
        warn_if_queue_unstable(self.config)
        self.action_type = action_type
        self.reward_scale = float(reward_scale)
        self.render_mode = render_mode
        self.possible_agents = [f"bidder_{i}" for i in range(self.config.num_bidders)]
        self.agents: list[str] = []
        self.market = Market(self.config)
        self._rng = np.random.default_rng()

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(Obs.LOW, Obs.high(self.config.horizon), dtype=np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent: str) -> spaces.Box:
        return action_box(self.action_type, self.config.alpha_max)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.market.reset(int(self._rng.integers(2**31 - 1)))
        self.agents = list(self.possible_agents)
        obs = self.market.observations()
        infos = {a: {"budget": float(self.market.budget[i])} for i, a in enumerate(self.agents)}
        return {a: obs[i] for i, a in enumerate(self.agents)}, infos

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise RuntimeError("the episode is over; call reset()")
        if missing := set(self.agents) - set(actions):
            raise ValueError(f"missing actions for {sorted(missing)}")
        alphas = [parse_action(actions[a], self.action_type, self.config.alpha_max, f"action of {a}")
                  for a in self.agents]
        report = self.market.step(alphas)
        obs = self.market.observations()
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


def parallel_env(**kwargs: Any) -> RadixAuctionParallelEnv:
    """`RadixAuctionParallelEnv(**kwargs)`, PettingZoo's conventional constructor name."""
    return RadixAuctionParallelEnv(**kwargs)

"""Evaluation of a population: every bidder of the PettingZoo env (`RadixAuctionParallelEnv`)
acting through a policy of its own, on fixed seeds, with the metrics of `agents.evaluation`.

A population maps each agent ("bidder_0", ...) to a policy with SB3's `predict`; built-in
policies are mapped to the env's action type as `agents.evaluation.evaluate` maps them, so an
all-OGD, an all-truthful and a learned population are played by the same code. Episode k is
seeded `seed + k` for every population, so populations face identical workloads (and, for one
seed, the workload `RadixAuction-v0` draws for that seed).

Per-episode metrics (money in the workload's units, times in engine seconds):

- market-wide (`MARKET_METRICS`): `welfare`, `mean_latency`, `ttft` and `cache_hit_rate` as
  `agents.evaluation.episode_metrics` defines them (the same for every bidder), `revenue`, the
  sum of all bidders' payments, and `total_utility`, the sum of their utilities (welfare minus
  revenue);
- per bidder (`BIDDER_METRICS`, keyed `<agent>/<metric>`): its `utility`, `budget_spent_frac` and
  `payments`.

Ray is not needed here: a learned RLlib population comes from `agents.rllib.load_population`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from auction_gym import RadixAuctionParallelEnv
from auction_gym.envs.common import check_env_kwargs
from auction_gym.pacing import Policy, builtin_policy_names

from .evaluation import DEFAULT_EVAL_SEED, acting_in, episode_metrics, policy_from_spec
from .sb3 import ENV_ID

BIDDER_METRICS = ("utility", "budget_spent_frac", "payments")
"""Each bidder's own metrics, keyed `<agent>/<metric>` in a population's results."""
_SHARED = ("welfare", "mean_latency", "ttft", "cache_hit_rate")
"""`episode_metrics` entries that are the market's, the same in every bidder's infos."""
MARKET_METRICS = (*_SHARED, "revenue", "total_utility")
"""Market-wide metrics of a population's episode (see the module docstring)."""
_SINGLE_AGENT_ONLY = ("other_bidders", "focal_bidder")


def check_population_env_kwargs(env_kwargs: dict[str, Any]) -> None:
    """ValueError unless both `RadixAuction-v0` (where a learned bidder is evaluated against OGD)
    and the PettingZoo env (where every bidder acts) accept `env_kwargs`; the message names the
    argument and what is valid."""
    if given := sorted(set(env_kwargs) & set(_SINGLE_AGENT_ONLY)):
        raise ValueError(f"{', '.join(given)}: every bidder acts in a population, so there are no other or focal "
                         "bidders to set")
    check_env_kwargs(env_kwargs, ENV_ID)
    RadixAuctionParallelEnv(**env_kwargs).close()


def agent_names(env_kwargs: dict[str, Any]) -> list[str]:
    """The agents of the PettingZoo env with `env_kwargs`, in order."""
    env = RadixAuctionParallelEnv(**env_kwargs)
    try:
        return list(env.possible_agents)
    finally:
        env.close()


def uniform_population(spec: str, agents: Iterable[str], alpha_max: float = 2.0) -> dict[str, Policy]:
    """Every agent on the built-in policy `spec` (of `auction_gym.pacing.builtin_policy_names()`), one
    instance each (a stateful policy must not be shared between bidders)."""
    if spec.endswith(".zip"):
        raise ValueError(f"a uniform population is built-in: {', '.join(builtin_policy_names())}, got {spec!r}")
    return {agent: policy_from_spec(spec, alpha_max) for agent in agents}


def evaluate_population(population: Mapping[str, Policy], env_kwargs: dict[str, Any] | None = None,
                        episodes: int = 10, seed: int = DEFAULT_EVAL_SEED, progress: bool = True,
                        desc: str = "evaluate population") -> list[dict[str, float]]:
    """Play `episodes` episodes of the PettingZoo env (episode k seeded `seed + k`), each agent
    acting deterministically through `population[agent]`; the metrics of each episode (module
    docstring), in order. ValueError for a population that misses an agent or a policy that acts
    in another action space than the env's."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    env = RadixAuctionParallelEnv(**(env_kwargs or {}))
    try:
        if missing := sorted(set(env.possible_agents) - set(population)):
            raise ValueError(f"the population has no policy for {', '.join(missing)}")
        policies = {a: acting_in(population[a], env.action_space(a), env, a) for a in env.possible_agents}
        return [population_metrics(_episode(policies, env, seed + k))
                for k in tqdm(range(episodes), desc=desc, unit="ep", disable=not progress, leave=False)]
    finally:
        env.close()


def population_metrics(infos: Mapping[str, Sequence[dict[str, Any]]]) -> dict[str, float]:
    """The metrics of one population episode from each agent's per-step `info` dicts."""
    per = {agent: episode_metrics(steps) for agent, steps in infos.items()}
    first = next(iter(per.values()))
    out = {m: first[m] for m in _SHARED}
    out["revenue"] = float(sum(m["payments"] for m in per.values()))
    out["total_utility"] = float(sum(m["utility"] for m in per.values()))
    for agent, metrics in per.items():
        out.update({f"{agent}/{m}": metrics[m] for m in BIDDER_METRICS})
    return out


def _episode(policies: Mapping[str, Policy], env: RadixAuctionParallelEnv, seed: int) -> dict[str, list[dict]]:
    """One episode seeded `seed`; each agent's per-step infos."""
    obs, _ = env.reset(seed=seed)
    infos: dict[str, list[dict]] = {agent: [] for agent in env.agents}
    state: dict[str, Any] = dict.fromkeys(env.agents)
    start = np.array([True])
    while env.agents:
        actions = {}
        for agent in env.agents:
            # Memory (an LSTM's state) is kept per bidder and starts afresh with the episode.
            actions[agent], state[agent] = policies[agent].predict(obs[agent], state[agent], episode_start=start,
                                                                   deterministic=True)
        start = np.array([False])
        obs, _, _, _, step_infos = env.step(actions)
        for agent, info in step_infos.items():
            infos[agent].append(info)
    return infos

"""Does `reward="cost"` cut the reward's variance without moving the optimum?

`python -m experiments.studies.reward_variance [--scenario NAME] [--episodes N]` plays every constant
multiplier of `agents.baselines.FIXED_GRID` and the PI pacer on N episodes of the scenario, and
reads both rewards from each step's info (the market is the same under either: the reward only
changes what the env returns): "utility" = `info["utility"]`, "cost" = -(`info["latency_cost"]` +
`info["payment"]`). It prints, for each reward, the per-step variance and the variance of the
episode return pooled over the policies, the variance of the return minus its mean over the
policies on the same episode (the part an action can move against what it cannot), and the argmax
of the mean return over the constant grid, which must be the same constant under both rewards.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from agents.baselines import fixed_candidates
from agents.evaluation import DEFAULT_EVAL_SEED, rollout
from auction_gym.pacing import PIDPacer
from auction_gym.scenarios import DEFAULT_SCENARIO, SCENARIOS, scenario


def returns(env_kwargs: dict, episodes: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """Per policy, per reward: the step rewards of every episode, shape (episodes, steps) as a
    list of arrays (episodes can be truncated)."""
    kwargs = {**env_kwargs, "reward": "cost"}
    policies = {**fixed_candidates(kwargs.get("alpha_max", 2.0)), "pid": PIDPacer(0.05, 0.01)}
    out: dict[str, dict[str, list[np.ndarray]]] = {}
    for name, policy in policies.items():
        runs = [[info for _, info in rollout(policy, kwargs, seed + k)] for k in range(episodes)]
        out[name] = {
            "utility": [np.array([i["utility"] for i in run]) for run in runs],
            "cost": [np.array([-(i["latency_cost"] + i["payment"]) for i in run]) for run in runs],
        }
    return out


def summary(data: dict[str, dict[str, list[np.ndarray]]]) -> dict[str, dict[str, float | str]]:
    """Each reward's step variance, return variance, within-episode return variance across policies
    (the part policies move) and the constant of best mean return."""
    out = {}
    for reward in ("utility", "cost"):
        steps = np.concatenate([r for p in data.values() for r in p[reward]])
        totals = np.array([[r.sum() for r in p[reward]] for p in data.values()])  # (policies, episodes)
        constants = [n for n in data if n.startswith("fixed:")]
        means = {n: totals[list(data).index(n)].mean() for n in constants}
        out[reward] = {"step_var": float(steps.var()), "return_var": float(totals.var()),
                       "policy_var": float((totals - totals.mean(axis=0)).var()),
                       "argmax": max(means, key=means.__getitem__)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO, choices=list(SCENARIOS))
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--seed", type=int, default=DEFAULT_EVAL_SEED)
    args = parser.parse_args()
    result = summary(returns(scenario(args.scenario), args.episodes, args.seed))
    print(json.dumps(result, indent=2))
    u, c = result["utility"], result["cost"]
    print(f"step variance cost/utility {c['step_var'] / u['step_var']:.3f}; return variance "
          f"{c['return_var'] / u['return_var']:.3f}; share a policy moves: utility "
          f"{u['policy_var'] / u['return_var']:.3f}, cost {c['policy_var'] / c['return_var']:.3f}; "
          f"argmax {u['argmax']} / {c['argmax']}")


if __name__ == "__main__":
    main()

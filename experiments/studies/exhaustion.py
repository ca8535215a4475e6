"""How often bidders are out of budget in `compare`'s scenario, by the focal bidder's policy.

    python -m experiments.studies.exhaustion [--episodes 20]

For each focal policy (OGD, truthful, the best constant multiplier `best_fixed` chose, 0.02), over
the evaluation episodes `compare` scores on (seeds 1000, 1001, ...): the focal bidder's utility,
and the share of rounds in which the focal bidder, and on average each other bidder (pacing by
OGD), has spent its whole budget and so bids 0 whatever it plays. It tests the explanation of
`best_fixed`'s lead in the pacing benchmark (the documentation's "Pacing benchmark" page): a bidder that never runs dry keeps bidding while the others,
out of budget, bid nothing.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

import auction_gym  # noqa: F401  (registers RadixAuction-v0)
from agents.evaluation import DEFAULT_EVAL_SEED
from auction_gym.pacing import FixedMultiplier, OGDPacer, Truthful, focal_policy
from auction_gym.scenarios import scenario

SCENARIO = scenario("bursty_v0")
"""The env arguments by default: this study measured the first pacing scenario, "bursty_v0" (`auction_gym.scenarios`)."""


POLICIES = {"ogd": OGDPacer(), "truthful": Truthful(), "fixed:0.02": FixedMultiplier(0.02)}


def dry_shares(policy, seed: int) -> tuple[float, float, float]:
    """(focal utility, share of rounds the focal bidder is out of budget, mean share for the
    others) over one episode of the compare scenario seeded `seed`."""
    env = gym.make("RadixAuction-v0", **SCENARIO)
    obs, _ = env.reset(seed=seed)
    market, mapped = env.unwrapped.market, focal_policy(policy, env)
    utility, dry, done = 0.0, [], False
    while not done:
        action, _ = mapped.predict(obs)
        obs, _, terminated, truncated, info = env.step(action)
        utility += info["utility"]
        dry.append(market.spent >= market.budget)
        done = terminated or truncated
    env.close()
    dry = np.array(dry)
    return utility, float(dry[:, 0].mean()), float(dry[:, 1:].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=20, help="evaluation episodes per policy (default 20)")
    args = parser.parse_args()
    for name, policy in POLICIES.items():
        runs = np.array([dry_shares(policy, DEFAULT_EVAL_SEED + k) for k in range(args.episodes)])
        print(f"{name:11s} utility {runs[:, 0].mean():7.1f}; out of budget: focal bidder {runs[:, 1].mean():.0%} "
              f"of rounds, other bidders {runs[:, 2].mean():.0%}")


if __name__ == "__main__":
    main()

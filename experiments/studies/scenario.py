"""The default scenario's figures, as MarketConfig and OGDPacer document them.

    python -m experiments.studies.scenario [--seeds N] [--etas 0.01,0.02,0.05] [--mechanisms radix_vcg,tiers]

Every bidder plays the same policy on the default `MarketConfig` (under each of `--mechanisms`, the
radix auction by default) for one episode per seed:
- truthful bidding with unlimited budgets: how many times its budget each bidder would spend, and
  the mean number of waiting requests;
- OGD pacing at each step size eta: the mean spent fraction of the budget, the share of
  bidder-episodes that end within 90-100% of it, and the mean round at which a budget ran out.
"""

from __future__ import annotations

import argparse

import numpy as np

from auction_gym.market import Market, MarketConfig
from auction_gym.pacing import OGDPacer, Policy, Truthful


def play(config: MarketConfig, policy: Policy, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """One episode with every bidder on `policy`: (spent per bidder, round each ran out of budget or
    the horizon, mean waiting requests over the rounds)."""
    market = Market(config)
    market.reset(seed)
    ran_out = np.full(market.n, config.horizon)
    queue = []
    while not market.done:
        action, _ = policy.predict(market.observations())
        market.step(action.ravel())
        queue.append(len(market.engine.waiting))
        ran_out[(ran_out == config.horizon) & (market.remaining <= 0.01 * market.budget)] = market.round
    return market.spent.copy(), ran_out, float(np.mean(queue))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--etas", default="0.01,0.02,0.05")
    ap.add_argument("--mechanisms", default="radix_vcg", help="comma-separated registered mechanisms")
    args = ap.parse_args()
    for mechanism in args.mechanisms.split(","):
        print(f"{mechanism}:")
        report(mechanism, range(args.seeds), [float(e) for e in args.etas.split(",")])


def report(mechanism: str, seeds: range, etas: list[float]) -> None:
    """Print the figures of the module docstring for one mechanism."""
    base = MarketConfig(mechanism=mechanism)
    unlimited = MarketConfig(mechanism=mechanism, budget=1e18)
    runs = [play(unlimited, Truthful(), s) for s in seeds]
    multiple = np.concatenate([spent for spent, _, _ in runs]) / base.budgets()[0]
    queue = [q for _, _, q in runs]
    print(f"truthful, unlimited budgets: spends {multiple.min():.1f}x to {multiple.max():.1f}x the budget "
          f"(median {np.median(multiple):.1f}x); mean queue {np.mean(queue):.1f} "
          f"(per seed {min(queue):.1f} to {max(queue):.1f})")
    for eta in etas:
        runs = [play(base, OGDPacer(eta=eta), s) for s in seeds]
        frac = np.concatenate([spent for spent, _, _ in runs]) / base.budgets()[0]
        out = np.concatenate([r for _, r, _ in runs])
        print(f"OGD eta={eta}: spends {frac.mean():.0%} on average, {np.mean((frac >= 0.9) & (frac <= 1.0)):.0%} "
              f"of bidder-episodes within 90-100%; budgets run out at round {out.mean():.0f} on average "
              f"(earliest {out.min()}), mean queue {np.mean([q for _, _, q in runs]):.1f}")


if __name__ == "__main__":
    main()

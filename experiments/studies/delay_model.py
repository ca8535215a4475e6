"""Does the auction's completion-time model predict the delays the engine produces?

`python -m experiments.studies.delay_model [--episodes N] [--rate R]` plays episodes of the calibrated
scenario (`auction_gym.scenarios`) with truthful bidders and unlimited budgets, once under each
cost model ("tokens" and "service"). In every admission round the auction gives each waiting
request a completion time C_r (its position's work, in prefill tokens); in seconds (x the cost
model's 32.5 us a token) minus the request's own work, that is the wait the auction predicts
before r is admitted. The realized wait is r's admission time minus the round's time. It prints,
per cost model, the median of realized / predicted over every (round, waiting request) pair whose
request was admitted in the episode, and the correlation of the two (Pearson, over the pairs).
A model that prices the engine's bottleneck has a ratio near 1.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from auction_gym.envs import RadixAuctionEnv
from auction_gym.market import Market
from auction_gym.scenarios import scenario


def pairs(cost_model: str, rate: float, episodes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, realized) waits in seconds over every round and waiting request."""
    config = replace(RadixAuctionEnv(**scenario("calibrated")).config, cost_model=cost_model, budget=1e12,
                     episode_draws={"rate": [rate]})
    overhead = config.service_overhead() if cost_model == "service" else config.request_overhead
    predicted, realized = [], []
    for k in range(episodes):
        market = Market(config)
        market.reset(seed + k)
        rounds = []
        while not market.done:
            now = market.engine.now
            report = market.step([1.0] * config.num_bidders)
            if report.decision is not None and report.decision.allocation is not None:
                rounds.append((now, report.decision))
        per_token = market.engine.cost.prefill_per_token
        records = market.engine.records
        for now, decided in rounds:
            completion, prefix = decided.outcome.completion, dict(zip((r.id for r in decided.requests),
                                                                      decided.prefix_lens or []))
            for r in decided.requests:
                admit = records[r.id].admit
                if np.isnan(admit) or admit < now:
                    continue
                own = overhead + len(r.tokens) - prefix.get(r.id, 0)
                predicted.append((completion[r.id] - own) * per_token)
                realized.append(admit - now)
    return np.array(predicted), np.array(realized)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--rate", type=float, default=40.0, help="arrival rate, requests/s (default 40)")
    args = parser.parse_args()
    for cost_model in ("tokens", "service"):
        predicted, realized = pairs(cost_model, args.rate, args.episodes)
        keep = predicted > 0
        ratio = np.median(realized[keep] / predicted[keep])
        corr = np.corrcoef(predicted, realized)[0, 1]
        print(f"{cost_model:8s} pairs {len(predicted):6d}  median realized/predicted {ratio:8.2f}  "
              f"correlation {corr:.2f}  median predicted {np.median(predicted):.3f} s, realized "
              f"{np.median(realized):.3f} s")


if __name__ == "__main__":
    main()

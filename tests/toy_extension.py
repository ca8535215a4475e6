"""A newcomer's extension in a file of its own: two admission policies, a workload, a router and a
pacing policy. `test_extending.py` registers each of the first four with one registry entry and runs
them; `test_leaderboard.py` submits the pacing policy to the leaderboard as `toy_extension:HoldThePIPacer`.

- `LastComeFirstServed`: the newest request first; no payments.
- `ToyAuction`: strict priority by bid under another name; VCG payments (an `AuctionMechanism`:
  the engine asks it to `decide` each round with the market's multipliers, and the market charges
  from the round it returns).
- `toy_chat`: every bidder sends chat requests that start with its own system prompt of
  `prefix_len` tokens, then a question of `question_len` fresh tokens; Poisson arrivals at `rate`
  requests/s for `duration` seconds (or the first `num_requests`); urgency uniform in [0.5, 2]
  money per second of latency, value 10 x urgency; `output_len` tokens out.
- `BidderAffinity`: a cluster router that sends each bidder's requests to one replica (bidder
  modulo replicas), so a bidder's system prompt is cached on one replica only.
- `HoldThePIPacer`: a pacing policy with SB3's `predict` that always plays a = 0, which in the
  default env's "residual" action is the tuned PI pacer itself.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from auction_gym.mechanism import StrictPriorityAuction
from auction_gym.request import Request
from auction_gym.scheduler import fcfs_key


class LastComeFirstServed:
    name = "toy_lcfs"

    def order(self, queue: list[Request], cache: object) -> list[Request]:
        return sorted(queue, key=fcfs_key, reverse=True)


class ToyAuction(StrictPriorityAuction):
    name = "toy_auction"


def toy_chat(num_bidders: int, seed: int, rate: float = 10.0, duration: float = 30.0,
             num_requests: int | None = None, prefix_len: int = 512, question_len: int = 32,
             output_len: int = 16) -> Iterator[Request]:
    """The toy workload's requests in arrival order (times in s, lengths in tokens)."""
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(0, 32_000, prefix_len) for _ in range(num_bidders)]
    t, k = 0.0, 0
    while num_requests is None or k < num_requests:
        t += rng.exponential(1.0 / rate)
        if num_requests is None and t >= duration:
            return
        bidder = int(rng.integers(num_bidders))
        urgency = float(rng.uniform(0.5, 2.0))
        tokens = np.concatenate([prefixes[bidder], rng.integers(0, 32_000, question_len)])
        yield Request(id=k, bidder=bidder, tokens=tokens, bid=urgency, output_len=output_len, arrival=t,
                      value=10.0 * urgency, urgency=urgency, kind="toy")
        k += 1


class BidderAffinity:
    name = "toy_affinity"

    def route(self, request: Request, replicas: Sequence[object], now: float) -> int:
        return request.bidder % len(replicas)


class HoldThePIPacer:
    """Plays a = 0 every round: in the "residual" action, the tuned PI pacer's own multiplier."""

    def predict(self, observation: np.ndarray, state: object = None, episode_start: np.ndarray | None = None,
                deterministic: bool = True) -> tuple[np.ndarray, object]:
        return np.zeros(1, dtype=np.float32), state

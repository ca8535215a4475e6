"""Benchmark: a batch of markets against one market, by the length of their queues.

    python -m experiments.bench.queue [--envs N] [--rounds R] [--rates 12,40] [--repeats K] [--run K]

The same N episodes of RadixAuction-v1 (seeds 0..N-1, seeded random actions, arrival rate fixed)
played three ways: by one env after another; as one `MarketBatch` of N envs
(`auction_gym.envs.batch`), which steps its markets in turn, one round each; and by the same N envs
alive at once, each stepped RUN rounds in a row before the next. For each way, the CPU time per env
step in the first and the last quarter of the episodes' rounds, beside the mean number of requests
waiting in those rounds (the same in every way: the same episodes, the same work).

The rates: one under what the default engine serves (about 14.5 requests/s,
`MarketConfig.served_rate`), where the queue stays near empty, and v1's middle draw, 40 requests/s,
where it grows through the episode. A step reads every waiting request, some of it several times:
the engine's round, the auction's bids and cached lengths (`RoundTree.market_round`), the latency
accrued over the requests in the system and the observations' per-bidder counts. One market keeps
what a step reads in the CPU's caches from step to step; N markets stepped in turn do not, so there
each waiting request costs more (less of the cost grows over an episode whose queue stays near
empty too). The third way tells that apart from any other cost of holding N markets: the same N
markets, stepped in runs, find their state warm after a run's first step. A core whose per-step
work did not grow with the queue, or read it from compact arrays of its own, is what would bring
the batch closer to one market's cost.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from functools import partial

import gymnasium as gym
import numpy as np

from auction_gym import V1_KWARGS
from auction_gym.envs.batch import MarketBatch

from . import Table
from .env import uniform_plays

ENV_ID = "RadixAuction-v1"
HORIZON = V1_KWARGS["horizon"]
"""Its episodes' rounds: a run plays at most these, so no episode ends inside it."""
RATES = (12.0, 40.0)
"""Arrival rates, requests/s: under the default engine's service rate, and v1's middle draw."""
RUN = 10
"""Rounds each env is stepped in a row in the third way (a run stops at a quarter's end)."""


@dataclass(frozen=True)
class Quarter:
    """A quarter of the episodes' rounds: CPU µs per env step each way, and the mean queue."""

    rounds: range
    one_env: float
    batch: float
    in_runs: float
    queue: float


def make_env(rate: float) -> gym.Env:
    """RadixAuction-v1 at the fixed arrival rate `rate` (requests/s), not a drawn one."""
    return gym.make(ENV_ID, episode_draws={"rate": [rate]})


def _quarters(rounds: int) -> list[range]:
    """The four quarters of `rounds` rounds."""
    return [range(q * rounds // 4, (q + 1) * rounds // 4) for q in range(4)]


def random_plays(n: int, rounds: int, rate: float, seed: int = 0) -> np.ndarray:
    """Seeded uniform actions, shape (rounds, n, 1): round t's action of episode i at [t, i]."""
    return uniform_plays(make_env(rate).action_space, rounds, n, seed)


def one_env_after_another(n: int, rounds: int, rate: float, plays: np.ndarray) -> np.ndarray:
    """CPU seconds per quarter of `rounds`, summed over `n` episodes played by one env in turn."""
    env, quarters, spent = make_env(rate), _quarters(rounds), np.zeros(4)
    for i in range(n):
        env.reset(seed=i)
        for q, block in enumerate(quarters):
            start = time.process_time()
            for t in block:
                env.step(plays[t, i])
            spent[q] += time.process_time() - start
    return spent


def one_batch(n: int, rounds: int, rate: float, plays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CPU seconds per quarter of `rounds` of one `MarketBatch` of `n` envs, and the queue summed
    over its envs and the quarter's rounds (read between steps, untimed)."""
    batch = MarketBatch([partial(make_env, rate)] * n)
    batch.reset(list(range(n)))
    markets = [env.unwrapped.market for env in batch.envs]
    spent, queued = np.zeros(4), np.zeros(4)
    for q, block in enumerate(_quarters(rounds)):
        for t in block:
            queued[q] += sum(len(m.engine.waiting) for m in markets)
            start = time.process_time()
            batch.step(plays[t])
            spent[q] += time.process_time() - start
    batch.close()
    return spent, queued


def in_runs(n: int, rounds: int, rate: float, plays: np.ndarray, run: int = RUN) -> tuple[np.ndarray, np.ndarray]:
    """CPU seconds per quarter of `rounds` of `n` envs alive at once, each stepped `run` rounds in a
    row (a run stops at a quarter's end) before the next, and the queue summed as `one_batch` sums it."""
    envs = [make_env(rate) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    markets = [env.unwrapped.market for env in envs]
    spent, queued = np.zeros(4), np.zeros(4)
    for q, block in enumerate(_quarters(rounds)):
        for first in range(block.start, block.stop, run):
            for i, env in enumerate(envs):
                for t in range(first, min(first + run, block.stop)):
                    queued[q] += len(markets[i].engine.waiting)
                    start = time.process_time()
                    env.step(plays[t, i])
                    spent[q] += time.process_time() - start
    for env in envs:
        env.close()
    return spent, queued


def measure(n: int, rounds: int, rate: float, repeats: int = 3, seed: int = 0, run: int = RUN) -> list[Quarter]:
    """The first and last quarters of `n` episodes of `rounds` rounds (at most HORIZON) at arrival
    rate `rate`, played the three ways (runs of `run` rounds in the third) `repeats` times in turn:
    each quarter's median time each way (a shared machine's slow stretch moves one repeat).
    ValueError if the ways' queues differ (then they did not play the same episodes)."""
    plays = random_plays(n, rounds, rate, seed)
    alone, batched, runs = [], [], []
    for _ in range(repeats):
        alone.append(one_env_after_another(n, rounds, rate, plays))
        spent, queued = one_batch(n, rounds, rate, plays)  # the same queues every repeat: the same episodes
        batched.append(spent)
        spent, queued_in_runs = in_runs(n, rounds, rate, plays, run)
        runs.append(spent)
        if not np.array_equal(queued, queued_in_runs):
            raise ValueError(f"the runs of {run} rounds waited {queued_in_runs} where the batch waited {queued}")
    alone, batched, runs = np.median(alone, axis=0), np.median(batched, axis=0), np.median(runs, axis=0)
    quarters = _quarters(rounds)

    def quarter(q: int) -> Quarter:
        steps = n * len(quarters[q])
        return Quarter(quarters[q], 1e6 * alone[q] / steps, 1e6 * batched[q] / steps, 1e6 * runs[q] / steps,
                       queued[q] / steps)

    return [quarter(0), quarter(3)]


def table(quick: bool) -> Table:
    """Both rates' first and last quarters (`quick`: 8 envs, 40 rounds, one repeat; else 64 envs,
    HORIZON rounds, the median of three)."""
    n, rounds, repeats = (8, 40, 1) if quick else (64, HORIZON, 3)
    rows, notes = [], [f"{ENV_ID}, episodes of seeds 0-{n - 1} at a fixed arrival rate, seeded random actions, "
                       f"{rounds} rounds each; µs of CPU per env step, the median of {repeats} run(s), the three ways "
                       f"in turn. In runs: the same {n} envs alive at once, each stepped {RUN} rounds in a row before "
                       "the next; the same episodes as the batch's (the same queues, checked), in another order."]
    for rate in RATES:
        first, last = measure(n, rounds, rate, repeats)
        for q in (first, last):
            rows.append((f"{rate:g}", f"{q.rounds.start}-{q.rounds.stop - 1}", f"{q.queue:.0f}", f"{q.one_env:.1f}",
                         f"{q.batch:.1f}", f"{q.in_runs:.1f}", f"{q.batch / q.one_env:.2f}x",
                         f"{q.in_runs / q.one_env:.2f}x"))
        if last.queue - first.queue >= 1:
            grew = last.queue - first.queue
            notes.append(f"At {rate:g} requests/s, each request more waiting from the first quarter to the last adds "
                         f"{(last.one_env - first.one_env) / grew:.2f} µs to one env's step and "
                         f"{(last.batch - first.batch) / grew:.2f} µs to the batch's, per env.")
    return Table(("arrival rate, requests/s", "rounds", "mean queue", "one env after another, µs",
                  f"one MarketBatch of {n}, µs", f"{n} envs in runs of {RUN}, µs", "batch / one env",
                  "runs / one env"), rows, notes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=HORIZON,
                        help="rounds per episode, at most v1's horizon (%(default)s)")
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES))
    parser.add_argument("--repeats", type=int, default=3, help="runs each way, in turn; the median (default 3)")
    parser.add_argument("--run", type=int, default=RUN, help="rounds each env is stepped in a row in the third way "
                        "(default %(default)s)")
    args = parser.parse_args(argv)
    if not 4 <= args.rounds <= HORIZON:
        parser.error(f"--rounds must be in 4..{HORIZON} (four quarters, no episode ending inside the run)")
    if args.run < 1:
        parser.error("--run must be >= 1")
    for rate in (float(r) for r in args.rates.split(",")):
        for q in measure(args.envs, args.rounds, rate, args.repeats, run=args.run):
            print(f"rate {rate:g}/s, rounds {q.rounds.start}-{q.rounds.stop - 1}: mean queue {q.queue:.1f}; "
                  f"µs of CPU per env step: one env after another {q.one_env:.1f}, a batch of {args.envs} "
                  f"{q.batch:.1f} ({q.batch / q.one_env:.2f}x), in runs of {args.run} {q.in_runs:.1f} "
                  f"({q.in_runs / q.one_env:.2f}x)")


if __name__ == "__main__":
    main()

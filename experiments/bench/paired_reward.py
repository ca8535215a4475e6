"""Benchmark: what the paired reward costs, RadixAuction-v1's steps per second with reward "cost"
(one market) and "paired" (the learner's market and the reference's shadow) side by side.

    python -m experiments.bench.paired_reward [--steps N] [--blocks K] [--seed S]

A random policy (the action space's samples, seeded) acts in both; the two envs play the same
episodes (resets seeded `seed`, `seed + 1`, ...). The steps are cut into K blocks played in turn,
"cost" then "paired", so that a slow stretch of a shared machine slows both. Resets are timed
with the steps (the paired reward resets the shadow too).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

import auction_gym  # noqa: F401  (registers RadixAuction-v1)

from . import Table

REWARDS = ("cost", "paired")


class _Runner:
    """One env played by a seeded random policy, resumable block by block."""

    def __init__(self, reward: str, seed: int) -> None:
        self.env = gym.make("RadixAuction-v1", reward=reward)
        self.env.action_space.seed(seed)
        self.seed, self.seconds, self.steps = seed, 0.0, 0
        self._done = True

    def run(self, steps: int) -> None:
        env, start = self.env, time.perf_counter()
        for _ in range(steps):
            if self._done:
                env.reset(seed=self.seed)
                self.seed += 1
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            self._done = terminated or truncated
        self.seconds += time.perf_counter() - start
        self.steps += steps


def measure(steps: int, blocks: int, seed: int) -> dict[str, _Runner]:
    """Each reward's runner after `steps` steps in `blocks` blocks played in turn."""
    runners = {reward: _Runner(reward, seed) for reward in REWARDS}
    for _ in range(blocks):
        for runner in runners.values():
            runner.run(steps // blocks)
    return runners


def table(quick: bool) -> Table:
    """The page's table: 4,000 steps per reward in 4 blocks (quick: 200 in 2)."""
    steps, blocks = (200, 2) if quick else (4000, 4)
    runners = measure(steps, blocks, seed=0)
    base = runners["cost"].seconds / runners["cost"].steps
    rows = []
    for reward, r in runners.items():
        per = r.seconds / r.steps
        rows.append((reward, f"{r.steps:,}", f"{1 / per:,.0f}", f"{per * 1e3:.3f}", f"{per / base:.2f}x"))
    return Table(("reward", "steps", "steps/s", "ms per step", "x cost"), rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000, help="steps per reward (default 4000: 20 episodes)")
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    runners = measure(args.steps, args.blocks, args.seed)
    base = runners["cost"].seconds / runners["cost"].steps
    print("| reward | steps | steps/s | ms per step | x cost |")
    print("|--------|-------|---------|-------------|--------|")
    for reward, r in runners.items():
        per = r.seconds / r.steps
        print(f"| {reward} | {r.steps} | {1 / per:,.0f} | {per * 1e3:.3f} | {per / base:.2f} |")


if __name__ == "__main__":
    main()

"""Benchmark: RadixAuction-v0 steps per second, and the env's share of SB3 PPO's time per step.

    python -m experiments.bench_env [--steps N] [--ppo-steps N]

Measured in one run on the default configuration: the env alone (random actions, resets included)
and PPO (MlpPolicy, CPU, default n_steps = 2048) learning on the same env. Target: env time per step
at most 25% of PPO's time per step, so training is bound by learning, not by the environment.

A step costs more when the queue is long (the auction runs over the whole queue), and in the
default scenario episodes differ widely (mean queue from under 1 to over 20), so the env is timed
over many episodes: the default 20,000 steps are 40.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import auction_gym  # noqa: F401  (registers RadixAuction-v0)


def env_seconds_per_step(steps: int, seed: int = 0) -> tuple[float, float]:
    """(seconds per step including resets, mean queue length) over `steps` random-action steps."""
    env = gym.make("RadixAuction-v0")
    actions = np.random.default_rng(seed).uniform(0.0, 2.0, size=(steps, 1)).astype(np.float32)
    env.reset(seed=seed)
    queue = []
    t0 = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        queue.append(len(env.unwrapped.market.engine.waiting))
        if terminated or truncated:
            env.reset()
    return (time.perf_counter() - t0) / steps, float(np.mean(queue))


def ppo_seconds_per_step(steps: int, seed: int = 0) -> float:
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", gym.make("RadixAuction-v0"), seed=seed, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--ppo-steps", type=int, default=4096)
    args = ap.parse_args()
    env_s, queue = env_seconds_per_step(args.steps)
    ppo_s = ppo_seconds_per_step(args.ppo_steps)
    print(f"env:  {1 / env_s:8.0f} steps/s  ({env_s * 1e3:.3f} ms/step, mean queue {queue:.1f}, resets included)")
    print(f"PPO:  {1 / ppo_s:8.0f} steps/s  ({ppo_s * 1e3:.3f} ms/step, env included)")
    print(f"env share of PPO's time per step: {env_s / ppo_s:.1%} (target <= 25%)")


if __name__ == "__main__":
    main()

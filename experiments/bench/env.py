"""Benchmark: RadixAuction-v0 steps per second, and the env's share of SB3 PPO's time per step.

    python -m experiments.bench.env [--steps N] [--ppo-steps N] [--mechanism NAME]

Measured in one run on the default configuration: the env alone (random actions, resets included)
and PPO (MlpPolicy, CPU, default n_steps = 2048, one torch thread as training runs it) learning on
the same env. Target: env time per step
at most 25% of PPO's time per step, so training is bound by learning, not by the environment.

A step costs more when the queue is long (the auction runs over the whole queue), and in the
default scenario episodes differ widely (mean queue from under 1 to over 20), so the env is timed
over many episodes: the default 20,000 steps are 40, and PPO's default 20,480 steps (ten rollouts
of 2,048) play the same 40 workloads, with its own actions. (The first 8 alone are heavier, mean
queue about 24, so a shorter PPO run is not comparable with the env's figure.)

Every figure is printed twice: in wall time, and in the process's CPU time, which a busy machine
inflates far less (both loops run on one thread: PPO is given one torch thread), so the CPU
share is the one to compare across runs on a shared machine.

The env's own time inside PPO's run is printed too, measured by a wrapper around it: there a step
costs about 0.02 ms more than alone (0.170-0.179 against 0.151-0.157 ms at about the same mean
queue, on 2 cores). An env that runs no auction pays a similar extra (`--mechanism fcfs`: 0.077 ms
alone, 0.092 ms inside), so it is the price of alternating with the policy's torch code, not of the
env's work: presumably the CPU caches refilled at every step.
"""

from __future__ import annotations

import argparse
import time
from typing import NamedTuple

import gymnasium as gym
import numpy as np

import auction_gym  # noqa: F401  (registers RadixAuction-v0)


class Seconds(NamedTuple):
    """Seconds per step, in wall time and in the process's CPU time."""

    wall: float
    cpu: float


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _per_step(start: tuple[float, float], steps: int) -> Seconds:
    wall, cpu = _clocks()
    return Seconds((wall - start[0]) / steps, (cpu - start[1]) / steps)


def env_seconds_per_step(steps: int, seed: int = 0, mechanism: str = "radix_vcg") -> tuple[Seconds, float]:
    """(seconds per step including resets, mean queue length) over `steps` random-action steps."""
    env = gym.make("RadixAuction-v0", mechanism=mechanism)
    space = env.action_space  # uniform over it: multipliers uniform over [0, 2] in either action type
    actions = np.random.default_rng(seed).uniform(space.low, space.high, size=(steps, 1)).astype(np.float32)
    env.reset(seed=seed)
    queue = []
    t0 = _clocks()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        queue.append(len(env.unwrapped.market.engine.waiting))
        if terminated or truncated:
            env.reset()
    return _per_step(t0, steps), float(np.mean(queue))


class _Timed(gym.Wrapper):
    """Accumulates the wall and CPU time of every step and reset of the wrapped env, and counts the
    steps and the waiting requests after each."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.wall = self.cpu = 0.0
        self.steps = self.queued = 0

    def _add(self, start: tuple[float, float]) -> None:
        wall, cpu = _clocks()
        self.wall += wall - start[0]
        self.cpu += cpu - start[1]

    def step(self, action):
        t0 = _clocks()
        out = self.env.step(action)
        self._add(t0)
        self.steps += 1
        self.queued += len(self.env.unwrapped.market.engine.waiting)
        return out

    def reset(self, **kwargs):
        t0 = _clocks()
        out = self.env.reset(**kwargs)
        self._add(t0)
        return out


def ppo_seconds_per_step(steps: int, seed: int = 0, mechanism: str = "radix_vcg",
                         torch_threads: int | None = 1) -> tuple[Seconds, Seconds, float]:
    """(PPO's seconds per step, the env's seconds per step inside that run, mean queue there), PPO
    on `torch_threads` threads (None: PyTorch's default, a thread per core)."""
    from stable_baselines3 import PPO

    from agents.training import set_torch_threads

    set_torch_threads(torch_threads)

    env = _Timed(gym.make("RadixAuction-v0", mechanism=mechanism))
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0)
    t0 = _clocks()
    model.learn(total_timesteps=steps)
    return _per_step(t0, steps), Seconds(env.wall / env.steps, env.cpu / env.steps), env.queued / env.steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--ppo-steps", type=int, default=20480)
    ap.add_argument("--mechanism", default="radix_vcg", help="the env's mechanism (default: the default scenario's)")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="PyTorch threads for PPO (default 1, as `train` and `compare` run it; 0: PyTorch's default)")
    args = ap.parse_args()
    env_s, queue = env_seconds_per_step(args.steps, mechanism=args.mechanism)
    ppo_s, inside_s, inside_queue = ppo_seconds_per_step(args.ppo_steps, mechanism=args.mechanism,
                                                         torch_threads=args.torch_threads or None)
    print(f"env:  {1 / env_s.wall:8.0f} steps/s  ({env_s.wall * 1e3:.3f} ms/step, {env_s.cpu * 1e3:.3f} ms of CPU; "
          f"mean queue {queue:.1f}, resets included)")
    print(f"PPO:  {1 / ppo_s.wall:8.0f} steps/s  ({ppo_s.wall * 1e3:.3f} ms/step, {ppo_s.cpu * 1e3:.3f} ms of CPU; "
          "env included)")
    print(f"env share of PPO's time per step: {env_s.wall / ppo_s.wall:.1%} wall, {env_s.cpu / ppo_s.cpu:.1%} CPU "
          "(target <= 25%)")
    print(f"inside PPO's run the env took {inside_s.wall * 1e3:.3f} ms/step (mean queue {inside_queue:.1f}), "
          f"{inside_s.wall / ppo_s.wall:.1%} of PPO's time ({inside_s.cpu / ppo_s.cpu:.1%} of its CPU)")

if __name__ == "__main__":
    main()

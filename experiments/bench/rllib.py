"""Benchmark: environment steps per second, RLlib PPO with 0, 1 and 2 env runners against SB3
PPO in one process, on the same scenario and PPO settings.

    python -m experiments.bench.rllib [--iterations N] [--runners 0,1,2] [--env-kwargs JSON]

One environment step is one auction round (every bidder bids once), in both: RLlib steps the
PettingZoo env with every bidder on the learned policy; SB3 steps `RadixAuction-v0`, one learned
bidder and three OGD bidders. Both use `agents.rllib.sb3_ppo_settings` (ppo.yml: 1,024 steps per
update, minibatches of 64, 10 epochs; SB3 also normalizes as ppo.yml says), RLlib with one policy
shared by all bidders, so its update learns from 4 samples per step where SB3's learns from 1.

Two rates per setup, after one warm-up iteration (not timed):
- sampling: steps per second of collecting a batch alone (RLlib: `synchronous_parallel_sample`
  over the env runners, what PPO's training step calls; SB3: the time between a rollout's start
  and end);
- training: steps per second of whole iterations, sampling plus the update.

Ray is started here with all cores of the machine (`--num-cpus`), no dashboard.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import ray
import torch
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback

from agents.rllib import ppo_config
from agents.sb3 import algo_kwargs, load_hyperparams, make_env, normalize_kwargs
from auction_gym.envs.parallel_env import parallel_kwargs
from auction_gym.scenarios import DEFAULT_SCENARIO, scenario

from . import Table

SCENARIO = scenario(DEFAULT_SCENARIO)
"""compare's default scenario (`--scenario`), the env kwargs benchmarked by default."""


def rllib_rates(env_kwargs: dict, runners: int, iterations: int) -> tuple[float, float]:
    """(sampling, training) env steps per second of RLlib PPO with `runners` env runners, on the
    PettingZoo env with the arguments of `env_kwargs` it takes (not the single-agent reward)."""
    algo = ppo_config(parallel_kwargs(env_kwargs), "shared", runners).build_algo()
    try:
        start = algo.train()["num_env_steps_sampled_lifetime"]  # warm-up: actors started, first update run
        t0 = time.perf_counter()
        for _ in range(iterations):
            end = algo.train()["num_env_steps_sampled_lifetime"]
        training = (end - start) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        episodes = synchronous_parallel_sample(worker_set=algo.env_runner_group, _uses_new_env_runners=True,
                                               max_env_steps=algo.config.train_batch_size_per_learner * iterations)
        return sum(len(e) for e in episodes) / (time.perf_counter() - t0), training
    finally:
        algo.stop()


class _RolloutClock(BaseCallback):
    """Wall time spent collecting rollouts, and the steps collected, after the first rollout."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds, self.steps, self._rollouts, self._t0, self._n0 = 0.0, 0, 0, 0.0, 0

    def _on_rollout_start(self) -> None:
        self._t0, self._n0 = time.perf_counter(), self.num_timesteps

    def _on_rollout_end(self) -> None:
        self._rollouts += 1
        if self._rollouts > 1:
            self.seconds += time.perf_counter() - self._t0
            self.steps += self.num_timesteps - self._n0

    def _on_step(self) -> bool:
        return True


def sb3_rates(env_kwargs: dict, iterations: int) -> tuple[float, float]:
    """(sampling, training) env steps per second of SB3 PPO as `radix-auction train --algo ppo`
    sets it up (agents/hyperparams/ppo.yml, VecNormalize), one process."""
    hp = load_hyperparams("ppo")
    model = PPO("MlpPolicy", make_env(env_kwargs, 1, 0, normalize_kwargs(hp)), device="cpu", verbose=0,
                **algo_kwargs(hp))
    clock = _RolloutClock()
    model.learn(model.n_steps, callback=clock)  # warm-up rollout and update
    t0 = time.perf_counter()
    model.learn(model.n_steps * iterations, callback=clock, reset_num_timesteps=False)
    return clock.steps / clock.seconds, model.n_steps * iterations / (time.perf_counter() - t0)


def table(quick: bool) -> Table:
    """The page's table: 3 timed iterations per setup, 0, 1 and 2 env runners, every core (quick:
    one iteration, 0 runners)."""
    iterations, counts = (1, (0,)) if quick else (3, (0, 1, 2))
    torch.set_num_threads(1)
    sb3 = sb3_rates(SCENARIO, iterations)
    rows = [("SB3 PPO, one process", f"{sb3[0]:,.0f}", f"{sb3[1]:,.0f}", "1.00x")]
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        for runners in counts:
            sampling, training = rllib_rates(SCENARIO, runners, iterations)
            rows.append((f"RLlib PPO, {runners} env runner(s)", f"{sampling:,.0f}", f"{training:,.0f}",
                         f"{training / sb3[1]:.2f}x"))
    finally:
        ray.shutdown()
    return Table(("setup", "sampling steps/s", "training steps/s", "training x SB3"), rows,
                 [f"{iterations} timed iteration(s) of 1,024 steps per setup after a warm-up one."])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=3, help="timed iterations of 1,024 steps per setup (default 3)")
    ap.add_argument("--runners", default="0,1,2", help="env runner counts for RLlib (default 0,1,2)")
    ap.add_argument("--num-cpus", type=int, default=os.cpu_count(), help="cores of the local Ray (default: all)")
    ap.add_argument("--env-kwargs", type=json.loads, default=SCENARIO,
                    help=f"scenario (default compare's: {json.dumps(SCENARIO)})")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()[0]:.2f}; scenario {json.dumps(args.env_kwargs)}", flush=True)
    sampling, training = sb3_rates(args.env_kwargs, args.iterations)
    print(f"SB3 PPO, one process:   sampling {sampling:7.0f} steps/s, training {training:6.0f} steps/s", flush=True)
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        for runners in (int(r) for r in args.runners.split(",")):
            sampling, training = rllib_rates(args.env_kwargs, runners, args.iterations)
            print(f"RLlib PPO, {runners} env runner(s): sampling {sampling:7.0f} steps/s, training {training:6.0f} "
                  f"steps/s", flush=True)
    finally:
        ray.shutdown()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

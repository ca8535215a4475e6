"""Benchmark: RadixAuction-v0 steps per second, and the env's share of SB3 PPO's time per step.

    python -m experiments.bench.env [--steps N] [--ppo-steps N] [--blocks K] [--repeats R] [--env ID]
                                    [--mechanism NAME] [--no-floor]

Measured in one run on the default configuration: the env alone (random actions, resets included)
and PPO (MlpPolicy, CPU, default n_steps = 2048, one torch thread as training runs it) learning on
the same env. Target: env time per step at most 25% of PPO's time per step, so training is bound
by learning, not by the environment.

A step costs more when the queue is long (the auction runs over the whole queue), and in the
default scenario episodes differ widely (mean queue from under 1 to over 20), so the env is timed
over many episodes: the default 20,000 steps are 40, and PPO's default 20,480 steps (ten rollouts
of 2,048) play the same 40 workloads, with its own actions. (The first 8 alone are heavier, mean
queue about 24, so a shorter PPO run is not comparable with the env's figure.)

`--blocks K` cuts the two runs into K blocks played in turn, env alone then PPO, so that a slow
stretch of a shared machine slows both rather than one. The blocks continue one run each (the env
is not reset between its blocks; PPO learns on with `reset_num_timesteps` False, whole rollouts per
block), so the work is that of the two runs. It is not the default: on a quiet machine the env
alone ran 0.41-0.47 ms a step between PPO's blocks against 0.37-0.39 ms before any PPO, the
slowdown the env also shows inside PPO's run, so blocks measure the env in another state, not with
less noise alone. Each block's
times are printed, then the totals, which alone compare like with like.

Then the floor: the same env alone under FCFS, which runs no auction and charges nothing (the
engine, the market's accounting, the observations and the other bidders' policies), over the same
steps, with its share of the same PPO step. No speed-up of the auction can bring the share below
it. The figures measured are on the documentation's benchmarks page.
`--no-floor` skips the floor.

Then batches (`--batched 8,64`, `--batch-rounds 500`): the same N episodes played by one env
after another, by N envs in Gymnasium's SyncVectorEnv and as one `MarketBatch`
(`auction_gym.envs.batch`), per env step. The batch steps its envs in turn, as SyncVectorEnv
does, and batches their infos into Gymnasium's arrays a key at a time. N markets stepped in turn
cost more per step than one market stepped N episodes in a row, and the more so the larger N
(`--batched 1,4,16,64`): each market's data, in Python's objects and the compiled core's, leaves
the CPU's caches while the other N - 1 step, so the same calls take longer (the compiled round of
the radix auction about three times as long at N = 64). Most of that data is the waiting
requests, which every step reads (`experiments.bench.queue` splits the cost by queue length,
and steps the same markets in runs of rounds, which mostly brings each step's cost near one env's).
Python's garbage collector is not the cause: the same runs with it disabled are no faster. A core
whose per-step work did not grow with the queue, or kept each market's requests compact, is what
would change it.

`--repeats R` measures R times, each from the same seeds (the same work), and reports the best
time of each part (the env alone, PPO, the floor), as `bench.mechanism` reports the best of its
repeats, with each repeat's figures above. A small machine's speed can drift within minutes
(PPO's step 0.87-1.37 ms in one hour on a 2-core one, nothing else running), and a single run pairs
the env and PPO from whichever stretches they fell in; the best of each is the figure least moved
by that, for both parts alike.

Every figure is given in wall time and in the process's CPU time, which other processes inflate
less (both loops run on one thread: PPO is given one torch thread).

The env's own time inside PPO's run is printed too, measured by a wrapper around it: there a step
costs more than alone (0.48-0.63 against 0.35-0.47 ms), and so does an env that runs no auction
(`--mechanism fcfs`: 0.077 ms alone, 0.092 ms inside), so it is the price of
alternating with the policy's torch code, not of the env's work: presumably the CPU caches refilled
at every step.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from functools import partial

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from auction_gym import RadixAuctionVectorEnv

from . import Table


@dataclass(frozen=True)
class Seconds:
    """Seconds, in wall time and in the process's CPU time."""

    wall: float
    cpu: float

    def __add__(self, other: Seconds) -> Seconds:
        return Seconds(self.wall + other.wall, self.cpu + other.cpu)

    def per(self, steps: int) -> Seconds:
        return Seconds(self.wall / steps, self.cpu / steps)


def _clocks() -> Seconds:
    return Seconds(time.perf_counter(), time.process_time())


def _since(start: Seconds) -> Seconds:
    now = _clocks()
    return Seconds(now.wall - start.wall, now.cpu - start.cpu)


class EnvAlone:
    """The env stepped with random actions (uniform over the action space), resets included."""

    def __init__(self, steps: int, seed: int = 0, mechanism: str = "radix_vcg", env_id: str = "RadixAuction-v0") -> None:
        self.env = gym.make(env_id, mechanism=mechanism)
        space = self.env.action_space  # multipliers uniform over [0, 2] in either action type
        self.actions = iter(np.random.default_rng(seed).uniform(space.low, space.high, size=(steps, 1))
                            .astype(np.float32))
        self.env.reset(seed=seed)

    def run(self, steps: int) -> tuple[Seconds, int]:
        """Play the next `steps` steps: (their time, the waiting requests summed over them)."""
        env, queued = self.env, 0
        start = _clocks()
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(next(self.actions))
            queued += len(env.unwrapped.market.engine.waiting)
            if terminated or truncated:
                env.reset()
        return _since(start), queued


class _Timed(gym.Wrapper):
    """Accumulates the time of every step and reset of the wrapped env, and counts the steps and
    the waiting requests after each."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.seconds = Seconds(0.0, 0.0)
        self.steps = self.queued = 0

    def step(self, action):
        start = _clocks()
        out = self.env.step(action)
        self.seconds += _since(start)
        self.steps += 1
        self.queued += len(self.env.unwrapped.market.engine.waiting)
        return out

    def reset(self, **kwargs):
        start = _clocks()
        out = self.env.reset(**kwargs)
        self.seconds += _since(start)
        return out


class PPORun:
    """SB3 PPO learning on the env, on `torch_threads` threads (None: PyTorch's default, a thread
    per core); `env` is the env (`env_id`) as PPO sees it, timed."""

    def __init__(self, seed: int = 0, mechanism: str = "radix_vcg", torch_threads: int | None = 1,
                 env_id: str = "RadixAuction-v0") -> None:
        from stable_baselines3 import PPO

        from agents.training import set_torch_threads

        set_torch_threads(torch_threads)
        self.env = _Timed(gym.make(env_id, mechanism=mechanism))
        self.model = PPO("MlpPolicy", self.env, seed=seed, device="cpu", verbose=0)

    def run(self, steps: int) -> Seconds:
        """Learn `steps` more steps (whole rollouts: a multiple of n_steps); returns their time."""
        start = _clocks()
        self.model.learn(total_timesteps=steps, reset_num_timesteps=self.model.num_timesteps == 0)
        return _since(start)


BATCH_WAYS = ("one env after another", "SyncVectorEnv", "one MarketBatch")
"""The ways `batched` plays the same episodes."""


def uniform_plays(space: gym.spaces.Box, rounds: int, n: int, seed: int) -> np.ndarray:
    """Seeded uniform actions of `space` (one dimension), shape (rounds, n, 1): round t's action of
    episode i at [t, i]."""
    return np.random.default_rng(seed).uniform(space.low, space.high, size=(rounds, n, 1)).astype(np.float32)


def batched(n: int, rounds: int, seed: int = 0, mechanism: str = "radix_vcg", env_id: str = "RadixAuction-v0",
            ways: tuple[str, ...] = BATCH_WAYS) -> dict[str, Seconds]:
    """Per env step, the same work up to three ways (`ways`, of BATCH_WAYS): `n` episodes of `env_id`
    (seeds `seed`..`seed + n - 1`, random actions, `rounds` rounds each, resets included) played by
    one env after another, by `n` envs in Gymnasium's `SyncVectorEnv`, and as one `MarketBatch`
    (Gymnasium's face); both vector envs reset as SAME_STEP, as the single env resets after an
    episode ends."""
    plays = uniform_plays(gym.make(env_id).action_space, rounds, n, seed)
    make = partial(gym.make, env_id, mechanism=mechanism)
    times = {}
    if BATCH_WAYS[0] in ways:
        env = make()
        start = _clocks()
        for i in range(n):
            env.reset(seed=seed + i)
            for t in range(rounds):
                _, _, terminated, truncated, _ = env.step(plays[t, i])
                if terminated or truncated:
                    env.reset()  # unseeded: the env's generator goes on, as the vector envs' do
        times[BATCH_WAYS[0]] = _since(start).per(n * rounds)
    vectors = {BATCH_WAYS[1]: lambda: SyncVectorEnv([make] * n, autoreset_mode=AutoresetMode.SAME_STEP),
               BATCH_WAYS[2]: lambda: RadixAuctionVectorEnv([make] * n, AutoresetMode.SAME_STEP)}
    for name in (w for w in BATCH_WAYS[1:] if w in ways):
        vector = vectors[name]()
        start = _clocks()
        vector.reset(seed=seed)
        for t in range(rounds):
            vector.step(plays[t])
        times[name] = _since(start).per(n * rounds)
        vector.close()
    return times


def _share(env: Seconds, ppo: Seconds) -> str:
    return f"{env.wall / ppo.wall:6.1%} wall {env.cpu / ppo.cpu:6.1%} CPU"


@dataclass(frozen=True)
class Measured:
    """One measurement: per-step times of the env alone, of PPO (env included) and of the env
    inside PPO's run, with the mean waiting queues."""

    env: Seconds
    ppo: Seconds
    inside: Seconds
    queued: float
    inside_queued: float


def measure(args: argparse.Namespace) -> Measured:
    """The env alone, then PPO, each from its seed (so every repeat does the same work), in
    `args.blocks` blocks played in turn."""
    env_block, ppo_block = args.steps // args.blocks, args.ppo_steps // args.blocks
    alone = EnvAlone(args.steps, mechanism=args.mechanism, env_id=args.env)
    ppo = PPORun(mechanism=args.mechanism, torch_threads=args.torch_threads or None, env_id=args.env)
    env_s = ppo_s = Seconds(0.0, 0.0)
    queued = 0
    for block in range(args.blocks):
        e, q = alone.run(env_block)
        ppo_queued = ppo.env.queued
        p = ppo.run(ppo_block)
        env_s, ppo_s, queued = env_s + e, ppo_s + p, queued + q
        if args.blocks > 1:  # blocks play different stretches of the workload: only totals compare
            print(f"  block {block + 1}: env {e.per(env_block).wall * 1e3:.3f} ms/step (mean queue "
                  f"{q / env_block:.1f}), PPO {p.per(ppo_block).wall * 1e3:.3f} ms/step (mean queue "
                  f"{(ppo.env.queued - ppo_queued) / ppo_block:.1f})")
    return Measured(env_s.per(args.steps), ppo_s.per(args.ppo_steps), ppo.env.seconds.per(ppo.env.steps),
                    queued / args.steps, ppo.env.queued / ppo.env.steps)


BATCH_SIZES = (8, 64)
"""The batches of envs the page's table times beside one env (`batched`)."""


def _best(times: list[Seconds]) -> Seconds:
    return Seconds(min(t.wall for t in times), min(t.cpu for t in times))


def table(quick: bool) -> Table:
    """The page's table: the defaults (20,000 env steps, 20,480 PPO steps, one block, one torch
    thread) and the floor (quick: 2,000 and 2,048)."""
    steps, ppo_steps = (2000, 2048) if quick else (20000, 20480)
    m = measure(argparse.Namespace(steps=steps, ppo_steps=ppo_steps, blocks=1, mechanism="radix_vcg",
                                   torch_threads=1, env="RadixAuction-v0"))
    floor, floor_queued = EnvAlone(steps, mechanism="fcfs").run(steps)
    parts = [("env alone", m.env, f"{m.queued:.1f}"), ("PPO, env included", m.ppo, ""),
             ("env inside PPO's run", m.inside, f"{m.inside_queued:.1f}"),
             ("floor: env alone under FCFS", floor.per(steps), f"{floor_queued / steps:.1f}")]
    rows = [(name, f"{s.wall * 1e3:.3f}", f"{s.cpu * 1e3:.3f}", f"{s.wall / m.ppo.wall:.1%}", queue)
            for name, s, queue in parts]
    share = m.env.wall / m.ppo.wall
    rounds = 50 if quick else 500
    notes = [f"{steps:,} env steps, {ppo_steps:,} PPO steps; the env's share {share:.1%} "
             f"({'met' if share <= 0.25 else 'not met'}: target at most 25%)."]
    for n in BATCH_SIZES:
        times = batched(n, rounds)
        rows += [(f"{n} envs: {name}, per env step", f"{s.wall * 1e3:.3f}", f"{s.cpu * 1e3:.3f}",
                  f"{s.wall / m.ppo.wall:.1%}", "") for name, s in times.items()]
        notes.append(f"{n} envs: {rounds} rounds each, the same episodes three ways; one MarketBatch's throughput "
                     f"per env {times['one env after another'].wall / times['one MarketBatch'].wall:.2f}x one env's.")
    return Table(("part", "ms per step (wall)", "ms per step (CPU)", "share of PPO's step", "mean queue"), rows,
                 notes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--ppo-steps", type=int, default=20480)
    ap.add_argument("--blocks", type=int, default=1,
                    help="blocks played in turn (default 1: the env, then PPO); --ppo-steps / blocks must be a "
                         "multiple of 2048")
    ap.add_argument("--repeats", type=int, default=1,
                    help="measurements, each from the same seeds; the best time of each part is reported (default 1)")
    ap.add_argument("--env", default="RadixAuction-v0", help="the registered env timed (default %(default)s)")
    ap.add_argument("--mechanism", default="radix_vcg", help="the env's mechanism (default: the default scenario's)")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="PyTorch threads for PPO (default 1, as `train` and `compare` run it; 0: PyTorch's default)")
    ap.add_argument("--no-floor", action="store_true", help="skip the floor (the env alone under FCFS)")
    ap.add_argument("--batched", default=",".join(map(str, BATCH_SIZES)),
                    help="comma-separated batch sizes N to time as one MarketBatch beside N envs one after another "
                         "(default %(default)s; empty: none)")
    ap.add_argument("--batch-rounds", type=int, default=500, help="rounds each env of a batch plays (default 500)")
    args = ap.parse_args()
    n_steps = 2048  # PPO's default rollout
    if args.blocks < 1 or args.steps % args.blocks or args.ppo_steps % (args.blocks * n_steps):
        ap.error(f"--steps must divide into --blocks and --ppo-steps into blocks of whole {n_steps}-step rollouts")
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    runs, floors = [], []
    for k in range(args.repeats):
        m = measure(args)
        runs.append(m)
        line = (f"env {m.env.wall * 1e3:.3f} ms/step, PPO {m.ppo.wall * 1e3:.3f} ms/step, "
                f"share {m.env.wall / m.ppo.wall:.1%}")
        if not args.no_floor and args.mechanism != "fcfs":
            floor, floor_queued = EnvAlone(args.steps, mechanism="fcfs", env_id=args.env).run(args.steps)
            floors.append(floor.per(args.steps))
            line += f"; floor {floors[-1].wall * 1e3:.3f} ms/step, {floors[-1].wall / m.ppo.wall:.1%}"
        if args.repeats > 1:
            print(f"repeat {k + 1}: {line}")
    env_s, ppo_s, inside = _best([m.env for m in runs]), _best([m.ppo for m in runs]), _best([m.inside for m in runs])
    best = " (best of each part over the repeats)" if args.repeats > 1 else ""
    print(f"env:  {1 / env_s.wall:8.0f} steps/s  ({env_s.wall * 1e3:.3f} ms/step, {env_s.cpu * 1e3:.3f} ms of CPU; "
          f"mean queue {runs[0].queued:.1f}, resets included){best}")
    print(f"PPO:  {1 / ppo_s.wall:8.0f} steps/s  ({ppo_s.wall * 1e3:.3f} ms/step, {ppo_s.cpu * 1e3:.3f} ms of CPU; "
          f"env included)")
    print(f"env share of PPO's time per step: {_share(env_s, ppo_s)} (target <= 25%)")
    print(f"inside PPO's run the env took {inside.wall * 1e3:.3f} ms/step (mean queue "
          f"{runs[0].inside_queued:.1f}), {_share(inside, ppo_s)} of PPO's time")
    if floors:
        floor = _best(floors)
        print(f"floor, the env alone under FCFS (no auction, no charges): {floor.wall * 1e3:.3f} ms/step "
              f"(mean queue {floor_queued / args.steps:.1f}), {_share(floor, ppo_s)} of PPO's time")
    for n in (int(x) for x in args.batched.split(",") if x):
        times = batched(n, args.batch_rounds, mechanism=args.mechanism, env_id=args.env)
        print(f"{n} envs x {args.batch_rounds} rounds, per env step: " + ", ".join(
            f"{name} {s.wall * 1e3:.3f} ms ({s.cpu * 1e3:.3f} of CPU)" for name, s in times.items()))


if __name__ == "__main__":
    main()

"""Benchmark: SB3 PPO steps per second on RadixAuction-v0 with 1 and 2 torch threads, on an idle
machine and with one other busy process.

    python -m experiments.bench.threads [--steps N] [--repeats R] [--threads 1,2]

Each measurement trains a fresh PPO (MlpPolicy, CPU, `agents/hyperparams/ppo.yml`'s n_steps of 1,024)
for `--steps` steps in this process after `torch.set_num_threads(t)`; the "busy" rows run a Python
busy loop in a second process meanwhile (what another training or test job does to a shared
machine). Thread counts alternate within each repeat so that both see the same background load.
The load average (1 min) is printed beside every figure: on a shared machine "idle" means only
this benchmark and whatever else runs. Why it matters: PyTorch starts one thread per core, and its
threads spin-wait for each other, so when a core is taken a small network's every forward and
backward pass waits for a descheduled thread; training processes therefore default to one thread
(`TrainConfig.torch_threads`, `--torch-threads`).

The figures it measured are on the documentation's "Runs, outputs and errors" page.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import gymnasium as gym
import torch

import auction_gym  # noqa: F401  (registers RadixAuction-v0)

from . import Table


def busy_loop() -> str:
    """A busy process's code: it spins until this process is gone, so a benchmark killed mid-run
    leaves no spinning orphan behind."""
    return f"import os\nwhile os.getppid() == {os.getpid()}: pass"


def ppo_steps_per_second(steps: int, threads: int, seed: int = 0, n_steps: int = 1024) -> float:
    """Environment steps per second of PPO learning `steps` steps with `threads` torch threads, in
    rollouts of `n_steps`."""
    from stable_baselines3 import PPO

    torch.set_num_threads(threads)
    model = PPO("MlpPolicy", gym.make("RadixAuction-v0"), n_steps=n_steps, seed=seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return steps / (time.perf_counter() - start)


def measure(steps: int, repeats: int, threads: list[int], busy: bool,
            n_steps: int = 1024) -> dict[int, list[tuple[float, float]]]:
    """{threads: [(steps/s, 1-minute load average after the run)] x repeats}, with a busy process
    running beside them when `busy`; PPO's rollouts of `n_steps`."""
    other = subprocess.Popen([sys.executable, "-c", busy_loop()]) if busy else None
    try:
        out: dict[int, list[tuple[float, float]]] = {t: [] for t in threads}
        for _ in range(repeats):
            for t in threads:
                out[t].append((ppo_steps_per_second(steps, t, n_steps=n_steps), os.getloadavg()[0]))
        return out
    finally:
        if other is not None:
            other.kill()
            other.wait()


def table(quick: bool) -> Table:
    """The page's table: 2,048 steps per run in rollouts of 1,024, 3 runs per setting, 1 and 2
    threads (quick: one rollout of 256 steps, one run)."""
    steps, n_steps, repeats = (256, 256, 1) if quick else (2048, 1024, 3)
    rows = []
    for busy in (False, True):
        runs = measure(steps, repeats, [1, 2], busy, n_steps)
        one = max(rate for rate, _ in runs[1])
        for t, measured in runs.items():
            rates, loads = [r for r, _ in measured], [load for _, load in measured]
            rows.append(("one busy process" if busy else "none", str(t), f"{min(rates):,.0f}-{max(rates):,.0f}",
                         f"{max(rates) / one:.2f}x", f"{min(loads):.1f}-{max(loads):.1f}"))
    return Table(("background", "torch threads", "PPO steps/s (range)", "best x one thread's", "load average (1 min)"),
                 rows, [f"{os.cpu_count()} CPUs; {steps:,} steps per run in rollouts of {n_steps:,}, "
                        f"{repeats} run(s) per setting."])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2048, help="PPO steps per measurement (default 2048)")
    ap.add_argument("--repeats", type=int, default=3, help="measurements per setting (default 3)")
    ap.add_argument("--threads", default="1,2", help="torch thread counts, comma-separated (default 1,2)")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    print(f"{os.cpu_count()} CPUs; PPO, {args.steps} steps per run, {args.repeats} runs per setting")
    print("| background | torch threads | PPO steps/s (range) | load average (1 min) |")
    print("|---|---|---|---|")
    for busy in (False, True):
        for t, runs in measure(args.steps, args.repeats, threads, busy).items():
            rates, loads = [r for r, _ in runs], [load for _, load in runs]
            print(f"| {'one busy process' if busy else 'none'} | {t} | {min(rates):,.0f}-{max(rates):,.0f} | "
                  f"{min(loads):.1f}-{max(loads):.1f} |", flush=True)


if __name__ == "__main__":
    main()

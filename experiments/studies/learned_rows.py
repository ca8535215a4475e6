"""The learned rows of `radix-auction compare` alone: train its runs and evaluate them, without the
headroom report or the baselines. What moves these rows between machines is floating point: the
training is seeded, but the order in which a CPU's kernels sum (their vector width, their threads)
differs between machines and changes the policy a long run ends with. Run this module twice with
different kernel settings on one machine to see how far the rows move, e.g.

    python -m experiments.studies.learned_rows --out a.csv
    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 python -m experiments.studies.learned_rows --out b.csv
    python -m experiments.studies.learned_rows --torch-threads 2 --out c.csv

(the second runs the AVX2 kernels of a CPU without AVX-512; the third splits reductions over two
threads). Each writes a row per training run: its mean utility (value units) over the evaluation
episodes, the `utility` of compare's `<algo>_s<seed>` rows, and compare's defaults are this
module's. Prints the kernel path torch uses, then the rows.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np

from agents.evaluation import DEFAULT_EVAL_SEED
from agents.training import TrainConfig, train
from auction_gym.scenarios import DEFAULT_SCENARIO, scenario

from ..argtypes import positive_int
from ..commands.compare import BUDGETS, DEFAULT_BUDGET, evaluate_policy
from ..executor import Executor


def learned_rows(algo: str, seeds: int, timesteps: int, episodes: int, logdir: Path, torch_threads: int,
                 executor: Executor) -> list[dict[str, object]]:
    """Each seed's run of compare at these sizes (the default scenario), trained and evaluated on
    compare's evaluation episodes: its mean utility (value units)."""
    env_kwargs = scenario(DEFAULT_SCENARIO)
    configs = [TrainConfig(algo=algo, logdir=logdir, timesteps=timesteps, seed=seed, env_kwargs=env_kwargs,
                           eval_seed=DEFAULT_EVAL_SEED, eval_episodes=episodes, progress=False,
                           torch_threads=torch_threads) for seed in range(seeds)]
    trained = executor.map(train, [(c,) for c in configs], cpus=torch_threads)
    metrics = executor.map(evaluate_policy, [(Path(r.model_path), env_kwargs, episodes, DEFAULT_EVAL_SEED,
                                              torch_threads) for r in trained])
    return [{"run": f"{c.algo}_s{c.seed}", "utility": float(np.mean([m["utility"] for m in ms]))}
            for c, ms in zip(configs, metrics)]


def main(argv: list[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--seeds", type=positive_int, default=BUDGETS[DEFAULT_BUDGET]["seeds"])
    parser.add_argument("--timesteps", type=positive_int, default=BUDGETS[DEFAULT_BUDGET]["timesteps"])
    parser.add_argument("--episodes", type=positive_int, default=BUDGETS[DEFAULT_BUDGET]["episodes"])
    parser.add_argument("--torch-threads", type=positive_int, default=1)
    parser.add_argument("--jobs", type=positive_int, default=2)
    parser.add_argument("--logdir", type=Path, default=Path("runs/learned_rows"))
    parser.add_argument("--out", type=Path, required=True, help="CSV of the rows")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, CPU kernels {torch.backends.cpu.get_cpu_capability()}, "
          f"{args.torch_threads} thread(s)", flush=True)
    start = time.perf_counter()
    rows = learned_rows(args.algo, args.seeds, args.timesteps, args.episodes, args.logdir, args.torch_threads,
                        Executor(args.jobs))
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(f"{row['run']}: utility {row['utility']!r}")
    print(f"wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()

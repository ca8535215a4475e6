"""Which action type and training reward does PPO learn best under? Chosen on tuning seeds only.

For each action type ("log", "delta", "residual") and training reward ("cost", "paired"), PPO is
trained from a fresh policy on the calibrated scenario (`RadixAuction-v1`'s market) for each of
`--seeds` training seeds, then it and its untrained start are scored on the tuning episodes (seeds
`agents.baselines.TUNING_SEED`.., never an evaluation seed), beside OGD and the tuned PI pacer on
the same episodes. Each configuration's row: the mean utility over seeds (95% CI over seeds), its
untrained start, its gain over that start, and its paired difference from OGD and from the PI
pacer. `RadixAuction-v1`'s default action type (`auction_gym.scenarios.V1_ACTION_TYPE`) and the
training reward of PPO's hyperparameters come from this table: the configuration with the best
mean utility on the tuning episodes.

    python -m experiments.studies.action_types --seeds 2 --timesteps 100000 --out results/action_types.md
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

from agents.baselines import TUNING_SEED
from agents.stats import format_ci, mean_ci
from agents.training import TrainConfig, train
from auction_gym.pacing import TUNED_PI, make_policy
from auction_gym.scenarios import V1_KWARGS

from ..argtypes import positive_int
from ..commands.compare import evaluate_policy
from ..executor import Executor

ACTION_TYPES = ("log", "delta", "residual")
REWARDS = ("cost", "paired")


def study(action_types: list[str], rewards: list[str], seeds: int, timesteps: int, episodes: int, logdir: Path,
          hyperparams: dict, executor: Executor) -> str:
    """Train every configuration and seed, score them on the tuning episodes; a markdown table."""
    configs = [(a, r, s) for a, r in itertools.product(action_types, rewards) for s in range(seeds)]
    runs = [TrainConfig(algo="ppo", logdir=logdir, timesteps=timesteps, seed=s, run_name=f"{a}_{r}_s{s}",
                        env_id="RadixAuction-v1",
                        env_kwargs={**V1_KWARGS, "action_type": a, "reward": r}, eval_seed=TUNING_SEED,
                        eval_episodes=min(episodes, 8), eval_freq=timesteps, hyperparams=hyperparams,
                        progress=False, torch_threads=1) for a, r, s in configs]
    trained = executor.map(train, [(c,) for c in runs])
    scoring = [(Path(p), {**V1_KWARGS, "action_type": c.env_kwargs["action_type"]}, episodes, TUNING_SEED, 1)
               for c, t in zip(runs, trained) for p in (t.model_path, t.initial_model_path)]
    references = {name: make_policy(spec) for name, spec in (("ogd", "ogd"), ("pid_tuned", TUNED_PI))}
    scoring += [(policy, dict(V1_KWARGS), episodes, TUNING_SEED, 1) for policy in references.values()]
    scores = [np.array([r["utility"] for r in results]) for results in executor.map(evaluate_policy, scoring)]
    ref = dict(zip(references, scores[2 * len(runs):]))
    lines = [f"PPO on the calibrated market, {seeds} seed(s) x {timesteps:,} steps, scored on tuning seeds "
             f"{TUNING_SEED}..{TUNING_SEED + episodes - 1} (mean utility, 95% CI over seeds); OGD "
             f"{ref['ogd'].mean():.1f}, PI pacer ({TUNED_PI}) {ref['pid_tuned'].mean():.1f} on the same episodes.", "",
             "| action type | training reward | start | trained | gain over start | vs ogd | vs pid_tuned |",
             "|---|---|---|---|---|---|---|"]
    for a, r in itertools.product(action_types, rewards):
        ks = [k for k, (ca, cr, _) in enumerate(configs) if (ca, cr) == (a, r)]
        final, start = [scores[2 * k] for k in ks], [scores[2 * k + 1] for k in ks]
        cells = [mean_ci([x.mean() for x in start]), mean_ci([x.mean() for x in final]),
                 mean_ci([(x - y).mean() for x, y in zip(final, start)]),
                 *(mean_ci([(x - ref[name]).mean() for x in final]) for name in ref)]
        lines.append(f"| {a} | {r} | " + " | ".join(format_ci(*c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from ..options import key_values

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--action-types", default=",".join(ACTION_TYPES))
    parser.add_argument("--rewards", default=",".join(REWARDS))
    parser.add_argument("--seeds", type=positive_int, default=2)
    parser.add_argument("--timesteps", type=positive_int, default=100_000)
    parser.add_argument("--episodes", type=positive_int, default=36, help="tuning episodes scored (seeds 0..)")
    parser.add_argument("--hyperparams", nargs="*", metavar="KEY=VALUE", default=[])
    parser.add_argument("--jobs", type=positive_int, default=2)
    parser.add_argument("--logdir", type=Path, default=Path("runs/action_types"))
    parser.add_argument("--out", type=Path, required=True, help="markdown file of the table")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    table = study(args.action_types.split(","), args.rewards.split(","), args.seeds, args.timesteps, args.episodes,
                  args.logdir, key_values(args.hyperparams), Executor(args.jobs))
    command = "python -m experiments.studies.action_types " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"`{command}`\n\n{table}\n\nWall time {time.perf_counter() - start:.0f} s.\n")
    print(table)


if __name__ == "__main__":
    main()

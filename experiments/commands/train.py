"""`radix-auction train`: train a pacing agent on RadixAuction-v2 (an SB3 algorithm, or the CMA-ES
policy search `cmaes`: `agents.learners.LEARNERS`).

Example: `radix-auction train --algo ppo --timesteps 20000 --logdir runs` writes runs/ppo_s0/
(model.zip, vecnormalize.pkl, config.json, TensorBoard events with SB3's curves, `eval/*` and the
HPARAMS tab); `tensorboard --logdir runs` shows it. Run again, it writes runs/ppo_s0_2/ and leaves
the first run as it was (`--overwrite` replaces it instead); `--resume runs/ppo_s0/model.zip`
continues in runs/ppo_s0/, in the scenario saved in its config.json. `--scenario calibrated` trains
in the scenario `radix-auction compare` compares in (`auction_gym.scenarios`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from agents.evaluation import METRICS
from agents.learners import LEARNERS, names_text
from agents.stats import summary_lines
from agents.training import TrainConfig, TrainResult, action_changes, train
from auction_gym.scenarios import scenario as named_scenario

from ..cli import run_command
from ..errors import UsageError
from ..options import add_config_arguments, add_scenario_arguments, config_values, run_env_kwargs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, TrainConfig, skip=("env_kwargs",))
    add_scenario_arguments(parser, None, "(default none; with --resume, the resumed run's config.json, which "
                           "the scenario's and these override)")


def config_of(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig of parsed arguments, checked before any work starts (UsageError naming the
    option otherwise); prints where the environment arguments come from."""
    if args.algo not in LEARNERS:
        raise UsageError(f"unknown --algo {args.algo!r}; valid: {names_text()}")
    if args.resume is not None and not Path(args.resume).is_file():
        raise UsageError(f"--resume: model not found: {args.resume}")
    if args.hyperparams_file is not None and not Path(args.hyperparams_file).is_file():
        raise UsageError(f"--hyperparams-file: no such file: {args.hyperparams_file}")
    given = {**(named_scenario(args.scenario) if args.scenario else {}), **args.env_kwargs}
    env_kwargs, source = run_env_kwargs(given, args.resume, args.env_id)
    if args.scenario:
        source = f"--scenario {args.scenario} ({source})"
    print(f"environment arguments from {source}: {json.dumps(env_kwargs)}")
    return TrainConfig(**config_values(args, TrainConfig, skip=("env_kwargs",)), env_kwargs=env_kwargs)


def describe(result: TrainResult, wall_s: float, eval_seed: int, env_kwargs: dict[str, Any]) -> str:
    """What a run did: where it saved, steps trained (and why more than asked), the action it
    played when its learner's differs from `env_kwargs` (the run's), and how the trained policy
    did in its final evaluation (episodes from `eval_seed` on)."""
    lines = [f"saved {result.model_path} ({result.trained} steps, {len(result.eval_steps)} evaluations, "
             f"{wall_s:.0f} s)"]
    if changed := action_changes(env_kwargs, result.env_kwargs):
        lines.append(f"played {json.dumps(changed)} (the learner's action_kwargs), and so does its model")
    if result.trained > result.asked:
        lines.append(f"note: trained {result.trained} steps, {result.asked} asked: the algorithm collects whole "
                     "rollouts (n_steps x n_envs steps), or a search plays whole generations, before it stops")
    if n := len(result.final_evaluation):
        seeds = f"seeds {eval_seed}..{eval_seed + n - 1}" if n > 1 else f"seed {eval_seed}"
        lines.append(f"final evaluation at step {result.eval_steps[-1]}: {n} episode{'s' * (n > 1)}, {seeds}")
        lines.extend(summary_lines(result.final_evaluation, METRICS))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> None:
    config = config_of(args)
    start = time.perf_counter()
    print(describe(train(config), time.perf_counter() - start, config.eval_seed, config.env_kwargs))


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.train ...`: the same as `radix-auction train ...`."""
    run_command("train", argv)


if __name__ == "__main__":
    main()

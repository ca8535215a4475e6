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
from agents.sb3 import ENV_ID, VEC_ENVS
from agents.stats import summary_lines
from agents.training import TrainConfig, TrainResult, action_changes, train
from auction_gym.scenarios import scenario as named_scenario

from ..argtypes import positive_int
from ..cli import run_command
from ..errors import UsageError
from ..options import add_evaluation_arguments, add_scenario_arguments, key_values, run_env_kwargs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--algo", default="ppo", help=f"one of {names_text()} (default ppo)")
    parser.add_argument("--timesteps", type=positive_int, default=None,
                        help="environment steps to train (default: the YAML's n_timesteps); with --resume, "
                        "this many more")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the model and of the training envs (env i gets SEED + i; default 0)")
    parser.add_argument("--n-envs", type=positive_int, default=None,
                        help="envs stepped together (default: the YAML's n_envs)")
    parser.add_argument("--vec-env", default="dummy", choices=list(VEC_ENVS),
                        help="dummy: the envs in this process; subproc: a process per env (default dummy)")
    parser.add_argument("--env-id", default=ENV_ID,
                        help=f"registered env to train on, and the hyperparameter files' key (default {ENV_ID})")
    parser.add_argument("--logdir", default="runs",
                        help="TensorBoard root; the run goes to LOGDIR/<algo>_s<seed>, numbered _2, _3, ... when "
                        "that is taken (default runs)")
    parser.add_argument("--run-name", default=None,
                        help="run folder name (default <algo>_s<seed>; with --resume, the resumed run's folder)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into LOGDIR/<run name> itself, deleting an earlier run's model, statistics, "
                        "config, checkpoints and TensorBoard events there")
    add_scenario_arguments(parser, None, "(default none; with --resume, the resumed run's config.json, which "
                           "the scenario's and these override)")
    parser.add_argument("--checkpoint-every", type=positive_int, default=None,
                        help="save a checkpoint every N environment steps to <run>/checkpoints/")
    parser.add_argument("--resume", default=None, metavar="PATH",
                        help="continue training this model zip (the step count continues)")
    parser.add_argument("--hyperparams-file", default=None,
                        help="RL Zoo YAML (default agents/hyperparams/<algo>.yml)")
    parser.add_argument("--hyperparams", nargs="*", metavar="KEY=VALUE",
                        help="override YAML entries, e.g. n_steps=256 learning_rate=1e-3")
    add_evaluation_arguments(parser, "at the next rollout boundary", "a tenth of the run, and at least one rollout")
    parser.add_argument("--torch-threads", type=positive_int, default=1,
                        help="PyTorch CPU threads (default 1: the networks are small, and a thread per core "
                        "slows training several-fold while another process is busy)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")



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
    return TrainConfig(
        algo=args.algo, logdir=args.logdir, timesteps=args.timesteps, seed=args.seed, n_envs=args.n_envs,
        env_kwargs=env_kwargs, env_id=args.env_id, vec_env=args.vec_env, checkpoint_every=args.checkpoint_every, resume=args.resume,
        hyperparams_file=args.hyperparams_file, hyperparams=key_values(args.hyperparams),
        run_name=args.run_name, overwrite=args.overwrite, eval_freq=args.eval_freq,
        eval_episodes=args.eval_episodes, eval_seed=args.eval_seed, progress=args.progress,
        torch_threads=args.torch_threads,
    )


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

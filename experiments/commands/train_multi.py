"""`radix-auction train-multi`: every bidder learns at once, RLlib PPO over the PettingZoo env.

Example: `radix-auction train-multi --policies shared --timesteps 20000` starts a local Ray on all
cores and writes runs/rllib_shared_s0/ (checkpoint/, config.json, TensorBoard events with
`eval/*` as every policy logs them, `population/*` and RLlib's `rllib/*`); run again, it writes
runs/rllib_shared_s0_2/. `--policies per_bidder` trains one policy per bidder. `--address auto`
(or ray://HOST:10001) trains on an existing Ray cluster instead, with `--num-env-runners`
sampling actors and `--num-learners` learner actors spread over it. Ctrl-C saves checkpoint/
before exiting (status 130).
`radix-auction evaluate-multi --checkpoint runs/rllib_shared_s0/checkpoint` evaluates the
learned population against all-OGD and all-truthful markets.

Needs the `rllib` extra (`pip install -e ".[rllib]"`, which setup.sh installs).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Callable

import torch

from ..argtypes import json_dict, non_negative_int, positive_int, random_seed
from ..cli import run_command
from ..errors import UsageError
from ..options import MULTI_AGENT_SCENARIO, add_evaluation_arguments, key_values, rllib_modules


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policies", dest="sharing", default="shared",
                        help="shared (one policy for every bidder, trained on all their experience) or per_bidder "
                        "(one policy each) (default shared)")
    parser.add_argument("--timesteps", type=positive_int, default=20_000,
                        help="environment steps (auction rounds) to sample; whole iterations (default 20000)")
    parser.add_argument("--seed", type=random_seed, default=0, help="seed of the policies and of the env runners (default 0)")
    parser.add_argument("--env-kwargs", type=json_dict, default=MULTI_AGENT_SCENARIO,
                        help=f"PettingZoo env arguments as JSON (default: compare's bursty scenario "
                        f"{json.dumps(MULTI_AGENT_SCENARIO)})")
    parser.add_argument("--num-env-runners", type=non_negative_int, default=0,
                        help="sampling actors, one CPU each; 0 samples in this process (default 0)")
    parser.add_argument("--num-learners", type=non_negative_int, default=0,
                        help="learner actors, one CPU each, each updating on a batch of its own "
                        "(train_batch_size_per_learner steps); 0 learns in this process (default 0)")
    parser.add_argument("--num-cpus", type=positive_int, default=None,
                        help="cores of the local Ray (default: all); not with --address")
    parser.add_argument("--address", default=None,
                        help="an existing Ray cluster to train on: auto, HOST:PORT or ray://HOST:10001 (default: "
                        "start a local Ray)")
    parser.add_argument("--hyperparams", nargs="*", metavar="KEY=VALUE", default=[],
                        help="RLlib PPOConfig.training arguments over SB3's ppo.yml settings, e.g. lr=1e-4 "
                        "train_batch_size_per_learner=2048")
    parser.add_argument("--logdir", default="runs",
                        help="TensorBoard root; the run goes to LOGDIR/rllib_<policies>_s<seed>, numbered _2, _3, ... "
                        "when taken (default runs)")
    parser.add_argument("--run-name", default=None, help="run folder name (default rllib_<policies>_s<seed>)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into LOGDIR/<run name> itself, deleting an earlier run's outputs there")
    parser.add_argument("--checkpoint-every", type=positive_int, default=None,
                        help="also checkpoint every N environment steps to <run>/checkpoints/step_<n>/")
    add_evaluation_arguments(parser, "after the iteration that reaches them", "a tenth of the run")
    parser.add_argument("--torch-threads", type=positive_int, default=1,
                        help="PyTorch CPU threads of this process (default 1)")


def config_of(args: argparse.Namespace):
    """The MultiTrainConfig of parsed arguments, every option checked before Ray starts."""
    rllib, rllib_training = rllib_modules()
    from agents.population import check_population_env_kwargs

    if args.address is not None and args.num_cpus is not None:
        raise UsageError("--num-cpus sets up a local Ray; a cluster at --address has its own cores")
    cpus = args.num_cpus or os.cpu_count() or 1
    if args.address is None and args.num_env_runners + args.num_learners > cpus:
        raise UsageError(f"--num-env-runners {args.num_env_runners} --num-learners {args.num_learners}: each takes a "
                         f"CPU and the local Ray has {cpus} (--num-cpus)")
    try:
        check_population_env_kwargs(args.env_kwargs)
    except ValueError as e:
        raise UsageError(f"--env-kwargs: {e}") from None
    hyperparams = key_values(args.hyperparams)
    try:
        rllib.module_ids(args.sharing, [])
    except ValueError as e:
        raise UsageError(f"--policies: {e}") from None
    try:
        rllib.ppo_config(args.env_kwargs, args.sharing, args.num_env_runners, args.seed, hyperparams,
                         args.num_learners).validate()
    except ValueError as e:
        raise UsageError(f"--hyperparams: {e}") from None
    return rllib_training.MultiTrainConfig(
        logdir=args.logdir, timesteps=args.timesteps, sharing=args.sharing, seed=args.seed,
        env_kwargs=args.env_kwargs, num_env_runners=args.num_env_runners, num_learners=args.num_learners,
        hyperparams=hyperparams,
        checkpoint_every=args.checkpoint_every, eval_freq=args.eval_freq, eval_episodes=args.eval_episodes,
        eval_seed=args.eval_seed, run_name=args.run_name, overwrite=args.overwrite)


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.torch_threads)
    config = config_of(args)
    _, rllib_training = rllib_modules()
    rllib_training.init_ray(args.address, args.num_cpus)
    print(f"environment arguments: {json.dumps(config.env_kwargs)}", flush=True)
    result = rllib_training.train_multi(config, on_iteration=_progress(config.timesteps))
    print(f"saved {result.checkpoint} ({result.trained} environment steps in {result.iterations} iterations, "
          f"{len(result.eval_steps)} evaluations, {result.wall_s:.0f} s); tensorboard --logdir {result.run_dir}")


def _progress(timesteps: int) -> Callable[[int, dict[str, Any]], None]:
    """A line per iteration: steps sampled and the mean episode return."""
    def report(steps: int, result: dict[str, Any]) -> None:
        ret = result.get("env_runners", {}).get("episode_return_mean", float("nan"))
        print(f"iteration {result['training_iteration']}: {steps}/{timesteps} steps, mean episode return {ret:.4g}",
              flush=True)
    return report


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.train_multi ...`: the same as `radix-auction train-multi ...`."""
    run_command("train-multi", argv)


if __name__ == "__main__":
    main()

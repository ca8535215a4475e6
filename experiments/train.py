"""`radix-auction train`: train an SB3 pacing agent on RadixAuction-v0.

Example: `radix-auction train --algo ppo --timesteps 20000 --logdir runs` writes runs/ppo_s0/
(model.zip, vecnormalize.pkl, config.json, TensorBoard events with SB3's curves, `eval/*` and the
HPARAMS tab); `tensorboard --logdir runs` shows it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch
import yaml

from agents.evaluation import DEFAULT_EVAL_SEED
from agents.sb3 import ALGOS
from agents.training import TrainConfig, train


def json_dict(text: str) -> dict[str, Any]:
    """A JSON object given on the command line (argparse type)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An int >= 1 (argparse type); accepts 2e4."""
    try:
        value = int(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def key_values(items: list[str] | None) -> dict[str, Any]:
    """KEY=VALUE pairs with YAML-parsed values ("n_steps=64" -> {"n_steps": 64})."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--hyperparams expects KEY=VALUE, got {item!r}")
        out[key] = yaml.safe_load(value)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--algo", required=True, help=f"one of {', '.join(ALGOS)}")
    parser.add_argument("--timesteps", type=positive_int, default=None,
                        help="environment steps to train (default: the YAML's n_timesteps); with --resume, "
                        "this many more")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-envs", type=positive_int, default=None,
                        help="parallel envs, SubprocVecEnv when > 1 (default: the YAML's n_envs)")
    parser.add_argument("--logdir", default="runs", help="TensorBoard root; the run goes to LOGDIR/<algo>_s<seed>")
    parser.add_argument("--run-name", default=None, help="run directory name (default <algo>_s<seed>)")
    parser.add_argument("--env-kwargs", type=json_dict, default={},
                        help='RadixAuction-v0 arguments as JSON, e.g. \'{"horizon": 200}\'')
    parser.add_argument("--checkpoint-every", type=positive_int, default=None,
                        help="save a checkpoint every N environment steps to <run>/checkpoints/")
    parser.add_argument("--resume", default=None, metavar="PATH",
                        help="continue training this model zip (the step count continues)")
    parser.add_argument("--hyperparams-file", default=None,
                        help="RL Zoo YAML (default hyperparams/<algo>.yml)")
    parser.add_argument("--hyperparams", nargs="*", metavar="KEY=VALUE",
                        help="override YAML entries, e.g. n_steps=256 learning_rate=1e-3")
    parser.add_argument("--eval-freq", type=positive_int, default=None,
                        help="evaluate every N environment steps (default: a tenth of the run)")
    parser.add_argument("--eval-episodes", type=positive_int, default=5)
    parser.add_argument("--eval-seed", type=int, default=DEFAULT_EVAL_SEED,
                        help=f"evaluation episode k uses seed EVAL_SEED + k (default {DEFAULT_EVAL_SEED})")
    parser.add_argument("--torch-threads", type=positive_int, default=1,
                        help="PyTorch CPU threads (default 1: small networks gain nothing from more)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def config_of(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig of parsed arguments; SystemExit for an unknown algorithm."""
    if args.algo not in ALGOS:
        raise SystemExit(f"unknown --algo {args.algo!r}; valid: {', '.join(ALGOS)}")
    return TrainConfig(
        algo=args.algo, logdir=args.logdir, timesteps=args.timesteps, seed=args.seed, n_envs=args.n_envs,
        env_kwargs=args.env_kwargs, checkpoint_every=args.checkpoint_every, resume=args.resume,
        hyperparams_file=args.hyperparams_file, hyperparams=key_values(args.hyperparams),
        run_name=args.run_name, eval_freq=args.eval_freq, eval_episodes=args.eval_episodes,
        eval_seed=args.eval_seed, progress=args.progress,
    )


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.torch_threads)
    try:
        path = train(config_of(args))
    except ValueError as e:
        raise SystemExit(f"train: {e}") from None
    print(f"saved {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="radix-auction train", description="Train an SB3 pacing agent on "
                                     "RadixAuction-v0 (hyperparameters from hyperparams/<algo>.yml).")
    add_arguments(parser)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()

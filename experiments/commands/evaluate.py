"""`radix-auction evaluate`: evaluate a built-in or trained policy on fixed seeds.

Episode k uses env seed SEED + k for every policy, so all policies face identical workloads and
opponents. A saved model is evaluated in the scenario it was trained in: the `env_kwargs` of the
config.json in its run folder (the output says so), which `--env-kwargs` overrides key by key.
TensorBoard (`agents.evaluation.log_episodes`), in a new folder LOGDIR/<policy name> (e.g.
runs/eval/ogd; runs/eval/ogd_2 when that is taken, see `agents.run_dir`): each metric's mean as
`eval/<metric>` at step 0 (`compare` draws it as a flat line over the training steps instead, so it
overlays the learned curves), and each episode's value as `episode/<metric>` at its index. A
summary is printed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Sequence

from agents.evaluation import DEFAULT_EVAL_SEED, METRICS, evaluate, log_episodes, policy_from_spec, policy_name
from agents.run_dir import new_run_dir
from agents.sb3 import MODEL_SUFFIXES
from agents.stats import summary_lines
from agents.training import set_torch_threads
from auction_gym.pacing import Policy, builtin_policy_names

from ..argtypes import json_dict, positive_int, random_seed
from ..cli import run_command
from ..errors import UsageError
from ..options import run_env_kwargs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, help=f"{', '.join(builtin_policy_names())}, or PATH.zip / PATH.npz of a trained model (SB3's, a policy search's)")
    parser.add_argument("--episodes", type=positive_int, default=10, help="evaluation episodes (default 10)")
    parser.add_argument("--seed", type=random_seed, default=DEFAULT_EVAL_SEED,
                        help=f"episode k uses seed SEED + k (default {DEFAULT_EVAL_SEED})")
    parser.add_argument("--logdir", default="runs/eval",
                        help="TensorBoard root; the run goes to a new LOGDIR/<policy> (default runs/eval)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into LOGDIR/<policy> itself, deleting an earlier evaluation's events there")
    parser.add_argument("--env-kwargs", type=json_dict, default=None,
                        help="RadixAuction-v2 arguments as JSON (default: for a saved model, those of the "
                        "config.json beside it, which these override; for a built-in policy, the env's defaults)")
    parser.add_argument("--torch-threads", type=positive_int, default=1,
                        help="PyTorch CPU threads for a saved model's inference (default 1)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def evaluate_and_log(policy: Policy, name: str, env_kwargs: dict, episodes: int, seed: int, logdir: str | Path,
                     progress: bool = True, overwrite: bool = False,
                     steps: Sequence[int] = (0,)) -> list[dict[str, float]]:
    """Evaluate `policy` and log it to a new folder LOGDIR/`name` (the means as `eval/*` at each of
    `steps`); the per-episode metrics."""
    results = evaluate(policy, env_kwargs, episodes, seed, progress=progress, desc=f"evaluate {name}")
    log_episodes(new_run_dir(Path(logdir) / name, overwrite), results,
                 {"policy": name, "episodes": episodes, "seed": seed}, steps)
    return results


def run(args: argparse.Namespace) -> None:
    set_torch_threads(args.torch_threads)
    model = args.policy if args.policy.endswith(MODEL_SUFFIXES) else None
    if model is not None and not Path(model).is_file():
        raise UsageError(f"--policy: model not found: {model}")
    env_kwargs, source = run_env_kwargs(args.env_kwargs, model)
    try:
        policy = policy_from_spec(args.policy, env_kwargs.get("alpha_max", 2.0))
    except ValueError as e:
        raise UsageError(f"--policy: {e}") from None
    print(f"environment arguments from {source}: {json.dumps(env_kwargs)}")
    start = time.perf_counter()
    results = evaluate_and_log(policy, policy_name(args.policy), env_kwargs, args.episodes, args.seed, args.logdir,
                               args.progress, args.overwrite)
    print(f"{policy_name(args.policy)}: {args.episodes} episodes, seeds {args.seed}..{args.seed + args.episodes - 1}, "
          f"{time.perf_counter() - start:.1f} s")
    print("\n".join(summary_lines(results, METRICS)))


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.evaluate ...`: the same as `radix-auction evaluate ...`."""
    run_command("evaluate", argv)


if __name__ == "__main__":
    main()

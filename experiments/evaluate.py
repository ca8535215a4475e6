"""`radix-auction evaluate`: evaluate a built-in or trained policy on fixed seeds.

Episode k uses env seed SEED + k for every policy, so all policies face identical workloads and
opponents. Each episode's metrics (`agents.evaluation`) go to TensorBoard as `eval/<metric>` with
step = episode index, in LOGDIR/<policy name> (e.g. runs/eval/ogd), and a summary is printed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agents.evaluation import DEFAULT_EVAL_SEED, METRICS, evaluate, log_episodes, policy_from_spec, policy_name
from agents.stats import mean_ci

from .train import json_dict, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, help="ogd, truthful, fixed:<alpha>, or PATH.zip of a trained model")
    parser.add_argument("--episodes", type=positive_int, default=10)
    parser.add_argument("--seed", type=int, default=DEFAULT_EVAL_SEED,
                        help=f"episode k uses seed SEED + k (default {DEFAULT_EVAL_SEED})")
    parser.add_argument("--logdir", default="runs/eval", help="TensorBoard root; the run goes to LOGDIR/<policy>")
    parser.add_argument("--env-kwargs", type=json_dict, default={},
                        help="RadixAuction-v0 arguments as JSON (use the ones the model was trained on)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def evaluate_spec(spec: str, env_kwargs: dict, episodes: int, seed: int, logdir: str | Path,
                  progress: bool = True) -> list[dict[str, float]]:
    """Evaluate the policy `spec` and log it to LOGDIR/<policy name>; the per-episode metrics."""
    policy = policy_from_spec(spec, env_kwargs.get("alpha_max", 2.0))
    name = policy_name(spec)
    results = evaluate(policy, env_kwargs, episodes, seed, progress=progress, desc=f"evaluate {name}")
    log_episodes(Path(logdir) / name, results, {"policy": name, "episodes": episodes, "seed": seed})
    return results


def run(args: argparse.Namespace) -> None:
    try:
        results = evaluate_spec(args.policy, args.env_kwargs, args.episodes, args.seed, args.logdir, args.progress)
    except ValueError as e:
        raise SystemExit(f"evaluate: {e}") from None
    print(f"{policy_name(args.policy)}: {args.episodes} episodes, seeds {args.seed}..{args.seed + args.episodes - 1}")
    for m in METRICS:
        mean, half = mean_ci([r[m] for r in results])
        print(f"  {m:18s} {mean:12.4f} +- {half:.4f} (95% CI)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="radix-auction evaluate", description="Evaluate a policy on "
                                     "RadixAuction-v0 on fixed seeds and log eval/* to TensorBoard.")
    add_arguments(parser)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()

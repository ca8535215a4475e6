"""`radix-auction leaderboard`: the leaderboard of `RadixAuction-v2` at its defaults, and scoring a
policy of your own against it. The board, its rows and statistics are
`experiments.commands.leaderboard_report`'s.

- `radix-auction leaderboard`: print the board (docs/leaderboard/leaderboard.json) and whether it
  matches the running code (its scenario and simulator-code hashes).
- `radix-auction leaderboard --submit POLICY`: play POLICY on the board's evaluation episodes and
  print its row, paired with OGD, the tuned PI pacer and hindsight on the same episodes, and the
  normalized score (0 = OGD, 1 = hindsight), ranked among the board's rows. POLICY is a built-in
  policy ("fixed:0.5", "pid:kp=0.05,ki=0.01"), a saved model (an SB3 zip, a policy search's npz;
  it plays the action type it was trained in, in the board's market) or `module:Class`, an
  importable class (made with no arguments) or object with SB3's `predict(observation, state,
  episode_start, deterministic)`, acting in the board's action (`action_type` "residual": a in
  [-1, 1] scales the tuned PI pacer's multiplier by exp(a)) unless `--env-kwargs` names another.
  Only the submission's own episodes are played: the board's rows store their utilities per
  episode. A board made on other code or another scenario is refused, unless `--recompute` replays
  its baselines on the running code first (a few minutes; its learned rows are left out).
- `radix-auction leaderboard --build [--learned DIR ...]`: replay the baselines (the headroom
  report, tuning seeds 0..35, evaluation seeds 1000..1099) and write the board and its page;
  `--learned DIR` adds a row per algorithm of a `radix-auction compare` run on the board's scenario
  and evaluation episodes (DIR: its --out; the committed rows came from one at its default budget),
  and without `--build` adds them to the current board.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from agents.evaluation import DEFAULT_EVAL_SEED, evaluate, policy_name, scored_kwargs
from agents.sb3 import ACTING, MODEL_SUFFIXES, load_policy, saved_env_kwargs
from agents.training import set_torch_threads
from auction_gym.pacing import Policy, is_builtin_policy, make_policy
from auction_gym.registry import resolve
from auction_gym.scenarios import scenario

from ..argtypes import existing_folder, json_dict, output_file, positive_int
from ..cli import run_command
from ..errors import UsageError
from ..executor import add_address_argument, executor_of
from ..provenance import machine
from . import leaderboard_report as lb
from .headroom_report import EVAL_EPISODES, TUNING_EPISODES, headroom


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--board", type=output_file, default=lb.BOARD,
                        help="the leaderboard's JSON (default docs/leaderboard/leaderboard.json)")
    parser.add_argument("--submit", metavar="POLICY",
                        help="score POLICY: a built-in policy, PATH.zip / PATH.npz, or module:Class with predict()")
    parser.add_argument("--name", help="the submitted row's name (default: from POLICY)")
    parser.add_argument("--episodes", type=positive_int, default=None,
                        help="score on the board's first N evaluation episodes only (default all; a quick look, "
                        "not a ranked row)")
    parser.add_argument("--env-kwargs", type=json_dict, default={},
                        help=f"the action the submission plays in, as JSON of {', '.join(ACTING)} (never the market; "
                        "default: a saved model's own, else the board's)")
    parser.add_argument("--recompute", action="store_true",
                        help="when the board was made on other code, replay its baselines on this code first")
    parser.add_argument("--build", action="store_true",
                        help="replay the baselines and write the board and its page (docs/leaderboard/)")
    parser.add_argument("--learned", action="append", type=existing_folder, default=[], metavar="DIR",
                        help="add the learned rows of a compare run on the default scenario (its --out); repeatable")
    parser.add_argument("--jobs", type=positive_int, default=2, help="processes for replaying baselines (default 2)")
    add_address_argument(parser)


def run(args: argparse.Namespace) -> None:
    if args.submit and (args.build or args.learned):
        raise UsageError("--submit scores a policy against a board; --build and --learned write one: give one of them")
    if args.build or args.learned:
        build(args)
    elif args.submit:
        submit(args)
    else:
        board = lb.load(args.board)
        print(status(args.board, board))
        print(lb.table(board["rows"]))


def status(path: Path, board: dict[str, Any]) -> str:
    """One line: which board, its scenario and code hash, and whether it matches the running code."""
    reason = lb.stale(board)
    return (f"leaderboard {path}: {board['env_id']}, scenario {board['scenario']!r}, code sha256 "
            f"{board['code_hash'][:12]} ({'current' if reason is None else 'STALE: ' + reason})")


def made_by(args: argparse.Namespace) -> str:
    """The command that made a board (the options that change what it holds)."""
    words = ["radix-auction leaderboard", *(["--build"] if args.build else []),
             *(f"--learned {folder}" for folder in args.learned),
             *([f"--board {args.board}"] if args.board != lb.BOARD else [])]
    return " ".join(words)


def baselines_board(args: argparse.Namespace, env_kwargs: dict[str, Any], tuning_episodes: int,
                    episodes: int, eval_seed: int) -> dict[str, Any]:
    """A board of the baselines alone, replayed now (the headroom report of `env_kwargs`)."""
    start = time.perf_counter()
    print(f"replaying the baselines: tuning seeds 0..{tuning_episodes - 1}, evaluation seeds "
          f"{eval_seed}..{eval_seed + episodes - 1} ({executor_of(args).where()})", flush=True)
    report = headroom(env_kwargs, tuning_episodes, episodes, eval_seed=eval_seed, executor=executor_of(args))
    print(f"baselines replayed in {time.perf_counter() - start:.0f} s", flush=True)
    rows = lb.baseline_rows(report, env_kwargs, tuning_episodes, eval_seed)
    return lb.new_board(env_kwargs, rows, made_by(args), tuning_episodes, eval_seed, episodes)


def build(args: argparse.Namespace) -> None:
    if args.build:
        board = baselines_board(args, scenario(lb.SCENARIO), TUNING_EPISODES, EVAL_EPISODES, DEFAULT_EVAL_SEED)
    else:
        board = lb.load(args.board)
        if (reason := lb.stale(board)) is not None:
            raise UsageError(reason)
    for folder in args.learned:
        rows = lb.learned_rows(board, folder)
        names = {r["name"] for r in rows}
        board["rows"] = [r for r in board["rows"] if r["name"] not in names] + rows
        print(f"{folder}: learned rows {', '.join(sorted(names))}")
    # Rows added to a board keep the command that replayed its baselines in its record.
    board["made_by"] = made_by(args) if args.build else f"{board['made_by']}, then {made_by(args)}"
    board["made"] = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}"
    lb.save(lb.with_stats(board), args.board)
    print(lb.table(board["rows"]))
    print(f"\nwrote {args.board} and {args.board.with_suffix('.md')}")


def submitted_policy(spec: str, env_kwargs: dict[str, Any], acting: dict[str, Any]) -> tuple[Policy, dict[str, Any]]:
    """The policy `spec` names (see the module docstring) and the env kwargs it is scored in: the
    board's market, in the action a saved model was trained in, with `acting` (--env-kwargs) over it."""
    if set(acting) - set(ACTING):
        raise UsageError(f"--env-kwargs: a submission may set only {', '.join(ACTING)} (the action it plays), "
                         f"not {', '.join(sorted(set(acting) - set(ACTING)))}: the market is the board's")
    kwargs = dict(env_kwargs)
    try:
        if spec.endswith(MODEL_SUFFIXES):
            policy = load_policy(spec)
            saved = saved_env_kwargs(spec)
            if saved is not None:
                kwargs.update({k: v for k, v in saved[0].items() if k in ACTING})
            elif getattr(policy, "action_type", None):
                kwargs["action_type"] = policy.action_type
        elif is_builtin_policy(spec):
            policy = make_policy(spec, kwargs.get("alpha_max", 2.0))
        elif ":" in spec:
            target = resolve(spec)
            policy = make_policy(target() if isinstance(target, type) else target)
        else:
            raise ValueError(f"unknown policy {spec!r}: give a built-in policy, PATH.zip / PATH.npz, or module:Class")
    except (ImportError, AttributeError) as e:
        raise UsageError(f"--submit: cannot import {spec!r}: {e}") from None
    except ValueError as e:
        raise UsageError(f"--submit: {e}") from None
    return policy, {**kwargs, **acting}


def recomputed(args: argparse.Namespace, board: dict[str, Any]) -> dict[str, Any]:
    """`board`'s baselines replayed on the running code, on its seeds (its learned rows left out:
    their models are not part of it)."""
    first, last = board["eval_seeds"]
    learned = [r["name"] for r in board["rows"] if r["kind"] == "learned"]
    if learned:
        print(f"--recompute: the learned rows ({', '.join(learned)}) are left out: only the baselines are replayed")
    return baselines_board(args, board["env_kwargs"], board["tuning_seeds"][1] + 1, last - first + 1, first)


def submit(args: argparse.Namespace) -> None:
    board = lb.load(args.board)
    reason = lb.stale(board)
    if reason is not None and not args.recompute:
        raise UsageError(reason)
    print(status(args.board, board))
    if reason is not None:
        board = recomputed(args, board)
    first, last = board["eval_seeds"]
    episodes = args.episodes or last - first + 1
    if episodes > last - first + 1:
        raise UsageError(f"--episodes {episodes}: the board has {last - first + 1} evaluation episodes")
    policy, env_kwargs = submitted_policy(args.submit, board["env_kwargs"], args.env_kwargs)
    set_torch_threads(1)
    start = time.perf_counter()
    try:
        utility = np.array([r["utility"] for r in evaluate(policy, env_kwargs, episodes, first, progress=False)])
    except ValueError as e:
        raise UsageError(f"--submit: {e}") from None
    name = args.name or policy_name(args.submit)
    action = scored_kwargs(policy, env_kwargs).get("action_type")
    print(f"{name}: {episodes} evaluation episodes (seeds {first}..{first + episodes - 1}), action_type {action!r}, "
          f"{time.perf_counter() - start:.1f} s")
    row = {"name": name, "kind": "submitted", "policy": args.submit, "training_seeds": [], "training_steps": 0,
           "stats": lb.row_stats([utility], lb.references(board))}
    full = episodes == last - first + 1
    print(lb.table([*board["rows"], row]) if full else lb.table([row], rank=False))
    print(lb.verdict(row, full))


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.leaderboard ...`: the same as `radix-auction leaderboard ...`."""
    run_command("leaderboard", argv)


if __name__ == "__main__":
    main()

"""`radix-auction headroom`: is there anything to learn in a pacing scenario? Run before any training.
The report, its rows and outputs are `experiments.commands.headroom_report`'s.

`--quick` takes the episode counts of `compare --quick` (`experiments.options.BUDGETS["quick"]`), the headroom
report that run makes, so the two quick runs agree; a size given explicitly still wins."""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone
from pathlib import Path

from agents.evaluation import DEFAULT_EVAL_SEED

from ..argtypes import positive_int, random_seed
from ..cli import run_command
from ..errors import UsageError
from ..executor import add_address_argument, executor_of
from ..options import BUDGETS, add_scenario_arguments, scenario_kwargs
from ..provenance import machine
from .headroom_report import EVAL_EPISODES, TUNING_EPISODES, headroom, markdown, write

QUICK = {"tuning_episodes": BUDGETS["quick"]["tuning_episodes"], "episodes": BUDGETS["quick"]["episodes"]}
"""`--quick`'s sizes: compare --quick's."""
FULL = {"tuning_episodes": TUNING_EPISODES, "episodes": EVAL_EPISODES}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser)
    parser.add_argument("--quick", action="store_true",
                        help=f"a first look: {QUICK['tuning_episodes']} tuning and {QUICK['episodes']} evaluation "
                        "episodes, as compare --quick")
    parser.add_argument("--tuning-episodes", type=positive_int, default=None,
                        help=f"episodes (seeds 0..) the policies are chosen on (default {TUNING_EPISODES}, "
                        f"quick {QUICK['tuning_episodes']})")
    parser.add_argument("--episodes", type=positive_int, default=None,
                        help=f"evaluation episodes (default {EVAL_EPISODES}, quick {QUICK['episodes']})")
    parser.add_argument("--eval-seed", type=random_seed, default=DEFAULT_EVAL_SEED,
                        help=f"evaluation episode k uses seed EVAL_SEED + k (default {DEFAULT_EVAL_SEED})")
    parser.add_argument("--jobs", type=positive_int, default=2, help="worker processes (default 2)")
    add_address_argument(parser)
    parser.add_argument("--out", default="results", help="directory for headroom.md/.csv/.png (default results)")


def with_sizes(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with each episode count not given set to `--quick`'s or the full run's."""
    sizes = QUICK if args.quick else FULL
    return argparse.Namespace(**{**vars(args), **{k: v for k, v in sizes.items() if getattr(args, k) is None}})


def run(args: argparse.Namespace) -> None:
    args = with_sizes(args)
    env_kwargs = scenario_kwargs(args.scenario, args.env_kwargs)
    start = time.perf_counter()
    try:
        table = headroom(env_kwargs, args.tuning_episodes, args.episodes, eval_seed=args.eval_seed,
                         executor=executor_of(args)).table
    except ValueError as e:
        raise UsageError(str(e)) from None
    header = (f"`radix-auction headroom --scenario {args.scenario} --env-kwargs '{json.dumps(args.env_kwargs)}' "
              f"--tuning-episodes {args.tuning_episodes} --episodes {args.episodes} --eval-seed {args.eval_seed}`\n\n"
              f"Scenario: `{json.dumps(env_kwargs)}`; tuning seeds 0..{args.tuning_episodes - 1}, evaluation seeds "
              f"{args.eval_seed}..{args.eval_seed + args.episodes - 1}; wall time {time.perf_counter() - start:.0f} s; "
              f"made {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}.")
    write(Path(args.out), table, header, f"Headroom of scenario {args.scenario!r} (paired, 95% CI)")
    print(markdown(table))
    print(f"\nwrote {args.out}/headroom.md, headroom.csv, headroom.png")


def main(argv: list[str] | None = None) -> None:
    run_command("headroom", argv)


if __name__ == "__main__":
    main()

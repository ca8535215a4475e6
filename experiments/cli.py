"""The `radix-auction` command line: one subcommand per experiment module.

Each module exposes `add_arguments(parser)` and `run(args)`. Only the chosen subcommand's module is
imported, so `radix-auction demo` does not pay for importing Stable-Baselines3 or the torch model.

Errors: a user's mistake is one line on stderr, `radix-auction COMMAND: error: MESSAGE (see
'radix-auction COMMAND --help')`, and exit status 2 (argparse's own convention), without the usage
text argparse prints first by default. That covers argparse's checks, `UsageError` raised by a
subcommand, and the `ValueError`s and `OSError`s of the library, which reject bad input (an invalid
argument, a malformed or missing file) with a message that names it. Anything else is a bug of ours
and keeps its traceback; so does everything when `RADIX_AUCTION_DEBUG=1` is set. A sweep's task that
its executor could not run (`TaskFailed`: a Ray worker or node lost, the project missing on a node)
is one line and exit status 1. Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType
from typing import NoReturn

from .errors import TaskFailed, UsageError

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("experiments.commands.demo", "replay a workload under every scheduler and print a table"),
    "reproduce": ("experiments.commands.reproduce", "reproduce the paper's findings over a sweep of load and KV size"),
    "train": ("experiments.commands.train", "train a pacing agent on RadixAuction-v2 (SB3, or the CMA-ES policy search)"),
    "tune": ("experiments.commands.tune", "search hyperparameters with Optuna (TPE, median pruning) on tuning episodes"),
    "evaluate": ("experiments.commands.evaluate", "evaluate a policy (built-in or saved zip) on fixed seeds"),
    "headroom": ("experiments.commands.headroom", "measure what pacing can gain in a scenario, before any training"),
    "compare": ("experiments.commands.compare", "train pacing agents and compare them with OGD, a PI pacer and tuned baselines"),
    "leaderboard": ("experiments.commands.leaderboard",
                    "the default scenario's leaderboard; score a policy of your own against it (--submit)"),
    "train-multi": ("experiments.commands.train_multi", "train every bidder at once with RLlib PPO (Ray; local or a cluster)"),
    "evaluate-multi": ("experiments.commands.evaluate_multi",
                       "evaluate learned populations against all-OGD and all-truthful markets"),
    "incentives": ("experiments.commands.incentives", "measure one bidder's gain from deviating from truthful bidding"),
    "calibrate": ("experiments.commands.calibrate", "profile the torch engine and fit the simulator's cost model"),
    "cluster": ("experiments.commands.cluster", "routers x admission policies x replicas over a cluster of engines"),
    "markets": ("experiments.commands.markets", "every market design x workload x load, paced: welfare, revenue, latency"),
    "fidelity": ("experiments.commands.fidelity", "replay a workload through the torch engine and the simulator; report errors"),
    "bench": ("experiments.commands.bench", "run the speed benchmarks and write the benchmarks page"),
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line and a hint, not the usage first: the usage
    of a subcommand runs to a dozen lines and buries the line that matters."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_one_line_text(message)}{_hint(self.prog)}\n")


def _hint(prog: str) -> str:
    return f" (see '{prog} --help')"


def _module(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name][0])


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; `command`'s own arguments are added when it is given (its module is imported)."""
    parser = _Parser(prog="radix-auction", description="Radix Auction Gym experiments.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        if name == command:
            module = _module(name)
            child = sub.add_parser(name, help=help_text, description=module.__doc__ or help_text,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
            module.add_arguments(child)
        else:
            sub.add_parser(name, help=help_text, description=help_text)
    return parser


def run_command(name: str, argv: list[str] | None = None) -> None:
    """`radix-auction NAME ARGV...` (what each module's `python -m experiments.commands.<module>` runs);
    argv None: the process's arguments."""
    main([name, *(sys.argv[1:] if argv is None else argv)])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None)
    args, extra = parser.parse_known_args(argv)
    if extra:  # argparse would blame the top-level parser; the options belong to the subcommand
        prog = f"radix-auction {args.command}"
        parser.exit(2, f"{prog}: error: unrecognized arguments: {' '.join(extra)}{_hint(prog)}\n")
    try:
        _module(args.command).run(args)
    except KeyboardInterrupt:
        parser.exit(130, f"radix-auction {args.command}: interrupted\n")
    except TaskFailed as e:
        if os.environ.get("RADIX_AUCTION_DEBUG") == "1":
            raise
        parser.exit(1, f"radix-auction {args.command}: error: {_one_line(e)}\n")
    except (UsageError, ValueError, OSError) as e:
        if os.environ.get("RADIX_AUCTION_DEBUG") == "1":
            raise
        prog = f"radix-auction {args.command}"
        parser.exit(2, f"{prog}: error: {_one_line(e)}{_hint(prog)}\n")


def _one_line(error: BaseException) -> str:
    """An exception's message on one line (a file error's own message names the file)."""
    return _one_line_text(str(error)) or type(error).__name__


def _one_line_text(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    main()

"""The `radix-auction` command line: one subcommand per experiment module.

Each module exposes `add_arguments(parser)` and `run(args)`. Only the chosen subcommand's module is
imported, so `radix-auction demo` does not pay for importing Stable-Baselines3 or the torch model.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("experiments.demo", "replay a workload under every scheduler and print a table"),
    "reproduce": ("experiments.reproduce", "reproduce the paper's findings over a sweep of load and KV size"),
    "train": ("experiments.train", "train a Stable-Baselines3 pacing agent on RadixAuction-v0"),
    "evaluate": ("experiments.evaluate", "evaluate a policy (built-in or saved zip) on fixed seeds"),
    "compare": ("experiments.compare", "train SB3 agents and compare them with OGD and truthful bidding"),
    "calibrate": ("experiments.calibrate", "profile the torch engine and fit the simulator's cost model"),
}


def _module(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name][0])


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; `command`'s own arguments are added when it is given (its module is imported)."""
    parser = argparse.ArgumentParser(prog="radix-auction", description="Radix Auction Gym experiments.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        child = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            _module(name).add_arguments(child)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command if command in COMMANDS else None).parse_args(argv)
    _module(args.command).run(args)


if __name__ == "__main__":
    main()

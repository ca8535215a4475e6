"""The errors a command raises for the command line to report (`experiments.cli`): here, so that
commands, the executor and a library caller import them without importing the command line."""

from __future__ import annotations


class UsageError(Exception):
    """A user error found by a subcommand (a bad option value, a file that is not what it should be):
    printed as one line naming the option and what is valid, exit status 2."""


class TaskFailed(Exception):
    """A task of a sweep that its executor could not run (a Ray worker or node lost, the project
    missing on a node): one line naming the task and where it was to run, exit status 1."""

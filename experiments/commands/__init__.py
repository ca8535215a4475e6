"""The `radix-auction` subcommands (one module each, named in `experiments.cli.COMMANDS`) and their helpers."""

"""Runnable experiments: the `radix-auction` command line (`experiments.cli`, its subcommands in
`experiments.commands`), speed benchmarks (`experiments.bench`) and studies (`experiments.studies`)."""

"""Runnable studies and benchmarks; the `radix-auction` command line lives in `experiments.cli`."""

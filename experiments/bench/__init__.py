"""Speed benchmarks, each run as `python -m experiments.bench.<module>`; they print figures and assert nothing."""

"""One-off studies behind figures in the README, each run as `python -m experiments.studies.<module>`."""

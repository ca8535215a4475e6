"""One-off studies behind figures in the documentation, each run as `python -m experiments.studies.<module>`."""

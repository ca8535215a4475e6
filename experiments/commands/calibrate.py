"""`radix-auction calibrate`: profile the torch engine and fit the simulated engine's cost model to it
(`experiments.commands.calibration` has the method); writes the JSON `CostModel.from_json` loads."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..argtypes import output_file, positive_int, random_seed, unit_share
from ..cli import run_command
from ..errors import UsageError
from .calibration import STATISTICS, calibrate, checked_clock, checked_device


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=output_file, default=Path("costs.json"),
                        help="cost model JSON to write (default costs.json)")
    parser.add_argument("--preset", default="tiny", help="model preset, one of gpu_backend.PRESETS (default tiny)")
    parser.add_argument("--device", default=None, help="torch device (default cuda if available, else cpu)")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16, ... (default bf16 on CUDA, fp32 on CPU)")
    parser.add_argument("--seed", type=random_seed, default=0, help="seed of the model's weights and of the grid's jitter "
                        "and held-out split (default 0)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed runs per grid point (default 5)")
    parser.add_argument("--statistic", choices=sorted(STATISTICS), default="min",
                        help="time kept of a point's runs: min (dedicated machine, default) or median "
                        "(a shared CPU, where the engine's own timings include other processes' interference)")
    parser.add_argument("--holdout", type=unit_share, default=0.25,
                        help="share of points held out of the fit, in (0, 1) (default 0.25)")
    parser.add_argument("--max-prefill", type=positive_int, default=4096,
                        help="largest prefill batch in tokens (default 4096)")
    parser.add_argument("--max-context", type=positive_int, default=8192,
                        help="longest sequence profiled in tokens (default 8192)")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch CPU threads (default 1; more needs --clock wall)")
    parser.add_argument("--clock", default=None,
                        help="what a point's seconds count on a CPU: cpu (default, as the torch engine's), the "
                        "computing thread's CPU time, without waits for a core other processes hold; or wall, elapsed time")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def run(args: argparse.Namespace) -> dict:
    """Run a calibration with the arguments of `add_arguments`."""
    import torch

    from gpu_backend import PRESETS, model_dtype

    if args.preset not in PRESETS:
        raise UsageError(f"unknown --preset {args.preset!r}; valid: {', '.join(PRESETS)}")
    checked_device(args.device)
    try:
        model_dtype(args.dtype, args.device or "cpu")
    except ValueError as error:
        raise UsageError(f"--dtype: {error}") from None
    clock = checked_clock(args.clock, args.threads, args.device)
    torch.set_num_threads(args.threads)
    return calibrate(args.out, args.preset, args.device, args.dtype, seed=args.seed, repeats=args.repeats,
                     holdout=args.holdout, max_prefill=args.max_prefill, max_context=args.max_context,
                     statistic=args.statistic, progress=args.progress, clock=clock)


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.calibrate ...`: the same as `radix-auction calibrate ...`."""
    run_command("calibrate", argv)


if __name__ == "__main__":
    main()

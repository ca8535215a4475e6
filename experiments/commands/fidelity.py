"""End-to-end fidelity of the simulator against the torch engine (`radix-auction fidelity`).

Vidur's measure: replay one workload through the torch engine (`gpu_backend.TorchEngine`, CPU and
the tiny preset by default) and through the simulator (`SimEngine`) with a cost model calibrated on
it, both under the same scheduler and `EngineConfig` (reservation, chunked prefill, KV size), and
report the error of the p50 and p90 of TTFT and of latency (|p50 sim - p50 real| / p50 real,
Vidur's percentile error; the headline table gives their ranges over the torch replays, beside how
far the torch replays are from each other on them), the per-request relative error
|sim - real| / real (median with a 95% bootstrap interval over requests, and p90, percent), and
the relative error of throughput (prompt + output tokens per second) and of makespan.

Percentiles are the measure, not per-request errors: a request that arrives while an iteration
runs waits for its end, and which iteration that is, and how far into it, changes from one torch
replay to the next with the iterations' timing noise, so a request's TTFT carries a wait uniform
over an iteration that no simulator can predict request by request, and its prefill one
iteration's timing noise (per-request TTFT of two torch replays differ by 21-43% at the median:
the documentation's "The PyTorch engine and calibration"). Over enough requests (512 by default) those average out of the percentiles.

Made to travel between machines, and to hold on a machine other processes keep busy:
- clock: the torch engine's iterations are timed on the "cpu" clock by default (the computing
  thread's CPU time, `gpu_backend.timer`), and its engine clock advances by those times, arrivals
  included; so a replay's schedule does not stretch while other processes hold the cores, as it
  does on the "wall" clock (`--clock wall`: right only on an otherwise idle machine).
- load: the arrival rate is `--load` times the torch engine's capacity on this workload, measured
  first on the same clock and speed reference (`replays.saturation_replay`: one replay of another
  draw with every request arriving at once), so a slower CPU runs the same workload as far below
  saturation; `--rate` fixes it in requests/s. The summary also gives the load each scored replay
  ran at (`realized_load`, a rough estimate): on a shared machine the replays need not run at the
  capacity replay's speed (without the speed reference, an estimated 0.43-0.93 for "0.6" over
  fifteen runs, and 4-48% of requests queued; the documentation's torch engine page).
- speed reference (opt-in, `--speed-reference N`): every N iterations a fixed decode step is
  timed, and iteration times are scaled by the machine's nominal over current speed
  (`gpu_backend.speed_reference`), since a shared CPU's speed drifts on the cpu clock too; the
  capacity replay shares it, so that a load holds in its units as the machine drifts (over eleven
  short runs 15-24% of requests queued, against 4-48% without; over two full runs 19-28%);
- interleaving: the calibration replay and the `--repeats` scored torch replays step one
  iteration each in turn (one model shared), so a stretch of time when the machine is slower
  slows all of them alike instead of biasing one against another.

The cost model: `--cost-model` JSON, or one calibrated now. `--calibration replay` (default)
fits it to the iterations of a torch replay of another draw of the same workload (seed + 1), by
least squares on seconds, decode knee included (`CostModel.decode_knee`); `--calibration grid` runs `radix-auction calibrate`'s profiling grid.

The workload is SGLang's generated-shared-prefix benchmark scaled down (`--groups` x
`--prompts-per-group` requests), so the engine queues, batches, hits the cache, chunks long
prompts and, in a small `--kv-capacity`, retracts.

What the error comes from, reported alongside:
- timing: the calibrated cost model's percent error on the torch replay's own iterations (each
  iteration's measured seconds against what the simulator would charge for it), and the total
  bias sum(predicted) / sum(measured) - 1;
- noise floor: with `--repeats` >= 2 the errors between torch replays of the same workload, which
  timing noise alone gives (interleaved replays share the machine's slow stretches, so this is the
  floor within one run; rerun the command for the spread between runs);
- scheduling: requests whose rank in the admission order differs between the engines, and
  prefill batches that differ (an engine that runs iterations faster admits different batches).

Writes to `--out`: `costs.json` (if calibrated), `requests_<k>.csv` (per request, torch replay k
against the simulator), `summary.json` and `summary.md` (with `--load`, also the capacity measured
and the load each scored replay ran at).
"""

from __future__ import annotations

import argparse
import csv
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from auction_gym.engine import CostModel, EngineConfig, SimEngine, summarize
from auction_gym.engine.rules import RULES
from auction_gym.request import Request
from auction_gym.scheduler import scheduler_names
from auction_gym.workload import SharedPrefixConfig, shared_prefix_workload

from ..argtypes import cost_model_file, non_negative_int, output_folder, positive_float, positive_int, random_seed
from ..cli import run_command
from ..errors import UsageError
from .calibration import STATISTICS, calibrate, checked_clock, checked_device, fit_cost_model, predicted
from .replays import Replay, replay, replay_together, saturation_replay, torch_engine


def _relative(sim: np.ndarray, real: np.ndarray) -> np.ndarray:
    return np.abs(sim - real) / real


def median_ci(values: np.ndarray, level: float = 0.95, resamples: int = 2000) -> tuple[float, float]:
    """A `level` bootstrap confidence interval (percentile method, fixed seed) of the median of
    `values`: how far the median could move with another draw of as many requests."""
    rng = np.random.default_rng(0)
    medians = np.median(values[rng.integers(0, len(values), (resamples, len(values)))], axis=1)
    lo, hi = np.percentile(medians, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


PERCENTILES = (50, 90)
"""Percentiles of TTFT and latency whose errors `compare` reports (Vidur's measure)."""


def compare(real: Replay, sim: Replay) -> dict:
    """Errors of `sim` against `real`: per-request TTFT and latency (median with its 95% bootstrap
    interval, and p90, of |sim - real| / real, percent, over requests both finished), the errors of
    their `PERCENTILES` (Vidur's percentile error: |p50 sim - p50 real| / p50 real, and p90 alike),
    throughput and makespan (percent), hit rates, and how much the schedules differ."""
    ids = [i for i in sorted(real.records) if real.records[i].finished and sim.records[i].finished]
    out: dict = {"requests": len(ids)}
    for name in ("ttft", "latency"):
        s, r = (np.array([getattr(e.records[i], name) for i in ids]) for e in (sim, real))
        err = 100 * _relative(s, r)
        out[f"{name}_median_pct"] = float(np.median(err))
        out[f"{name}_median_ci95_pct"] = median_ci(err)
        out[f"{name}_p90_pct"] = float(np.percentile(err, 90))
        for q in PERCENTILES:
            out[f"{name}_p{q}_of_p{q}_pct"] = float(100 * _relative(np.percentile(s, q), np.percentile(r, q)))
    m_real, m_sim = summarize(list(real.records.values())), summarize(list(sim.records.values()))
    out["throughput_pct"] = float(100 * abs(m_sim.throughput_tps - m_real.throughput_tps) / m_real.throughput_tps)
    out["makespan_pct"] = float(100 * abs(m_sim.makespan - m_real.makespan) / m_real.makespan)
    out["hit_rate_real"], out["hit_rate_sim"] = m_real.hit_rate, m_sim.hit_rate
    out["retractions_real"], out["retractions_sim"] = m_real.retractions, m_sim.retractions
    rank_real, rank_sim = real.ranks(), sim.ranks()
    out["admit_rank_differs"] = sum(rank_real.get(i) != rank_sim.get(i) for i in ids)
    same = sum(a == b for a, b in zip(real.prefill_batches, sim.prefill_batches))
    out["prefill_batches_same"] = f"{same}/{max(len(real.prefill_batches), len(sim.prefill_batches))}"
    return out


def fit_replay(real: Replay, name: str) -> CostModel:
    """A cost model fitted to a torch replay's own iterations by non-negative least squares on
    seconds (`calibration.fit_cost_model`, decode knee included). Not on relative error
    (`calibration.fit`): latency and throughput are sums of iteration times, and under a shared
    CPU's heavy-tailed noise the relative fit sits near the fastest runs, which biases every sum
    low. The base cost per iteration is always in the fit: without it, a short replay's decode
    steps may be fitted to the context term alone, which `EngineConfig` rejects (a step of no
    context would cost nothing)."""
    return fit_cost_model(real.samples, name, relative=False, required=(0,))


def timing_error(real: Replay, cost: CostModel) -> dict:
    """`cost`'s error on the torch replay's own iterations: median and p90 absolute percent error
    per iteration, and the bias of the total (percent)."""
    measured = np.array([s.t for s in real.samples])
    charged = np.array([predicted(cost, s) for s in real.samples])
    ape = 100 * _relative(charged, measured)
    return {"iterations": len(measured), "iteration_median_ape_pct": float(np.median(ape)),
            "iteration_p90_ape_pct": float(np.percentile(ape, 90)),
            "total_bias_pct": float(100 * (charged.sum() / measured.sum() - 1))}


def speed_ratio(real: Replay, cost: CostModel) -> float:
    """How much slower the machine ran `real`'s iterations than `cost` charges for them: their
    measured seconds over `cost`'s, summed (sums, as a makespan is one)."""
    return sum(s.t for s in real.samples) / sum(predicted(cost, s) for s in real.samples)


def realized_load(capacity: Replay, reals: list[Replay], rate: float) -> dict[str, list[float]]:
    """The capacity each torch replay in `reals` had, and the load `rate` was for it: the
    capacity measured on `capacity` (a `saturation_replay`) divided by how much slower than it the
    machine ran that replay (`speed_ratio` against a cost model fitted to `capacity`'s own
    iterations). A load is set from a capacity measured before the replays; on a shared machine
    whose speed drifts by tens of percent within a minute, the replays may not run at that speed,
    and this says at which load they did run. It assumes the fitted model's error is the same on
    the replays' smaller batches as on the capacity replay's, so it is a rough estimate: over
    fifteen runs it went with the share of requests queued more than 20 ms at a correlation of 0.67
    (the documentation's torch engine page)."""
    rps = summarize(list(capacity.records.values())).throughput_rps
    cost = fit_replay(capacity, "fitted to the capacity replay")
    realized = [rps / speed_ratio(real, cost) for real in reals]
    return {"capacity_realized_rps": realized, "load_realized": [rate / c for c in realized]}


def workload(groups: int, per_group: int, system_prompt_len: int, question_len: int, output_len: int,
             rate: float, seed: int) -> list[Request]:
    """The scaled-down shared-prefix benchmark (lengths in tokens, rate in requests/s): lengths
    drawn from [half, full], so prompts differ and long ones are chunked."""
    cfg = SharedPrefixConfig(num_groups=groups, prompts_per_group=per_group, system_prompt_len=system_prompt_len,
                             question_len=question_len, output_len=output_len, range_ratio=0.5, rate=rate,
                             num_bidders=min(groups, 8))
    return shared_prefix_workload(cfg, seed=seed)


def _write_requests(path: Path, real: Replay, sim: Replay) -> None:
    """One row per request: its TTFT, its wait before its first prefill began (the rest of its
    TTFT is its prefill) and its latency, in engine seconds, in both engines."""
    rank_real, rank_sim = real.ranks(), sim.ranks()
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "prompt_len", "output_len", "ttft_real_s", "ttft_sim_s", "wait_real_s", "wait_sim_s",
                    "latency_real_s", "latency_sim_s", "admit_rank_real", "admit_rank_sim", "retractions_real",
                    "retractions_sim"])
        for i in sorted(real.records):
            a, b = real.records[i], sim.records[i]
            w.writerow([i, a.prompt_len, a.output_len, a.ttft, b.ttft, a.admit - a.arrival, b.admit - b.arrival,
                        a.latency, b.latency, rank_real.get(i), rank_sim.get(i), a.retractions, b.retractions])


PERCENTILE_ROWS = tuple((f"{label} p{q} vs p{q}", f"{name}_p{q}_of_p{q}_pct")
                        for label, name in (("TTFT", "ttft"), ("latency", "latency")) for q in PERCENTILES)
ROWS = (("TTFT median", "ttft_median_pct"), ("TTFT p90", "ttft_p90_pct"), ("latency median", "latency_median_pct"),
        ("latency p90", "latency_p90_pct"), *PERCENTILE_ROWS, ("throughput", "throughput_pct"),
        ("makespan", "makespan_pct"))


def percentile_ranges(summary: dict) -> dict[str, dict[str, tuple[float, float] | None]]:
    """Each percentile error of `PERCENTILE_ROWS` (percent) as its range (min, max) over the
    comparisons of the simulator with each torch replay, and over those of the torch replays
    with the first one (None with a single replay): the second is how far the torch engine is
    from itself, the floor under the first."""
    def span(cells: list[dict], key: str) -> tuple[float, float] | None:
        return (min(c[key] for c in cells), max(c[key] for c in cells)) if cells else None

    return {key: {"sim_vs_torch": span(summary["sim_vs_torch"], key),
                  "torch_vs_torch": span(summary["torch_vs_torch"], key)} for _, key in PERCENTILE_ROWS}


def _markdown(summary: dict) -> str:
    """The summary as markdown tables: the percentile errors' ranges, then one column per
    comparison; errors in percent."""
    def text(span: tuple[float, float] | None, digits: int = 1) -> str:
        if span is None:
            return "-"
        lo, hi = (f"{v:.{digits}f}" for v in span)
        return lo if lo == hi else f"{lo}-{hi}"

    lines = ["| percentile error (%) | sim vs torch | torch vs torch |", "|---|---|---|"]
    for label, key in PERCENTILE_ROWS:
        spans = summary["percentiles"][key]
        lines.append(f"| {label} | {text(spans['sim_vs_torch'])} | {text(spans['torch_vs_torch'])} |")
    lines.append("")
    cols = [f"sim vs torch #{k + 1}" for k in range(len(summary["sim_vs_torch"]))]
    cols += [f"torch #{k + 2} vs #1" for k in range(len(summary["torch_vs_torch"]))]
    cells = summary["sim_vs_torch"] + summary["torch_vs_torch"]
    lines += ["| error (%) | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for label, key in ROWS:
        lines.append(f"| {label} | " + " | ".join(f"{c[key]:.1f}" for c in cells) + " |")
        if key.endswith("median_pct"):
            ci = key.replace("median", "median_ci95")
            lines.append(f"| {label} 95% CI | " + " | ".join("{:.1f}-{:.1f}".format(*c[ci]) for c in cells) + " |")
    for label, key in (("admit rank differs", "admit_rank_differs"), ("prefill batches same", "prefill_batches_same"),
                       ("retractions real/sim", None)):
        vals = [f"{c['retractions_real']}/{c['retractions_sim']}" if key is None else str(c[key]) for c in cells]
        lines.append(f"| {label} | " + " | ".join(vals) + " |")
    lines.append("")
    lines.append("| cost model on torch iterations | " + " | ".join(f"#{k + 1}" for k in range(len(summary["timing"])))
                 + " |")
    lines.append("|---|" + "---|" * len(summary["timing"]))
    for label, key in (("iteration median APE", "iteration_median_ape_pct"),
                       ("iteration p90 APE", "iteration_p90_ape_pct"), ("total bias", "total_bias_pct")):
        lines.append(f"| {label} (%) | " + " | ".join(f"{t[key]:.1f}" for t in summary["timing"]) + " |")
    if "load_realized" in summary:
        caps, loads = summary["capacity_realized_rps"], summary["load_realized"]
        lines += ["", f"Load {summary['load']} of the capacity measured first, {summary['capacity_rps']:.1f} "
                  f"requests/s; at the speed each scored replay ran (estimated): capacity "
                  f"{text((min(caps), max(caps)))} requests/s, load {text((min(loads), max(loads)), 2)}."]
    return "\n".join(lines) + "\n"


def fidelity(requests: list[Request], scheduler: str, config: EngineConfig, *, repeats: int = 2,
             train: list[Request] | None = None, out: Path | None = None, context: dict | None = None,
             capacity: Replay | None = None, **engine) -> dict:
    """Replay `requests` `repeats` times through the torch engine (`torch_engine(scheduler, config,
    **engine)`, one model, clock and speed reference shared) and once through the simulator with
    `config.cost_model`; returns (and writes to `out`, if given) the comparisons, with `context`'s
    entries (how the workload was made). With `train` (another draw of the workload), a torch
    replay of it runs interleaved with the scored ones (`replay_together`) and the simulator's cost
    model is fitted to it instead (`fit_replay`; written to `out`/costs.json). With `capacity`, the
    `saturation_replay` the arrival rate `context["rate"]` was set from, the summary also gives the
    load each scored replay ran at (`realized_load`)."""
    first = torch_engine(scheduler, config, **engine)  # the first replay's; the others share its model
    shared = {"model": first.model, "clock": first.timer.clock, "reference": first.reference}
    engines = [first] + [torch_engine(scheduler, config, **shared) for _ in range(repeats + (train is not None) - 1)]
    reals = replay_together(engines, ([train] if train is not None else []) + [requests] * repeats)
    if train is not None:
        fitted, *reals = reals
        config = replace(config, cost_model=fit_replay(fitted, "fitted to a torch replay of another draw"))
    sim = replay(SimEngine(scheduler, config), requests)
    summary = {
        "requests": len(requests), "scheduler": scheduler, "cost_model": config.cost_model.__dict__,
        "clock": first.timer.clock, "speed_reference": first.reference.every if first.reference else 0,
        **(context or {}),
        "sim_vs_torch": [compare(real, sim) for real in reals],
        "torch_vs_torch": [compare(reals[0], real) for real in reals[1:]],
        "timing": [timing_error(real, config.cost_model) for real in reals],
        "wall_s": {"sim": round(sim.wall_s, 2), "torch": [round(r.wall_s, 2) for r in reals]},
    }
    summary["percentiles"] = percentile_ranges(summary)
    if capacity is not None:
        summary |= realized_load(capacity, reals, summary["rate"])
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if train is not None:
            config.cost_model.to_json(out / "costs.json")
        for k, real in enumerate(reals):
            _write_requests(out / f"requests_{k + 1}.csv", real, sim)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        (out / "summary.md").write_text(_markdown(summary))
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=output_folder, default=Path("fidelity"), help="output folder (default fidelity/)")
    parser.add_argument("--cost-model", type=cost_model_file, default=None,
                        help="calibrated cost model JSON to use (default: calibrate now into OUT/costs.json)")
    parser.add_argument("--scheduler", default="lpm", help="scheduler of both engines (default lpm)")
    parser.add_argument("--preset", default="tiny", help="model preset (default tiny)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--seed", type=random_seed, default=0, help="seed of the workload and of the weights (default 0)")
    parser.add_argument("--repeats", type=positive_int, default=2, help="torch replays (default 2; >= 2 gives the "
                        "noise floor)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--clock", default=None,
                        help="what the torch engine's iteration seconds count on a CPU: cpu (default), its "
                        "thread's CPU time, without waits for a core other processes hold (needs "
                        "--threads 1); or wall, elapsed time, right only on an otherwise idle machine")
    parser.add_argument("--speed-reference", type=non_negative_int, default=0, metavar="N",
                        help="every N iterations, time a fixed decode step and scale the torch engines' "
                        "iteration times, the capacity replay's included, by the machine's nominal over current "
                        "speed (default 0: off)")
    g = parser.add_argument_group("workload (shared-prefix benchmark, scaled down)")
    g.add_argument("--groups", type=positive_int, default=8, help="system prompts (default 8)")
    g.add_argument("--prompts-per-group", type=positive_int, default=64,
                   help="requests per system prompt (default 64: 512 requests, so that percentiles are tight "
                   "enough to compare; at 128 the torch replays' latency p50 differed by up to 12%%)")
    g.add_argument("--system-prompt-len", type=positive_int, default=512, help="tokens (default 512)")
    g.add_argument("--question-len", type=positive_int, default=64, help="tokens (default 64)")
    g.add_argument("--output-len", type=positive_int, default=128, help="tokens (default 128)")
    load = g.add_mutually_exclusive_group()
    load.add_argument("--load", type=positive_float, default=0.6,
                      help="arrival rate as a share of the torch engine's capacity on this workload, measured "
                      "first (requests/s on its clock with every request arriving at once; default 0.6), so "
                      "the measurement is as far from saturation on any machine")
    load.add_argument("--rate", type=positive_float, default=None,
                      help="a fixed arrival rate in requests/s instead of --load (how far below capacity it is "
                      "depends on the machine and, with --clock wall, on what else runs on it)")
    e = parser.add_argument_group("engine (both engines)")
    e.add_argument("--kv-capacity", type=positive_int, default=4000, help="KV pool in tokens (default 4000)")
    e.add_argument("--chunked-prefill-size", type=positive_int, default=256, help="tokens (default 256)")
    e.add_argument("--max-running", type=positive_int, default=32, help="max running requests (default 32)")
    e.add_argument("--reservation", choices=RULES, default="sglang",
                   help="the engine's rule set, registered in auction_gym.engine.rules.RULES (default sglang)")
    c = parser.add_argument_group("calibration (without --cost-model)")
    c.add_argument("--calibration", choices=("replay", "grid"), default="replay",
                   help="fit the cost model to a torch replay of another draw of the workload (default), or "
                   "profile the grid of `radix-auction calibrate`")
    c.add_argument("--calibration-repeats", type=positive_int, default=3,
                   help="grid: timed runs per point (default 3)")
    c.add_argument("--statistic", choices=sorted(STATISTICS), default="median",
                   help="grid: time kept per point (default median: the engine's own timings include interference)")
    c.add_argument("--max-context", type=positive_int, default=2048,
                   help="grid: longest sequence profiled (default 2048)")


def _cost_model(args: argparse.Namespace) -> CostModel | None:
    """--cost-model's, one calibrated now on the profiling grid (written to OUT/costs.json), or
    None: `fidelity` fits one to a replay of another draw of the workload (seed + 1), so the fit
    never sees the iterations it is scored on."""
    if args.cost_model is not None:
        return CostModel.from_json(args.cost_model)
    if args.calibration == "replay":
        return None
    path = args.out / "costs.json"
    calibrate(path, args.preset, args.device, seed=args.seed, clock=args.clock, repeats=args.calibration_repeats,
              max_prefill=args.chunked_prefill_size, max_context=args.max_context, pool_tokens=40_000,
              statistic=args.statistic, progress=False)
    return CostModel.from_json(path)


def run(args: argparse.Namespace) -> dict:
    """Calibrate (unless --cost-model), set the arrival rate (--rate, or --load x the measured
    capacity), replay, print the table and write the files."""
    import torch

    if args.scheduler not in scheduler_names():
        raise UsageError(f"unknown --scheduler {args.scheduler!r}; valid: {', '.join(scheduler_names())}")
    checked_device(args.device)
    clock = checked_clock(args.clock, args.threads, args.device)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    config = EngineConfig(kv_capacity_tokens=args.kv_capacity, chunked_prefill_size=args.chunked_prefill_size,
                          max_running_requests=args.max_running, reservation=args.reservation)
    # the model (and speed reference) that the capacity replay and every torch replay after it share
    first = torch_engine(args.scheduler, config, preset=args.preset, device=args.device, seed=args.seed, clock=clock)
    reference = None
    if args.speed_reference:
        from gpu_backend.speed_reference import SpeedReference, decode_probe

        reference = SpeedReference(decode_probe(first.model, first.timer), every=args.speed_reference)
    engine = {"model": first.model, "clock": clock, "reference": reference}
    shape = (args.groups, args.prompts_per_group, args.system_prompt_len, args.question_len, args.output_len)
    rate, capacity, saturated = args.rate, None, None
    if rate is None:  # on the speed reference the replays share, so that the load holds as the machine drifts
        saturated = saturation_replay(torch_engine(args.scheduler, config, **engine), workload(*shape, 1.0, args.seed + 1))
        capacity = summarize(list(saturated.records.values())).throughput_rps
        rate = args.load * capacity
        print(f"capacity {capacity:.1f} requests/s on the {clock} clock; --load {args.load} -> {rate:.1f}/s")
    cost = _cost_model(args)
    train = workload(*shape, rate, args.seed + 1) if cost is None else None
    arrivals = {"rate": rate, "capacity_rps": capacity, "load": args.load if capacity else None}
    config = config if cost is None else replace(config, cost_model=cost)
    summary = fidelity(workload(*shape, rate, args.seed), args.scheduler, config, repeats=args.repeats, train=train,
                       out=args.out, context=arrivals, capacity=saturated, **engine)
    print(_markdown(summary))
    print(f"wall s: {summary['wall_s']}; written to {args.out}/")
    return summary


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.fidelity ...`: the same as `radix-auction fidelity ...`."""
    run_command("fidelity", argv)


if __name__ == "__main__":
    main()

"""Reproduce the paper's findings: latency blow-up and hit-rate collapse of strict priority, and the
share of its welfare gain that the radix-tree auction keeps.

    radix-auction reproduce [--quick] [--trace PATH] [--seeds K] [--cost-model tokens|unit] [--out results/]
                            [--jobs N] [--address local|auto|HOST:PORT]

Every policy (the paper's, `PAPER_POLICIES`: fcfs, lpm, klpm, dfs_weight, strict_vcg, radix_vcg,
and the radix auction under the other cost model, `radix_vcg/unit` by default; with
`--every-mechanism` every registered mechanism) replays the same workloads (same seeds, so the same
arrivals, prompts and bids) through the simulated engine, over a sweep of load and KV capacity,
with truthful bids and unlimited budgets (the auctions' payments are charged as the market charges
them, docs/design.md section 3). Workloads: every registered one with a `LoadSweep`
(`experiments.sweeps`, which holds each one's grid, arguments and saturating arrival setting): agentic traffic, SGLang's generated-shared-prefix benchmark
(`auction_gym.workload.shared_prefix`), and the Mooncake conversation trace.

Trace (`reproduce_trace.py`): `--trace`, by default the first of DEFAULT_TRACES that exists: the
full conversation trace named by $RADIX_AUCTION_MOONCAKE_TRACE when set, else the 1,000-line
slice the package ships (`auction_gym.workload.SAMPLE_TRACE`). The slice is the trace's first 1,000 lines,
unmodified, and no sweep replays more (the mooncake grids' `limit`), so either gives the same rows. The
run says which trace it uses (or that none is found, and then leaves the Mooncake workload out), and
parses the lines the sweep will replay before the sweep starts: a malformed trace fails at once,
naming the file and line, and so does one the sweep cannot use (fewer than two requests, or none
that fits a KV capacity of the sweep); it also says how many requests the engine will reject for
want of KV capacity.

Outputs, under `--out`: reproduce.csv gets its header at the start and the rows of each (workload,
KV capacity, seed) as its last load finishes (in completion order, also with `--jobs` > 1 and on
Ray with `--address`, `experiments.executor`), so an interrupted or failed sweep keeps every one it
finished; a complete run then rewrites it in the sweep's order (workload, KV capacity, seed, load, policy). reproduce.md and the figures are written
at the end (`reproduce_report.py`; the figures drawn by the workers), followed by the run's wall
time. A workload on which no request finishes (every one rejected for KV capacity) fails the sweep
with an error instead of NaN rows, once the rest of the sweep has run.

Tasks (`run_sweep`): each (workload, KV capacity, seed)'s capacity run, then each of its loads, in
one pool of `--jobs` processes forked once (`Executor.session`), so that the workers share the
loads of the longest workload and start without importing the simulator again.

Definitions (per workload, KV capacity and seed):
- load: arrival rate / capacity, where capacity is the throughput (requests/s) LPM sustains on the
  same workload when saturated (arrivals at its `LoadSweep.saturating`).
- throughput: finished requests / (last finish - first arrival); sustainable_throughput: a
  policy's throughput at the highest load of the sweep, where every policy is saturated, i.e. the
  rate at which it serves when its queue never empties.
- model_welfare: docs/design.md's W = -sum_r w_r x C_r with true urgencies and C under the auctions'
  cost model (`--cost-model`; "unit": C_k = k), of the policy's order of each queue snapshot,
  averaged over the snapshots. The snapshots are identical for every policy: the waiting queues
  (and what of each request was cached) at each round of the FCFS run.
- welfare_capture (radix rows): (W_radix - W_fcfs) / (W_strict - W_fcfs) of model welfare, NaN
  where W_strict - W_fcfs is under 5% of |W_fcfs|.
- realized_welfare: sum over finished requests of V - w x latency; realized_capture (radix rows):
  the same ratio of realized welfare, NaN where strict priority does not realize 5% of |RW_fcfs|
  more than FCFS (at high load it realizes less: its queue, not its order, decides).
- revenue: payments charged.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from auction_gym import RadixCache
from auction_gym.market import Market, MarketConfig
from auction_gym.mechanism.queue_tree import build_queue_tree, compiled_memo, weighted_costs
from auction_gym.mechanism.radix_auction import RadixTreeAuction
from auction_gym.policy import AdmissionPolicy, WaitingRound
from auction_gym.prefix_matcher import PrefixMatcher
from auction_gym.registry import mechanism_names
from auction_gym.request import Request
from auction_gym.scheduler import KLPM, DFSWeight, make_scheduler
from auction_gym.workload import get_workload

from ..argtypes import output_folder, positive_int, trace_file
from ..cli import run_command
from ..errors import UsageError
from ..executor import Executor, add_address_argument, executor_of
from ..provenance import made_by
from ..sweeps import load_sweep
from .reproduce_report import write_report
from .reproduce_sweep import AUCTION, NUM_BIDDERS, Sweep, sweep_of
from .reproduce_trace import DEFAULT_TRACES, natural_rate, pick_trace

COST_MODELS = ("tokens", "unit")
COLUMNS = (
    "workload", "policy", "load", "kv_capacity", "seed", "mean_latency", "p99_latency", "mean_ttft",
    "hit_rate", "throughput", "sustainable_throughput", "model_welfare", "realized_welfare",
    "revenue", "welfare_capture", "realized_capture",
)


PAPER_POLICIES = ("fcfs", "lpm", "klpm", "dfs_weight", "strict_vcg", AUCTION)
"""The policies the paper compares, the sweep's by default: the market designs it argues against
are `radix-auction markets`' to compare."""


def policies(cost_model: str, every: bool = False) -> tuple[str, ...]:
    """The sweep's policies: the paper's (or, `every`, every registered mechanism,
    `auction_gym.registry`), then the radix auction under the other cost model, named
    "radix_vcg/<model>"."""
    other = next(m for m in COST_MODELS if m != cost_model)
    return (mechanism_names() if every else PAPER_POLICIES) + (f"{AUCTION}/{other}",)


CAPTURE_MIN_GAIN = 0.05
"""Welfare capture is left out (NaN) where strict priority gains less than this share of FCFS's
welfare: near zero load the ratio of two tiny differences says nothing."""
QUICK_WALL_TIME = "about 2.5 s on 2 idle cores (about 10 s on the Python core)"
"""`--quick`'s wall time on the compiled core, quoted by --help (2 jobs)."""


def split_policy(policy: str, cost_model: str) -> tuple[str, str]:
    """(mechanism, its auction cost model) of a sweep policy name such as "radix_vcg/unit"."""
    mechanism, _, model = policy.partition("/")
    return mechanism, model or cost_model


def replay_config(workload: str, kv: int, rate_or_scale: float, sweep: Sweep, policy: str,
                  trace: Path | None, cost_model: str = "tokens") -> MarketConfig:
    """A market that replays one workload to its end under `policy`, truthful and unbudgeted, with
    its arrival intensity (`WorkloadEntry.intensity`: a rate or a time scale) at `rate_or_scale`."""
    wk = {**sweep.grids[workload].kwargs, get_workload(workload).intensity: rate_or_scale}
    mechanism, model = split_policy(policy, cost_model)
    return MarketConfig(
        num_bidders=NUM_BIDDERS, mechanism=mechanism, cost_model=model, workload=workload, trace_path=trace,
        workload_kwargs=wk, engine_kwargs={"kv_capacity_tokens": kv, "max_running_requests": 256},
        horizon=10**9, budget=1e18, warmup=0.0,
    )


class QueueSnapshot:
    """One round's waiting queue and each request's cached length, read as (request, cached)
    pairs: two lists, not a tuple per request, which a replay records every round of the FCFS run
    and `snapshot_welfare` reads at most `Sweep.max_snapshots` of."""

    __slots__ = ("queue", "cached")

    def __init__(self, queue: list[Request], cached: list[int]) -> None:
        self.queue, self.cached = queue, cached

    def __iter__(self) -> Iterator[tuple[Request, int]]:
        return zip(self.queue, self.cached)

    def __len__(self) -> int:
        return len(self.queue)


def replay(config: MarketConfig, seed: int, snapshots: list | None = None) -> dict[str, float]:
    """Run a market to the end with every multiplier 1; metrics of the run. With `snapshots`, also
    record each round's waiting queue with the cached length of every waiting request."""
    market = Market(config)
    market.reset(seed)
    ones = np.ones(config.num_bidders)
    revenue = welfare = 0.0
    # Each waiting request's cached prefix of all but its last token (what the engine can reuse),
    # re-matched only where the cache changed since the round before: it only reads the cache.
    matcher = None if snapshots is None else PrefixMatcher()
    while not market.done:
        report = market.step(ones)
        revenue += report.revenue
        welfare += report.welfare
        if matcher is not None and (waiting := market.engine.waiting):
            matcher.update(waiting, market.engine.cache)
            snapshots.append(QueueSnapshot(list(waiting), list(map(matcher.length_of.__getitem__, waiting))))
    m = market.engine.metrics()
    return {"mean_latency": m.mean_latency, "p99_latency": m.p99_latency, "mean_ttft": m.mean_ttft,
            "hit_rate": m.hit_rate, "throughput": m.throughput_rps, "realized_welfare": welfare,
            "revenue": revenue, "finished": m.finished}


def snapshot_welfare(snapshots: list, names: tuple[str, ...], limit: int,
                     cost_model: str = "tokens") -> dict[str, float]:
    """Per policy of `names`, the mean over queue snapshots of W = -sum_r w_r x C_r under its
    order, with C from the auctions' `cost_model` ("unit": C_k = k; "tokens": uncached prefix
    tokens of the first k requests + k, docs/design.md section 3).

    Each snapshot is rebuilt as a cache holding exactly each request's cached prefix, which gives
    every request the match it had (cache-aware policies order by those), without touching the
    run. What every policy reads is built once per snapshot and shared: the queue's tree, which C
    reads, and the round (`WaitingRound`: the cache and each whole prompt's match in it, an edge
    split where the match ends, as DFS-weight's matcher splits it: a split changes no match), which
    a policy only reads (it never inserts, locks or evicts). Each policy is built fresh per
    snapshot, so none carries state over, but the radix auction (`kept_across_snapshots`), whose
    kept tree gives the from-scratch order bit for bit: it follows the queue from snapshot to
    snapshot instead of rebuilding it.
    """
    if not snapshots:
        return dict.fromkeys(names, math.nan)
    mechanisms = {p: split_policy(p, cost_model) for p in names}
    picks = np.linspace(0, len(snapshots) - 1, min(limit, len(snapshots))).round().astype(int)
    totals = dict.fromkeys(names, 0.0)
    kept: dict[str, AdmissionPolicy] = {}
    memo = compiled_memo()
    for k in picks:
        queue = [r for r, _ in snapshots[k]]
        prefix_lens = [cached for _, cached in snapshots[k]]
        tokens = [r.tokens for r in queue]
        tree = build_queue_tree(tokens, None if cost_model == "unit" else prefix_lens, memo)
        cache = RadixCache()
        cache.insert_prefixes(tokens, prefix_lens)
        matched = cache.peek_prefixes(tokens, split=True)
        # The round's lengths as an engine passes them, what a policy reads from the cache without
        # them: so the compiled orders take the round.
        waiting = WaitingRound(queue, cache, length_of=dict(zip(queue, [n for n, _ in matched])))
        orders = []
        for policy, (mechanism, model) in mechanisms.items():
            scheduler = kept.get(policy) or AdmissionPolicy.adopt(make_scheduler(mechanism, model))
            if kept_across_snapshots(scheduler):
                kept[policy] = scheduler
            orders.append(first_order(scheduler, waiting, matched))
        for policy, cost in zip(mechanisms, weighted_costs(tree, queue, orders, 1.0, [r.urgency for r in queue])):
            totals[policy] -= cost
    return {p: total / len(picks) for p, total in totals.items()}


def first_order(scheduler: AdmissionPolicy, waiting: WaitingRound, matched: list[tuple[int, Any]]) -> list[Request]:
    """`scheduler.admit(waiting)`'s order, `scheduler` built for the round or kept
    (`kept_across_snapshots`); `matched`, each request's `RadixCache.peek` of its whole prompt with
    the edge split where it ends, from which k-LPM and DFS-weight order the round without their
    matchers (`first_round_order`)."""
    order = scheduler.first_round_order(waiting, matched) if isinstance(scheduler, (KLPM, DFSWeight)) else None
    return scheduler.admit(waiting)[0] if order is None else order


def kept_across_snapshots(scheduler: AdmissionPolicy) -> bool:
    """Whether `snapshot_welfare` keeps `scheduler` from snapshot to snapshot: the radix auction
    itself (not a subclass, which may keep other state), whose round over a queue is decided over
    its kept tree, the from-scratch build's bit for bit (docs/economic-model.md section 3, "The
    allocation kept across rounds"), so a kept one orders each snapshot as a fresh one does."""
    return type(scheduler) is RadixTreeAuction


def capacity(workload: str, kv: int, sweep: Sweep, trace: Path | None, seed: int) -> float:
    """Requests/s that LPM serves on this workload when saturated (arrivals at its
    `LoadSweep.saturating`). UsageError where nothing can run (the market's error, with the point
    named): every load's rows would be NaN."""
    cfg = replay_config(workload, kv, load_sweep(workload).saturating, sweep, "lpm", trace)
    try:
        return replay(cfg, seed)["throughput"]
    except ValueError as e:
        raise UsageError(f"the {workload} workload at {kv} KV tokens (seed {seed}): {e}") from None


def capture(values: dict[str, float]) -> float:
    """(radix - fcfs) / (strict - fcfs) of a welfare measure; NaN where strict gains too little."""
    gain = values["strict_vcg"] - values["fcfs"]
    if not gain > CAPTURE_MIN_GAIN * abs(values["fcfs"]):
        return math.nan
    return (values[AUCTION] - values["fcfs"]) / gain


def _nothing(*_: object) -> None:
    pass


def run_point(workload: str, kv: int, load: float, setting: float, seed: int, sweep: Sweep,
              trace: Path | None, cost_model: str, names: tuple[str, ...],
              tick: Callable[[], object] = _nothing) -> list[dict]:
    """Every row of the policies `names` at one (workload, KV capacity, load, seed), but its
    sustainable throughput (`sustained`); `tick()` after each run."""
    snapshots: list = []
    rows = []
    for policy in names:
        cfg = replay_config(workload, kv, setting, sweep, policy, trace, cost_model)
        row = replay(cfg, seed, snapshots if policy == "fcfs" else None)
        row.update(workload=workload, policy=policy, load=load, kv_capacity=kv, seed=seed)
        rows.append(row)
        tick()
    welfare = snapshot_welfare(snapshots, names, sweep.max_snapshots, cost_model)
    realized = {r["policy"]: r["realized_welfare"] for r in rows}
    for row in rows:
        row["model_welfare"] = welfare[row["policy"]]
        is_radix = row["policy"] == AUCTION
        row["welfare_capture"] = capture(welfare) if is_radix else math.nan
        row["realized_capture"] = capture(realized) if is_radix else math.nan
    return rows


def settings(workload: str, kv: int, seed: int, sweep: Sweep, trace: Path | None,
             tick: Callable[[], object] = _nothing) -> list[float] | UsageError:
    """The arrival intensity (`WorkloadEntry.intensity`) of each load of one (workload, KV capacity,
    seed), from its capacity run; `tick()` after it. Its UsageError (`capacity`) returned, not
    raised: the sweep runs every other task before it reports it."""
    try:
        cap = capacity(workload, kv, sweep, trace, seed)
    except UsageError as e:
        return e
    tick()
    # A time scale multiplies the arrival times: the one that gives `rate` is the natural rate / rate.
    scaled = get_workload(workload).intensity == "time_scale"
    natural = natural_rate(workload, trace, sweep) if scaled else None
    return [natural / (load * cap) if scaled else load * cap for load in sweep.grids[workload].loads]


def sustained(rows: list[dict]) -> list[dict]:
    """`rows`, every point of one (workload, KV capacity, seed), each given its policy's throughput
    at the highest load: its sustainable throughput."""
    top = max(r["load"] for r in rows)
    saturated = {r["policy"]: r["throughput"] for r in rows if r["load"] == top}
    for row in rows:
        row["sustainable_throughput"] = saturated[row["policy"]]
    return rows


def run_sweep(sweep: Sweep, seeds: int, trace: Path | None, cost_model: str = "tokens",
              progress: bool = True, executor: Executor = Executor(),
              on_task: Callable[[list[dict]], object] = _nothing, every: bool = False) -> list[dict]:
    """Every (workload, KV capacity, load, seed, policy) row, for the paper's policies or, `every`,
    every registered one; see the module docstring.

    The work runs where `executor` says (`experiments.executor`), in two stages of tasks: each
    (workload, KV capacity, seed)'s capacity run, then each of its loads (`run_point`, the highest
    loads first), so that the workers share the loads of the longest one. `on_task(rows)` gets each
    (workload, KV capacity, seed)'s rows as soon as its last load finishes. Every task is deterministic, so the rows are the
    same wherever they ran. A (workload, KV capacity, seed) where nothing can run is reported (its
    UsageError raised) once every other one has run.
    """
    from tqdm import tqdm

    names = policies(cost_model, every)
    groups = [(workload, kv, seed) for workload, grid in sweep.grids.items() for kv in grid.kv_capacities
              if trace is not None or workload not in sweep.traced() for seed in range(seeds)]
    loads = {w: sweep.grids[w].loads for w, _, _ in groups}
    total = sum(len(loads[w]) * len(names) + 1 for w, _, _ in groups)
    # The workers start before the progress bar's thread: they may fork (`Executor.session`).
    with executor.session(fork=True) as session, tqdm(total=total, desc="reproduce", disable=not progress) as bar:
        inline = session.inline
        tick = (bar.update,) if inline else ()  # inline, the bar moves after every replay; else after every task

        def ran(count: int) -> Callable[[int, object], None]:
            return _nothing if inline else lambda i, _: bar.update(count)

        intensities = session.map(settings, [(*group, sweep, trace, *tick) for group in groups], ran(1))
        runnable = [(g, s) for g, s in zip(groups, intensities) if not isinstance(s, UsageError)]
        points = [(w, kv, load, setting, seed, sweep, trace, cost_model, names, *tick)
                  for (w, kv, seed), s in runnable for load, setting in zip(loads[w], s)]
        # The highest loads first: they replay the most rounds, so the workers end close together
        # on the small tasks of the low loads (the sweep's order is restored below).
        dispatched = sorted(range(len(points)), key=lambda i: -points[i][2])
        finished: dict[tuple, dict[int, list[dict]]] = {g: {} for g, _ in runnable}
        counted = ran(len(names))

        def finish(j: int, rows: list[dict]) -> None:
            counted(j, rows)
            i = dispatched[j]
            w, kv, _, _, seed, *_ = points[i]
            group = finished[(w, kv, seed)]
            group[i] = rows
            if len(group) == len(loads[w]):
                on_task(sustained([row for k in sorted(group) for row in group[k]]))

        ran_points = session.map(run_point, [points[i] for i in dispatched], finish)
    if failed := [s for s in intensities if isinstance(s, UsageError)]:
        raise failed[0]
    by_point = dict(zip(dispatched, ran_points))
    return [row for i in range(len(points)) for row in by_point[i]]


@contextmanager
def csv_rows(path: Path) -> Iterator[Callable[[list[dict]], None]]:
    """Write the CSV header (COLUMNS) to `path`, then give a function that appends rows, each batch
    flushed to disk at once so that an interrupted run keeps it."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()

        def append(rows: list[dict]) -> None:
            writer.writerows(rows)
            f.flush()

        f.flush()
        yield append


def write_csv(rows: list[dict], path: Path) -> None:
    """`rows` as a CSV of COLUMNS at `path`."""
    with csv_rows(path) as append:
        append(rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help=f"small sweep, {QUICK_WALL_TIME}")
    parser.add_argument("--trace", type=trace_file, default=None,
                        help="Mooncake conversation trace (default: the first of "
                        f"{', '.join(map(str, DEFAULT_TRACES))} that exists)")
    parser.add_argument("--seeds", type=positive_int, default=None,
                        help="seeds per point (default 1 quick, 3 full)")
    parser.add_argument("--out", type=output_folder, default=Path("results"),
                        help="folder for reproduce.csv, reproduce.md and the figures (default results)")
    parser.add_argument("--jobs", type=positive_int, default=len(os.sched_getaffinity(0)),
                        help="processes to run (workload, KV size, seed) tasks in (default: every core)")
    add_address_argument(parser)
    parser.add_argument("--cost-model", choices=COST_MODELS, default="tokens",
                        help="the auctions' completion model and the one model welfare is measured in "
                        "(default tokens, cache-aware); the radix auction under the other one is reported "
                        "beside it")
    parser.add_argument("--every-mechanism", action="store_true",
                        help=f"every registered mechanism, not only the paper's ({', '.join(PAPER_POLICIES)}): "
                        "about twice the time; the market designs are compared by `radix-auction markets`")


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    executor = executor_of(args)
    sweep = sweep_of("quick" if args.quick else "full")
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    trace = pick_trace(args.trace, sweep)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "reproduce.csv"
    # The sweep's stages and the figures share the workers, forked from this process, which runs
    # no other thread and imported what they run (`Executor.session`).
    with executor.session(fork=True) as session:
        with csv_rows(path) as append:
            rows = run_sweep(sweep, seeds, trace, args.cost_model, executor=session, on_task=append,
                             every=args.every_mechanism)
        write_csv(rows, path)  # the sweep's order, not the order tasks finished in
        print(write_report(rows, args.out, args.cost_model, made_by(args), session))
    print(f"reproduce: {len(rows)} rows in {time.perf_counter() - started:.0f} s wall time ({executor.where()})")


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.commands.reproduce ARGS`: `radix-auction reproduce ARGS`, with its error handling."""
    run_command("reproduce", argv)


if __name__ == "__main__":
    main()

"""Routers x admission policies x replicas x workloads x load over a cluster of simulated engines.

Each point replays a workload through a market (`auction_gym.market.Market`) of `replicas`
engines behind a router, every bidder truthful (multiplier 1) with an unlimited budget, until the
workload runs dry; so the auctions charge their VCG payments (revenue) and every policy is
measured alike. Load is per replica: arrival rate = load x replicas x one engine's base rate
(agentic: `MarketConfig.served_rate()`, 14.5/s; shared prefix: 8/s, SharedPrefixConfig's; the
Mooncake trace: arrival times / (load x replicas) at time scale 4), and the generated workloads
grow with the replicas (requests x replicas) so each replica serves about as many requests.

Per point: hit rate, mean TTFT and latency (simulated s), throughput (finished requests per
simulated s), load imbalance (max / mean time-averaged running requests per replica,
`auction_gym.cluster.load_imbalance`), welfare (sum of V - w x latency) and revenue (payments),
and the wall time. Outputs under --out: cluster.csv, cluster.md (the command, machine and date that
made it, the table, then the targets read off it: `targets`, and links to the figures) and figures
cluster_hit_rate.png, cluster_imbalance.png, cluster_latency.png; with --kv-weights also
cluster_kv_weight.png.

`--kv-weights` adds rows of Dynamo's KV router at non-default overlap weights, labelled
`kv_overlap(w=X)` (the `kv_overlap` rows keep Dynamo's default, 1.0). `--merge` renders the
outputs from CSVs of earlier runs (e.g. one run per workload, run side by side) instead of running.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from auction_gym.cluster import ROUTERS, load_imbalance
from auction_gym.market import MECHANISMS, Market, MarketConfig
from auction_gym.workload import get_workload

from ..argtypes import (
    names,
    non_negative_floats,
    output_folder,
    positive_floats,
    positive_int,
    positive_ints,
    trace_file,
)
from ..provenance import figure_links, made_by
from ..sweeps import replica_scale, replica_scaled
from .reproduce_trace import SLICE, full_trace

TRACE = next((p for p in (full_trace(),) if p is not None and p.is_file()), SLICE)
"""The full Mooncake trace named by $RADIX_AUCTION_MOONCAKE_TRACE, else the 1,000-line test slice
(too short for replicas x size lines at 8 or more replicas)."""
KV_OVERLAP = "kv_overlap"


def cluster_workloads() -> tuple[str, ...]:
    """The registered workloads that say how they scale to many replicas (`experiments.sweeps.ReplicaScale`)."""
    return replica_scaled()


def full_grid() -> dict[str, list]:
    """The full sweep's grid: every registered router and cluster workload, as registered now."""
    return {"routers": list(ROUTERS), "policies": ["fcfs", "lpm", "radix_vcg", "strict_vcg"],
            "replicas": [1, 4, 8, 16], "workloads": list(cluster_workloads()), "loads": [0.7, 1.0]}


QUICK = {"routers": ["round_robin", "least_load", "prefix_hash", "cache_aware", "kv_overlap", "oracle_prefix"],
         "policies": ["lpm", "radix_vcg", "strict_vcg"], "replicas": [1, 8],
         "workloads": ["mooncake", "shared_prefix"], "loads": [1.0]}


@dataclass
class Point:
    workload: str
    policy: str
    router: str
    replicas: int
    load: float
    requests: int
    hit_rate: float
    mean_ttft: float
    mean_latency: float
    throughput_rps: float
    imbalance: float
    welfare: float
    revenue: float
    wall_s: float


def scenario(workload: str, policy: str, router: str, replicas: int, load: float, size: int,
             trace: Path, router_kwargs: dict | None = None) -> MarketConfig:
    """The market of one point; `size` scales the generated workloads' requests per replica."""
    multi = replicas > 1
    common = dict(num_bidders=4, mechanism=policy, replicas=replicas, horizon=10**9, budget=1e12, warmup=0.0,
                  router=router if multi else "identity", router_kwargs=dict(router_kwargs or {}) if multi else {})
    entry, scale = get_workload(workload), replica_scale(workload)
    if scale is None:
        raise ValueError(f"workload {workload!r} does not say how it scales to replicas (experiments.sweeps)")
    return MarketConfig(workload=workload, trace_path=trace if entry.trace_argument is not None else None,
                        workload_kwargs=scale.workload_kwargs(entry.intensity, load * replicas, size, replicas),
                        engine_kwargs=dict(scale.engine_kwargs), **common)


def run_point(config: MarketConfig, load: float, label: str | None = None, seed: int = 0) -> Point:
    """Replay the scenario to the end with truthful bidders; one row, its router named `label`
    (default: the router's name; "-" for one replica)."""
    t0 = time.perf_counter()
    market = Market(config)
    market.reset(seed)
    welfare = revenue = 0.0
    ones = [1.0] * config.num_bidders
    while not market.done:
        report = market.step(ones)
        welfare += report.welfare
        revenue += report.revenue
    engine = market.engine
    m = engine.metrics()
    multi = config.replicas > 1
    return Point(config.workload, config.mechanism, (label or config.router) if multi else "-",
                 config.replicas, load, m.finished, m.hit_rate, m.mean_ttft, m.mean_latency, m.throughput_rps,
                 load_imbalance(engine) if multi else 1.0, welfare, revenue, time.perf_counter() - t0)


def kv_label(weight: float) -> str:
    """The row label of Dynamo's KV router at a non-default overlap weight."""
    return f"{KV_OVERLAP}(w={weight:g})"


def router_variants(routers: list[str], kv_weights: list[float]) -> list[tuple[str, str, dict]]:
    """(label, router, its kwargs): every router of the grid at its defaults, then the KV router
    at each of `kv_weights`."""
    return [(r, r, {}) for r in routers] + [(kv_label(w), KV_OVERLAP, {"overlap_weight": w}) for w in kv_weights]


def sweep(grid: dict, size: int, trace: Path, kv_weights: list[float] = (), log=print) -> list[Point]:
    """Every point of the grid; one replica is run once per policy (no router to vary)."""
    points, seen = [], set()
    for w, load, n, policy, (label, router, kwargs) in itertools.product(
            grid["workloads"], grid["loads"], grid["replicas"], grid["policies"],
            router_variants(grid["routers"], list(kv_weights))):
        key = (w, load, n, policy, label if n > 1 else "-")
        if key in seen:
            continue
        seen.add(key)
        p = run_point(scenario(w, policy, router, n, load, size, trace, kwargs), load, label)
        log(f"{w} load {load} x{n} {policy} {key[-1]}: hit {p.hit_rate:.3f} lat {p.mean_latency:.2f} "
            f"imb {p.imbalance:.2f} ({p.wall_s:.1f} s)")
        points.append(p)
    return points


def read_csv(path: Path) -> list[Point]:
    """The rows `write_csv` wrote, typed back by `Point`'s fields."""
    types = {name: field.type for name, field in Point.__dataclass_fields__.items()}
    cast = {"str": str, "int": int, "float": float}
    with open(path, newline="") as f:
        return [Point(**{k: cast[types[k]](v) for k, v in row.items()}) for row in csv.DictReader(f)]


def write_csv(points: list[Point], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(points[0])))
        writer.writeheader()
        writer.writerows(asdict(p) for p in points)


def markdown(points: list[Point]) -> str:
    head = ("| workload | load | replicas | policy | router | hit rate | TTFT s | latency s | req/s | "
            "imbalance | welfare | revenue |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [f"| {p.workload} | {p.load:g} | {p.replicas} | {p.policy} | {p.router} | {p.hit_rate:.3f} | "
            f"{p.mean_ttft:.2f} | {p.mean_latency:.2f} | {p.throughput_rps:.2f} | {p.imbalance:.2f} | "
            f"{p.welfare:.4g} | {p.revenue:.3g} |" for p in points]
    return "\n".join([head, *rows])


def figures(points: list[Point], out: Path) -> list[Path]:
    """Hit rate, imbalance and latency against replicas, a line per router, a panel per workload
    (LPM admission; latency: strict priority / radix auction, the blow-up per router), at the
    lowest load of the grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    load = min(p.load for p in points)
    points = [p for p in points if p.load == load]
    workloads = sorted({p.workload for p in points})
    routers = [r for r in ROUTERS if any(p.router == r for p in points)]
    paths = []
    for field, policy, label in (("hit_rate", "lpm", "hit rate (LPM)"), ("imbalance", "lpm", "load imbalance (LPM)"),
                                 ("blowup", None, "latency strict / radix")):
        fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 3.6), squeeze=False)
        for ax, w in zip(axes[0], workloads):
            for r in routers:
                xs, ys = _series(points, w, r, field, policy)
                ax.plot(xs, ys, marker="o", label=r)
            ax.set(title=f"{w}, load {load:g}", xlabel="replicas", ylabel=label)
            ax.set_xscale("log", base=2)
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        path = out / f"cluster_{'latency' if field == 'blowup' else field}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def _series(points: list[Point], workload: str, router: str, field: str, policy: str | None):
    """(replicas, value) for one router; replicas=1 (no router) starts every line."""
    def value(n: int, pol: str) -> float:
        for p in points:
            if p.workload == workload and p.replicas == n and p.policy == pol and p.router in (router, "-"):
                return p.mean_latency if field == "blowup" else getattr(p, field)
        return math.nan

    xs = sorted({p.replicas for p in points if p.workload == workload})
    if field == "blowup":
        return xs, [value(n, "strict_vcg") / value(n, "radix_vcg") for n in xs]
    return xs, [value(n, policy) for n in xs]


def _key(p: Point) -> tuple:
    """What makes a point: the same key in two runs is the same simulation."""
    return p.workload, p.load, p.replicas, p.policy, p.router


def _find(points: list[Point], workload: str, load: float, replicas: int, policy: str, router: str) -> Point | None:
    key = (workload, load, replicas, policy, router if replicas > 1 else "-")
    return next((p for p in points if _key(p) == key), None)


def targets(points: list[Point], replicas: int = 8) -> list[str]:
    """The cluster study's targets read off the rows at `replicas` (LPM admission unless said), one line
    per workload and load: each router's hit rate over `oracle_prefix`'s with its imbalance
    (target >= 0.9 at <= 1.3 for `cache_aware` or `kv_overlap`), throughput over one replica's
    (shared prefix, cache_aware; target >= 7x), the radix auction's hit rate over LPM's under
    cache_aware (target >= 0.95) and strict priority's latency over the radix auction's per router."""
    lines = []
    for w, load in sorted({(p.workload, p.load) for p in points if p.replicas == replicas}):
        def get(policy: str, router: str, n: int = replicas) -> Point | None:
            return _find(points, w, load, n, policy, router)

        head = f"- {w}, load {load:g}, {replicas} replicas:"
        oracle = get("lpm", "oracle_prefix")
        if oracle is not None:
            rows = [f"{r} {q.hit_rate / oracle.hit_rate:.2f} (imb {q.imbalance:.2f})"
                    for r in (*ROUTERS, *sorted({p.router for p in points if p.router.startswith(KV_OVERLAP + "(")}))
                    if (q := get("lpm", r)) is not None and r != "oracle_prefix"]
            lines.append(f"{head} hit rate / oracle's ({oracle.hit_rate:.3f}): " + ", ".join(rows))
        one, many = get("lpm", "cache_aware", 1), get("lpm", "cache_aware")
        if one is not None and many is not None:
            lines.append(f"{head} throughput cache_aware / 1 replica: {many.throughput_rps:.2f} / "
                         f"{one.throughput_rps:.2f} req/s = {many.throughput_rps / one.throughput_rps:.2f}x")
        radix, lpm = get("radix_vcg", "cache_aware"), get("lpm", "cache_aware")
        if radix is not None and lpm is not None:
            lines.append(f"{head} radix auction / LPM hit rate under cache_aware: {radix.hit_rate:.3f} / "
                         f"{lpm.hit_rate:.3f} = {radix.hit_rate / lpm.hit_rate:.3f}")
        blowup = [f"{r} {s.mean_latency / a.mean_latency:.2f}" for r in ROUTERS
                  if (s := get("strict_vcg", r)) is not None and (a := get("radix_vcg", r)) is not None]
        if blowup:
            lines.append(f"{head} latency strict / radix auction: " + ", ".join(blowup))
    return lines


def kv_weight_figure(points: list[Point], out: Path, replicas: int = 8) -> Path | None:
    """Hit rate and imbalance of the KV router against its overlap weight (LPM, `replicas`), a
    line per load, `oracle_prefix`'s hit rate dashed; None without `--kv-weights` rows."""
    def weight(router: str) -> float | None:
        if router == KV_OVERLAP:
            return 1.0  # Dynamo's default, KvOverlap's
        return float(router[len(KV_OVERLAP) + 3:-1]) if router.startswith(KV_OVERLAP + "(w=") else None

    rows = [p for p in points if p.replicas == replicas and p.policy == "lpm" and weight(p.router) is not None]
    if not any(p.router != KV_OVERLAP for p in rows):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = sorted({p.workload for p in rows})
    fig, axes = plt.subplots(2, len(workloads), figsize=(5 * len(workloads), 6), squeeze=False)
    for j, w in enumerate(workloads):
        for load in sorted({p.load for p in rows if p.workload == w}):
            line = sorted((weight(p.router), p) for p in rows if p.workload == w and p.load == load)
            xs = [x for x, _ in line]
            axes[0][j].plot(xs, [p.hit_rate for _, p in line], marker="o", label=f"load {load:g}")
            axes[1][j].plot(xs, [p.imbalance for _, p in line], marker="o", label=f"load {load:g}")
            if (oracle := _find(points, w, load, replicas, "lpm", "oracle_prefix")) is not None:
                axes[0][j].axhline(oracle.hit_rate, ls="--", lw=0.8, color=axes[0][j].lines[-1].get_color())
        axes[0][j].set(title=f"{w}, {replicas} replicas (dashed: oracle_prefix)", ylabel="hit rate (LPM)")
        axes[1][j].set(xlabel="kv_overlap overlap weight (Dynamo's default 1.0)", ylabel="load imbalance")
        axes[1][j].set_ylim(bottom=1.0)
        for ax in axes[:, j]:
            ax.axvline(1.0, color="grey", lw=0.5)
            ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "cluster_kv_weight.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


GRID_TYPES = {"replicas": positive_ints, "loads": positive_floats}
"""The argument types of the grid's numeric options; the others take names, which `_grid` checks."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="a small grid: 6 routers x lpm/radix_vcg/strict_vcg x 1, 8 replicas x mooncake, "
                             "shared prefix at load 1 (minutes)")
    parser.add_argument("--size", type=positive_int, default=None,
                        help="requests per replica (default 1000, quick 128; mooncake: trace lines)")
    parser.add_argument("--trace", type=trace_file, default=TRACE,
                        help="Mooncake trace JSONL (default: $RADIX_AUCTION_MOONCAKE_TRACE, else "
                             "the test slice)")
    parser.add_argument("--out", type=output_folder, default=Path("results"), help="output folder (default results)")
    parser.add_argument("--kv-weights", type=non_negative_floats, default=[],
                        help="extra rows: kv_overlap at these overlap weights, e.g. 0,0.5,2,4 (default: none)")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, metavar="CSV",
                        help="write the outputs from these cluster.csv files instead of running a grid (a point in "
                             "several: the first file's row)")
    full = full_grid()
    for key in full:
        parser.add_argument(f"--{key}", type=GRID_TYPES.get(key, names), default=None,
                            help=f"comma-separated, overrides the grid (full: {','.join(map(str, full[key]))})")


def run(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        merged: dict[tuple, Point] = {}
        for path in args.merge:
            for p in read_csv(path):
                merged.setdefault(_key(p), p)
        points = list(merged.values())
    else:
        points = sweep(_grid(args), args.size or (128 if args.quick else 1000), args.trace, args.kv_weights)
    write_csv(points, args.out / "cluster.csv")
    lines = targets(points)
    paths = [p for p in (*figures(points, args.out), kv_weight_figure(points, args.out)) if p is not None]
    page = args.out / "cluster.md"
    page.write_text("\n".join(["# Cluster: routers x admission policies x replicas", "", made_by(args), markdown(points),
                               "", "Targets:", "", *lines, "", "## Figures", "", figure_links(paths, page)]))
    for path in paths:
        print(f"wrote {path}")
    print("\n".join(lines))


def _grid(args: argparse.Namespace) -> dict:
    """The grid: --quick's or the full one, with what the flags override, checked."""
    grid = dict(QUICK if args.quick else full_grid())
    for key in grid:
        if getattr(args, key) is not None:
            grid[key] = getattr(args, key)
    valid = {"routers": ROUTERS, "policies": MECHANISMS, "workloads": cluster_workloads()}
    for key, known in valid.items():
        if unknown := set(grid[key]) - set(known):
            raise ValueError(f"--{key}: unknown {', '.join(sorted(unknown))}; valid: {', '.join(known)}")
    return grid

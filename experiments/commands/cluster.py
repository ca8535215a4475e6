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
and the wall time. Outputs under --out: cluster.csv, cluster.md and figures
cluster_hit_rate.png, cluster_imbalance.png, cluster_latency.png.
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

from ..argtypes import positive_int

_ROOT = Path(__file__).resolve().parents[2]
_FULL_TRACE = _ROOT.parent / "shared/data/mooncake/conversation_trace.jsonl"
TRACE = _FULL_TRACE if _FULL_TRACE.is_file() else _ROOT / "tests/data/mooncake/conversation_slice.jsonl"
"""The full Mooncake trace beside the repository when it is there, else the 1,000-line test slice
(too short for replicas x size lines at 8 or more replicas)."""
WORKLOADS = ("mooncake", "shared_prefix", "agentic")
FULL = {"routers": list(ROUTERS), "policies": ["fcfs", "lpm", "radix_vcg", "strict_vcg"],
        "replicas": [1, 4, 8, 16], "workloads": list(WORKLOADS), "loads": [0.7, 1.0]}
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
             trace: Path) -> MarketConfig:
    """The market of one point; `size` scales the generated workloads' requests per replica."""
    common = dict(num_bidders=4, mechanism=policy, replicas=replicas, horizon=10**9, budget=1e12, warmup=0.0,
                  router="identity" if replicas == 1 else router)
    scale = load * replicas
    if workload == "mooncake":
        return MarketConfig(workload="mooncake", trace_path=trace, workload_kwargs={
            "time_scale": 4.0 / scale, "limit": size * replicas}, engine_kwargs={"kv_capacity_tokens": 100_000},
            **common)
    if workload == "shared_prefix":
        groups = max(1, size // 16) * replicas
        return MarketConfig(workload="shared_prefix", workload_kwargs={
            "num_groups": groups, "prompts_per_group": 16, "rate": 8.0 * scale}, **common)
    rate = MarketConfig().served_rate() * scale
    return MarketConfig(workload="agentic", workload_kwargs={"rate": rate, "num_requests": size * replicas}, **common)


def run_point(config: MarketConfig, load: float, seed: int = 0) -> Point:
    """Replay the scenario to the end with truthful bidders; one row."""
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
    imbalance = load_imbalance(engine) if config.replicas > 1 else 1.0
    return Point(config.workload, config.mechanism, config.router if config.replicas > 1 else "-",
                 config.replicas, load, m.finished, m.hit_rate, m.mean_ttft, m.mean_latency, m.throughput_rps,
                 imbalance, welfare, revenue, time.perf_counter() - t0)


def sweep(grid: dict, size: int, trace: Path, log=print) -> list[Point]:
    """Every point of the grid; one replica is run once per policy (no router to vary)."""
    points, seen = [], set()
    for w, load, n, policy, router in itertools.product(
            grid["workloads"], grid["loads"], grid["replicas"], grid["policies"], grid["routers"]):
        key = (w, load, n, policy, router if n > 1 else "-")
        if key in seen:
            continue
        seen.add(key)
        p = run_point(scenario(w, policy, router, n, load, size, trace), load)
        log(f"{w} load {load} x{n} {policy} {key[-1]}: hit {p.hit_rate:.3f} lat {p.mean_latency:.2f} "
            f"imb {p.imbalance:.2f} ({p.wall_s:.1f} s)")
        points.append(p)
    return points


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
    (LPM admission; latency: strict priority / radix auction, the blow-up per router)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
            ax.set(title=w, xlabel="replicas", ylabel=label)
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="a small grid: 6 routers x lpm/radix_vcg/strict_vcg x 1, 8 replicas x mooncake, "
                             "shared prefix at load 1 (minutes)")
    parser.add_argument("--size", type=positive_int, default=None,
                        help="requests per replica (default 1000, quick 128; mooncake: trace lines)")
    parser.add_argument("--trace", type=Path, default=TRACE, help="Mooncake trace JSONL (default: ../shared/data/mooncake/ if there, else the test slice)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="output folder (default results)")
    for key in FULL:
        parser.add_argument(f"--{key}", type=lambda s: s.split(","), default=None,
                            help=f"comma-separated, overrides the grid (full: {','.join(map(str, FULL[key]))})")


def run(args: argparse.Namespace) -> None:
    grid = dict(QUICK if args.quick else FULL)
    for key, cast in (("routers", str), ("policies", str), ("replicas", int), ("workloads", str), ("loads", float)):
        if getattr(args, key) is not None:
            grid[key] = [cast(v) for v in getattr(args, key)]
    valid = {"routers": ROUTERS, "policies": MECHANISMS, "workloads": WORKLOADS}
    for key, names in valid.items():
        if unknown := set(grid[key]) - set(names):
            raise ValueError(f"--{key}: unknown {', '.join(sorted(unknown))}; valid: {', '.join(names)}")
    size = args.size or (128 if args.quick else 1000)
    args.out.mkdir(parents=True, exist_ok=True)
    points = sweep(grid, size, args.trace)
    write_csv(points, args.out / "cluster.csv")
    (args.out / "cluster.md").write_text(markdown(points) + "\n")
    for path in figures(points, args.out):
        print(f"wrote {path}")
    print(markdown(points))

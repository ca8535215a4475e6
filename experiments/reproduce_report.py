"""Tables and figures of a `reproduce` run: the headline table with 95% confidence intervals over
seeds (Student's t; results/reproduce.md) and PNG figures."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from agents.stats import mean_ci

POLICY_ORDER = ("fcfs", "lpm", "dfs_weight", "strict_vcg", "radix_vcg")


def fmt(values: list[float], digits: int = 2) -> str:
    m, h = mean_ci(values)
    if math.isnan(m):
        return "-"
    return f"{m:.{digits}f}" if h == 0 else f"{m:.{digits}f} ± {h:.{digits}f}"


def _by_point(rows: list[dict]) -> dict:
    """(workload, kv, load) -> policy -> seed -> row."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        out[(r["workload"], r["kv_capacity"], r["load"])][r["policy"]][r["seed"]] = r
    return out


def headline(rows: list[dict]) -> str:
    """Markdown: per point, strict/radix latency ratio, hit rate and TTFT relative to LPM, capture."""
    points = _by_point(rows)
    head = ("| workload | KV tokens | load | latency strict / radix | hit rate strict / LPM "
            "| hit rate radix / LPM | TTFT strict / LPM | TTFT radix / LPM | welfare capture |")
    lines = [head, "|" + "---|" * 9]
    for (workload, kv, load), by_policy in sorted(points.items()):
        seeds = sorted(by_policy["radix_vcg"])

        def ratio(p: str, q: str, key: str) -> list[float]:
            return [by_policy[p][s][key] / by_policy[q][s][key] for s in seeds]

        capture = [by_policy["radix_vcg"][s]["welfare_capture"] for s in seeds]
        lines.append(
            f"| {workload} | {kv} | {load:g} | {fmt(ratio('strict_vcg', 'radix_vcg', 'mean_latency'))} "
            f"| {fmt(ratio('strict_vcg', 'lpm', 'hit_rate'))} | {fmt(ratio('radix_vcg', 'lpm', 'hit_rate'))} "
            f"| {fmt(ratio('strict_vcg', 'lpm', 'mean_ttft'))} | {fmt(ratio('radix_vcg', 'lpm', 'mean_ttft'))} "
            f"| {fmt(capture)} |"
        )
    return "\n".join(lines)


def sustainable(rows: list[dict]) -> str:
    """Markdown: sustainable throughput (requests/s) per policy, per workload and KV capacity."""
    table: dict = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["load"] == max(x["load"] for x in rows if x["workload"] == r["workload"]):
            table[(r["workload"], r["kv_capacity"])][r["policy"]].append(r["sustainable_throughput"])
    lines = ["| workload | KV tokens | " + " | ".join(POLICY_ORDER) + " |", "|" + "---|" * (2 + len(POLICY_ORDER))]
    for (workload, kv), by_policy in sorted(table.items()):
        lines.append(f"| {workload} | {kv} | " + " | ".join(fmt(by_policy[p]) for p in POLICY_ORDER) + " |")
    return "\n".join(lines)


def figures(rows: list[dict], out: Path) -> list[Path]:
    """Latency vs load, hit rate vs load (per policy), welfare capture vs load; one panel per
    workload and KV capacity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["workload"], r["kv_capacity"]) for r in rows})
    paths = []
    for name, key, ylabel, policies in (
        ("latency_vs_load.png", "mean_latency", "mean latency (s)", POLICY_ORDER),
        ("hit_rate_vs_load.png", "hit_rate", "token hit rate", POLICY_ORDER),
        ("welfare_capture_vs_load.png", "welfare_capture", "welfare capture", ("radix_vcg",)),
    ):
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
        for ax, (workload, kv) in zip(axes[0], panels):
            for policy in policies:
                loads = sorted({r["load"] for r in rows if r["workload"] == workload})
                vals = [mean_ci([r[key] for r in rows if r["workload"] == workload and r["kv_capacity"] == kv
                                 and r["policy"] == policy and r["load"] == load]) for load in loads]
                ax.errorbar(loads, [v[0] for v in vals], yerr=[v[1] for v in vals], marker="o", label=policy, capsize=3)
            ax.set_title(f"{workload}, {kv} KV tokens")
            ax.set_xlabel("load (arrival rate / capacity)")
            ax.set_ylabel(ylabel)
            if key == "mean_latency":
                ax.set_yscale("log")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def write_report(rows: list[dict], out: Path) -> str:
    """Write reproduce.md and the figures under `out`; return the text printed at the end."""
    seeds = len({r["seed"] for r in rows})
    text = (f"# Reproduce: strict priority versus the radix-tree auction\n\n"
            f"Mean ± 95% confidence interval over {seeds} seed(s). Ratios are per seed, then averaged.\n\n"
            f"## Headline\n\n{headline(rows)}\n\n"
            f"## Sustainable throughput (requests/s, at the highest load)\n\n{sustainable(rows)}\n")
    (out / "reproduce.md").write_text(text)
    paths = figures(rows, out)
    return text + "\nfigures: " + ", ".join(str(p) for p in paths)

"""`radix-auction markets`' outputs: the CSVs, the results page with its targets, and the figures."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from scipy import stats

from auction_gym.registry import find_mechanism

from ..plotting import line_styles
from ..provenance import figure_links

CLASSES = ("urgent", "interactive", "background")
"""The urgency classes (`auction_gym.workload.classes`)."""
TIER_ROWS = ("tiers", "tiers_lpm", "tiers (welfare)", "tiers (revenue)")
"""The rows that are tier designs, of which the best is set against the radix auction."""
COLUMNS = ("welfare", "revenue", "spent_share", "hit_rate", "urgent_latency_p99", "urgent_slo_share",
           "interactive_latency_mean", "background_latency_mean")


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def means(rows: list[dict]) -> dict[tuple, dict]:
    """(workload, load, design) -> the mean over seeds of every numeric column."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["load"], r["design"]), []).append(r)
    return {k: {c: float(np.nanmean([r[c] for r in g])) for c in COLUMNS} for k, g in groups.items()}


def table(rows: list[dict]) -> str:
    head = ("| workload | load | design | welfare | revenue | budget spent | hit rate | urgent p99 latency s | "
            "urgent within SLO | interactive latency s | background latency s |\n" + "|---" * 11 + "|")
    lines = [f"| {w} | {load:g} | {d} | " + " | ".join(_fmt(m[c]) for c in COLUMNS) + " |"
             for (w, load, d), m in means(rows).items()]
    return "\n".join([head, *lines])


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.4g}"


def paired(rows: list[dict], workload: str, load: float, a: str, b: str, column: str = "welfare"):
    """Mean of a's minus b's `column` over the seeds both ran, and its 95% t interval's half-width."""
    by = {(r["design"], r["seed"]): r[column] for r in rows if r["workload"] == workload and r["load"] == load}
    diffs = np.array([by[(a, s)] - by[(b, s)] for (d, s) in by if d == a and (b, s) in by])
    if len(diffs) < 2:
        return (float(diffs.mean()) if len(diffs) else math.nan), math.nan
    return float(diffs.mean()), float(stats.t.ppf(0.975, len(diffs) - 1) * diffs.std(ddof=1) / math.sqrt(len(diffs)))


def targets(rows: list[dict]) -> list[str]:
    """The issue's targets read off the rows, one line each per workload and load."""
    m, lines = means(rows), []
    for w, load in sorted({(r["workload"], r["load"]) for r in rows}):
        head = f"- {w}, load {load:g}:"
        tiers = [d for d in TIER_ROWS if (w, load, d) in m]
        if tiers and (w, load, "radix_vcg") in m:
            best = max(tiers, key=lambda d: m[(w, load, d)]["welfare"])
            diff, half = paired(rows, w, load, "radix_vcg", best)
            verdict = "holds" if diff - half > 0 else "does not hold" if diff + half < 0 else "not resolved"
            lines.append(f"{head} radix auction welfare - best tiers' ({best}) = {diff:.4g} +- {half:.3g} "
                         f"(95% paired t over seeds): the claim {verdict}")
        if (w, load, "lpm") in m:
            lpm = m[(w, load, "lpm")]["hit_rate"]
            ratios = [f"{d} {m[(w, load, d)]['hit_rate'] / lpm:.3f}" for (ww, ll, d) in m if (ww, ll) == (w, load)]
            lines.append(f"{head} hit rate / LPM's ({lpm:.3f}): " + ", ".join(ratios))
        radix = m.get((w, load, "radix_vcg"))
        blowups = [f"{d} {m[(w, load, d)]['urgent_latency_p99'] / radix['urgent_latency_p99']:.2f}x"
                   for d in ("strict_vcg", "sglang_priority") if radix is not None and (w, load, d) in m]
        if blowups:
            lines.append(f"{head} urgent p99 latency over the radix auction's: " + ", ".join(blowups))
        spent = [f"{d} {m[(w, load, d)]['spent_share']:.2f}" for (ww, ll, d) in m
                 if (ww, ll) == (w, load) and _charges(d)]
        if spent:
            lines.append(f"{head} share of budgets spent: " + ", ".join(spent))
    return lines


def _charges(design: str) -> bool:
    entry = find_mechanism(design)
    return entry.charges if entry is not None else design in TIER_ROWS


def figures(rows: list[dict], paths: list[dict], out: Path) -> list[Path]:
    """Welfare and urgent p99 latency against load (a panel per workload, a line per design), and
    the congestion price path (seed 0, the highest load)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = means(rows)
    workloads = sorted({r["workload"] for r in rows})
    designs = list(dict.fromkeys(r["design"] for r in rows))
    written = []
    for column, label, name in (("welfare", "welfare (mean over seeds)", "markets_welfare.png"),
                                ("urgent_latency_p99", "urgent p99 latency (s)", "markets_latency.png")):
        fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4), squeeze=False)
        for ax, w in zip(axes[0], workloads):
            for d, style in zip(designs, line_styles(len(designs))):
                loads = sorted(ll for (ww, ll, dd) in m if ww == w and dd == d)
                ax.plot(loads, [m[(w, ll, d)][column] for ll in loads], label=d,
                        lw=2.5 if d == "radix_vcg" else 1.0, **style)
            ax.set(title=w, xlabel="load", ylabel=label)
        axes[0][0].legend(fontsize=6, ncol=2)
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written.append(out / name)
    if paths:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for w in workloads:
            top = max((p["load"] for p in paths if p["workload"] == w), default=None)
            series = [p["price"] for p in paths if p["workload"] == w and p["load"] == top and p["seed"] == 0]
            if series:
                ax.plot(series, label=f"{w}, load {top:g}")
        ax.set(xlabel="round", ylabel="priority price per prompt token", yscale="log", title="congestion price path")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "markets_prices.png", dpi=100)
        plt.close(fig)
        written.append(out / "markets_prices.png")
    return written


def write_outputs(rows: list[dict], paths: list[dict], out: Path, provenance: str, truthful: bool) -> list[str]:
    """Write markets.csv, markets_prices.csv, the figures and markets.md; return the targets' lines."""
    write_csv(rows, out / "markets.csv")
    if paths:
        write_csv(paths, out / "markets_prices.csv")
    lines = targets(rows)
    page = out / "markets.md"
    page.write_text("\n".join([
        "# Markets: the designs the paper argues about, side by side", "", provenance,
        "Means over the evaluation seeds; " + ("every bidder bids its urgency with an unlimited budget. "
        if truthful else "every bidder paces by OGD against its budget. ") + "What each design does, and why "
        "the results fall as they do: [the market designs](" + ("../../" if truthful else "../") + "markets.md).",
        "", table(rows), "", "## Targets", "", *lines, "",
        "## Figures", "", figure_links(figures(rows, paths, out), page)]))
    return lines

"""Tables and figures of a `reproduce` run: the headline table with 95% confidence intervals over
seeds (Student's t; results/reproduce.md) and PNG figures."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from agents.stats import mean_ci
from auction_gym.registry import mechanism_names

from ..executor import Executor
from ..plotting import line_styles, line_with_intervals, margins_in_inches
from ..provenance import figure_links
from .reproduce_sweep import AUCTION


def fmt(values: list[float], digits: int = 2) -> str:
    m, h = mean_ci(values)
    if math.isnan(m):
        return "-"
    return f"{m:.{digits}f}" if h == 0 or math.isnan(h) else f"{m:.{digits}f} ± {h:.{digits}f}"


def _by_point(rows: list[dict]) -> dict:
    """(workload, kv, load) -> policy -> seed -> row."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        out[(r["workload"], r["kv_capacity"], r["load"])][r["policy"]][r["seed"]] = r
    return out


def _alternative(rows: list[dict]) -> str:
    """The radix auction under the other cost model, as named in `rows` ("radix_vcg/unit")."""
    return next(r["policy"] for r in rows if r["policy"].startswith(AUCTION + "/"))


def headline(rows: list[dict]) -> str:
    """Markdown: per point, strict/radix latency ratio, hit rate (strict, and the radix auction under
    both cost models), TTFT and throughput relative to LPM, and both welfare captures."""
    points = _by_point(rows)
    alt = _alternative(rows)
    head = (f"| workload | KV tokens | load | latency strict / radix | hit rate strict / LPM "
            f"| hit rate radix / LPM | hit rate {alt} / LPM | TTFT strict / LPM | TTFT radix / LPM "
            f"| throughput radix / LPM | welfare capture | realized capture |")
    lines = [head, "|" + "---|" * 12]
    for (workload, kv, load), by_policy in sorted(points.items()):
        seeds = sorted(by_policy[AUCTION])

        def ratio(p: str, q: str, key: str) -> list[float]:
            return [by_policy[p][s][key] / by_policy[q][s][key] for s in seeds]

        def own(key: str) -> list[float]:
            return [by_policy[AUCTION][s][key] for s in seeds]

        lines.append(
            f"| {workload} | {kv} | {load:g} | {fmt(ratio('strict_vcg', AUCTION, 'mean_latency'))} "
            f"| {fmt(ratio('strict_vcg', 'lpm', 'hit_rate'))} | {fmt(ratio(AUCTION, 'lpm', 'hit_rate'))} "
            f"| {fmt(ratio(alt, 'lpm', 'hit_rate'))} | {fmt(ratio('strict_vcg', 'lpm', 'mean_ttft'))} "
            f"| {fmt(ratio(AUCTION, 'lpm', 'mean_ttft'))} "
            f"| {fmt(ratio(AUCTION, 'lpm', 'throughput'))} "
            f"| {fmt(own('welfare_capture'))} | {fmt(own('realized_capture'))} |"
        )
    return "\n".join(lines)


def blow_up(rows: list[dict]) -> str:
    """Markdown: per workload, the largest strict / radix mean-latency ratio of the sweep (mean
    over seeds at each point) and where it is, with mean latencies there."""
    best: dict = {}
    for (workload, kv, load), by_policy in _by_point(rows).items():
        seeds = sorted(by_policy[AUCTION])
        strict = [by_policy["strict_vcg"][s]["mean_latency"] for s in seeds]
        radix = [by_policy[AUCTION][s]["mean_latency"] for s in seeds]
        ratio = mean_ci([a / b for a, b in zip(strict, radix)])[0]
        if workload not in best or ratio > best[workload][0]:
            best[workload] = (ratio, kv, load, strict, radix)
    lines = ["| workload | max latency strict / radix | at KV tokens | at load | strict latency (s) "
             "| radix latency (s) |", "|" + "---|" * 6]
    for workload, (ratio, kv, load, strict, radix) in sorted(best.items()):
        lines.append(f"| {workload} | {ratio:.1f} | {kv} | {load:g} | {fmt(strict, 1)} | {fmt(radix, 1)} |")
    return "\n".join(lines)


def sustainable(rows: list[dict]) -> str:
    """Markdown: sustainable throughput (requests/s) per policy, per workload and KV capacity."""
    names = policies_in(rows)
    table: dict = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["load"] == max(x["load"] for x in rows if x["workload"] == r["workload"]):
            table[(r["workload"], r["kv_capacity"])][r["policy"]].append(r["sustainable_throughput"])
    lines = ["| workload | KV tokens | " + " | ".join(names) + " |", "|" + "---|" * (2 + len(names))]
    for (workload, kv), by_policy in sorted(table.items()):
        lines.append(f"| {workload} | {kv} | " + " | ".join(fmt(by_policy[p]) for p in names) + " |")
    return "\n".join(lines)


def policies_in(rows: list[dict]) -> tuple[str, ...]:
    """The sweep's policies in table order (the registry's, then the other cost model's auction)."""
    present = {r["policy"] for r in rows}
    return tuple(n for n in mechanism_names() if n in present) + (_alternative(rows),)


PANELS_PER_ROW = 4
FIGURES = (
    ("latency_vs_load.png", "mean_latency", "mean latency (s)", False),
    ("hit_rate_vs_load.png", "hit_rate", "token hit rate", False),
    ("welfare_capture_vs_load.png", "welfare_capture", "welfare capture", True),
)
"""The figures: file name, the column drawn against load, its axis label, and whether only the
radix auction's line is drawn (the column is NaN for the others)."""


def figure_png(rows: list[dict], key: str, ylabel: str, auction_only: bool) -> bytes:
    """The PNG of `key` vs load, one panel per workload and KV capacity, a line per policy (the
    radix auction's alone, `auction_only`). Returned, not written, so that it can be drawn in a
    worker of any node and written here."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogFormatter

    panels = sorted({(r["workload"], r["kv_capacity"]) for r in rows})
    policies = (AUCTION,) if auction_only else policies_in(rows)
    cols = min(len(panels), PANELS_PER_ROW)
    rows_ = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(4.2 * cols, 3.4 * rows_), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (workload, kv) in zip(axes.flat, panels):
        loads = sorted({r["load"] for r in rows if r["workload"] == workload})
        for policy, style in zip(policies, line_styles(len(policies))):
            vals = [mean_ci([r[key] for r in rows if r["workload"] == workload and r["kv_capacity"] == kv
                             and r["policy"] == policy and r["load"] == load]) for load in loads]
            line_with_intervals(ax, loads, vals, label=policy, **style)
        ax.set_title(f"{workload}, {kv} KV tokens", y=1.0)  # placed, not fitted above the panel's decorations (it has none there)
        ax.set_xlabel("load (arrival rate / capacity)")
        ax.set_ylabel(ylabel)
        if key == "mean_latency":
            ax.set_yscale("log")
            # Plain numbers (2, 10, 60), not mathtext's 2 x 10^0, whose parser costs more than the panel.
            ax.yaxis.set_major_formatter(LogFormatter())
            ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    axes[0][0].legend(fontsize=8)
    margins_in_inches(fig, rows_, cols)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    return png.getvalue()


def figures(rows: list[dict], out: Path, executor: Executor = Executor()) -> list[Path]:
    """Write FIGURES under `out`, each drawn where `executor` runs tasks (`figure_png`)."""
    pngs = executor.map(figure_png, [(rows, *spec) for _, *spec in FIGURES])
    paths = [out / name for name, *_ in FIGURES]
    for path, png in zip(paths, pngs):
        path.write_bytes(png)
    return paths


def write_report(rows: list[dict], out: Path, cost_model: str = "tokens", made_by: str = "",
                 executor: Executor = Executor()) -> str:
    """Write reproduce.md and the figures (drawn where `executor` runs tasks) under `out`; return the
    text printed at the end. `made_by` (`experiments.provenance.made_by`: the command, machine and
    date) opens the page."""
    seeds = len({r["seed"] for r in rows})
    paths = figures(rows, out, executor)
    text = ("# Reproduce: strict priority versus the radix-tree auction\n\n"
            + (f"{made_by}\n" if made_by else "") +
            f"Mean ± 95% confidence interval over {seeds} seed(s). Ratios are per seed, then averaged. "
            f"The auctions' cost model: {cost_model!r} (model welfare is measured in it); "
            f"{_alternative(rows)} is the radix auction under the other one.\n\n"
            f"## Headline\n\n{headline(rows)}\n\n"
            f"## Latency blow-up (largest strict / radix ratio per workload)\n\n{blow_up(rows)}\n\n"
            f"## Sustainable throughput (requests/s, at the highest load)\n\n{sustainable(rows)}\n"
            f"\n## Figures\n\n{figure_links(paths, out / 'reproduce.md')}")
    (out / "reproduce.md").write_text(text)
    return text + "\nfigures: " + ", ".join(str(p) for p in paths)

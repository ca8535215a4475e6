"""`radix-auction markets`' outputs: the CSVs, the results page with its targets, and the figures."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from agents.stats import mean_ci

from ..plotting import line_styles
from ..provenance import figure_links

TIERS = ("tiers", "tiers_lpm")
"""The tier designs, of which the one best on the tuning seeds is set against the radix auction."""
PROVENANCE = "provenance.txt"
"""Where a run keeps the line that says what made it, for a page re-written from its CSVs."""
COLUMNS = ("welfare", "utility", "revenue", "spent_share", "capped_share", "all_out_share", "hit_rate", "requests",
           "urgent_latency_p99")
HEADS = ("welfare", "bidders' utility", "revenue", "budget spent", "charges capped", "all out at", "hit rate",
         "finished", "urgent p99 latency s")
LEGEND = """Terms: *level*, each bidder's budget as a share of what a truthful bidder pays under the radix
auction over an episode at that workload and load (measured on tuning seeds), or "unlimited" (every
bidder bids its urgency), or "any" for designs that charge nothing and so read no budget (run with
truthful bidders); *welfare*, the sum of V - w x latency over finished requests; *bidders' utility*,
welfare minus payments; *budget spent*, mean share of the budgets spent; *charges capped*, the share
of charges cut to what was left of a budget (where the auction is no longer VCG); *all out at*, the
round at which every bidder had spent its budget, as a share of the episode (1: never); *finished*,
requests finished; *radix_vcg (OGD)*, the radix auction with the paper's OGD pacer started at
multiplier 1; *(claimed)*, every bidder claims the highest priority the design accepts for every
request, where the escalation that free priority invites ends; *best tiers*, the tier design (`tiers`, FCFS in a tier, or `tiers_lpm`, LPM in a tier) with
more welfare on the tuning seeds; the difference's +- is a 95% paired t interval over evaluation
seeds."""


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _key(r: dict) -> tuple:
    return r["workload"], float(r["load"]), r["level"], r["design"]


def means(rows: list[dict]) -> dict[tuple, dict]:
    """(workload, load, level, design) -> the mean over seeds of every numeric column."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(_key(r), []).append(r)
    return {k: {c: float(np.nanmean([float(r[c]) for r in g])) for c in COLUMNS} for k, g in groups.items()}


def paired(rows: list[dict], at: tuple, a: str, b: str, column: str = "welfare") -> tuple[float, float]:
    """Mean of a's minus b's `column` at (workload, load, level) over the seeds both ran, and its 95%
    t interval's half-width. b may sit at level "any"."""
    by = {(r["design"], r["seed"]): float(r[column]) for r in rows if _key(r)[:2] == at[:2]
          and r["level"] in (at[2], "any")}
    return mean_ci([by[(a, s)] - by[(b, s)] for (d, s) in by if d == a and (b, s) in by])


def best_tiers(tuning: list[dict]) -> dict[tuple, str]:
    """(workload, load, level) -> the tier design of most welfare on the tuning seeds, as tuned (its
    best price's score when unlimited, its best gains' when paced)."""
    best: dict[tuple, dict[str, float]] = {}
    for r in tuning:
        if r["design"] not in TIERS:
            continue
        at = (r["workload"], float(r["load"]), r["level"])
        stage = "price" if r["level"] == "unlimited" else "gains"
        if r["what"] == stage:
            scores = best.setdefault(at, {})
            scores[r["design"]] = max(scores.get(r["design"], -math.inf), float(r["welfare"]))
    return {at: max(scores, key=scores.get) for at, scores in best.items()}


def comparison(rows: list[dict], tuning: list[dict]) -> list[tuple[tuple, str, float, float, float, float]]:
    """Per (workload, load, level): the best tiers and the radix auction minus it, in welfare and in
    bidders' utility (mean, half-width)."""
    out = []
    for at, tiers in sorted(best_tiers(tuning).items(), key=lambda x: (x[0][0], x[0][1], _level_order(x[0][2]))):
        w, hw = paired(rows, at, "radix_vcg", tiers)
        u, hu = paired(rows, at, "radix_vcg", tiers, "utility")
        out.append((at, tiers, w, hw, u, hu))
    return out


def _level_order(level: str) -> float:
    """Unlimited first, then the levels from the largest budget down."""
    return -math.inf if level == "unlimited" else -float(level)


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.4g}"


def _pm(mean: float, half: float) -> str:
    return f"{mean:,.0f} ± {half:,.0f}" if not math.isnan(half) else _fmt(mean)


def _verdict(mean: float, half: float) -> str:
    return "auction ahead" if mean - half > 0 else "tiers ahead" if mean + half < 0 else "not resolved"


def comparison_table(rows: list[dict], tuning: list[dict]) -> str:
    lines = ["| workload | load | level | best tiers | welfare: auction - best tiers | | "
             "bidders' utility: auction - best tiers |", "|---|---|---|---|---|---|---|"]
    for (w, load, level), tiers, d, h, u, hu in comparison(rows, tuning):
        lines.append(f"| {w} | {load:g} | {level} | {tiers} | {_pm(d, h)} | {_verdict(d, h)} | {_pm(u, hu)} |")
    return "\n".join(lines)


def design_table(rows: list[dict], workload: str, load: float) -> str:
    m = means(rows)
    bidding = {_key(r): r["bidding"] + (f" {r['kwargs']}" if r["kwargs"] else "") for r in rows if r["seed"] == 0}
    lpm = m.get((workload, load, "any", "lpm"), {}).get("hit_rate", math.nan)
    lines = ["| level | design | " + " | ".join(HEADS) + " | hit rate / LPM's | bidding, design's settings |",
             "|---" * (len(HEADS) + 4) + "|"]
    keys = sorted((k for k in m if k[:2] == (workload, load) and "bidder 0" not in k[3]),
                  key=lambda k: (k[2] != "any", _level_order(k[2]) if k[2] != "any" else 0))
    for k in keys:
        v = m[k]
        lines.append(f"| {k[2]} | {k[3]} | " + " | ".join(_fmt(v[c]) for c in COLUMNS)
                     + f" | {_fmt(v['hit_rate'] / lpm)} | {bidding.get(k, '')} |")
    return "\n".join(lines)


def deviation_table(rows: list[dict]) -> str:
    """Bidder 0's utility gain from playing a factor of its pacer's multiplier, paired over seeds."""
    lines = ["| workload | load | level | design | bidder 0's multiplier | its utility gain |", "|---" * 6 + "|"]
    for k in sorted({_key(r) for r in rows if "(bidder 0 x" in r["design"]}):
        base, _, factor = k[3].partition(" (bidder 0 ")
        gain, half = paired(rows, k[:3], k[3], base, "bidder0_utility")
        lines.append(f"| {k[0]} | {k[1]:g} | {k[2]} | {base} | {factor.rstrip(')')} its pacer's | {_pm(gain, half)} |")
    return "\n".join(lines)


def claims_table(rows: list[dict]) -> str:
    """The free-priority designs with every bidder claiming the top priority, against honest claims."""
    lines = ["| workload | load | design | welfare, honest | welfare, claimed | claimed - honest |", "|---" * 6 + "|"]
    m = means(rows)
    for k in sorted(k for k in m if k[3].endswith(" (claimed)")):
        honest = k[3].removesuffix(" (claimed)")
        d, h = paired(rows, k[:3], k[3], honest)
        lines.append(f"| {k[0]} | {k[1]:g} | {honest} | {_fmt(m[k[:3] + (honest,)]['welfare'])} | "
                     f"{_fmt(m[k]['welfare'])} | {_pm(d, h)} |")
    return "\n".join(lines)


def targets(rows: list[dict]) -> list[str]:
    """The targets read off the rows: the paced auction's hit rate beside LPM's, its spend, the round
    its bidders all run out, and whether every design finished the same requests."""
    m, lines = means(rows), []
    for w, load in sorted({_key(r)[:2] for r in rows}):
        lpm = m.get((w, load, "any", "lpm"), {}).get("hit_rate")
        for (ww, ll, level, d), v in m.items():
            if (ww, ll, d) != (w, load, "radix_vcg") or level in ("any", "unlimited"):
                continue
            hit = f", hit rate {v['hit_rate'] / lpm:.3f} of LPM's" if lpm else ""
            lines.append(f"- {w}, load {load:g}, level {level}: the radix auction's bidders spend "
                         f"{v['spent_share']:.0%} of their budgets, all are out at {v['all_out_share']:.0%} of the "
                         f"episode, {v['capped_share']:.1%} of charges capped{hit}")
        lines.append(f"- {w}, load {load:g}: {_same_requests(rows, w, load)}")
    return lines


def _same_requests(rows: list[dict], w: str, load: float) -> str:
    """Whether every design finished the same requests as LPM on each seed."""
    lpm = {r["seed"]: r["finished_digest"] for r in rows if _key(r) == (w, load, "any", "lpm")}
    mine = [r for r in rows if _key(r)[:2] == (w, load) and r["seed"] in lpm]
    differ = sorted({r["design"] for r in mine if r["finished_digest"] != lpm[r["seed"]]})
    if not lpm:
        return "no LPM row to compare finished requests with"
    if not differ:
        return "every design finished the same requests as LPM on every seed"
    return "designs that finished other requests than LPM on some seed: " + ", ".join(differ)


def figures(rows: list[dict], out: Path) -> list[Path]:
    """Welfare by budget level, a panel per workload at its highest load, a line per charging design."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = means(rows)
    workloads = sorted({r["workload"] for r in rows})
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        load = max(k[1] for k in m if k[0] == w)
        levels = sorted({k[2] for k in m if k[:2] == (w, load) and k[2] != "any"}, key=_level_order)
        designs = sorted({k[3] for k in m if k[:2] == (w, load) and k[2] != "any" and "bidder 0" not in k[3]})
        for d, style in zip(designs, line_styles(len(designs))):
            ys = [m.get((w, load, lv, d), {}).get("welfare", math.nan) for lv in levels]
            ax.plot(levels, ys, label=d, lw=2.5 if d == "radix_vcg" else 1.2, **style)
        ax.set(title=f"{w}, load {load:g}", xlabel="budget level", ylabel="welfare (mean over seeds)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "markets_welfare.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def read_csv(path: Path) -> list[dict]:
    """Rows as `write_csv` wrote them, numbers as numbers (seeds as ints); [] if there is no file."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{k: _number(k, v) for k, v in r.items()} for r in csv.DictReader(f)]


def _number(key: str, value: str) -> object:
    if key == "seed":
        return int(value)
    if key == "level":  # a label: "unlimited", "1", "0.3", ...
        return value
    try:
        return float(value)
    except ValueError:
        return value


def write_outputs(rows: list[dict], tuning: list[dict], paths: list[dict], out: Path, provenance: str) -> list[str]:
    """Write the CSVs, the provenance, the figures and markets.md; return the comparison's and the
    targets' lines."""
    write_csv(rows, out / "markets.csv")
    # A grid of designs that tune nothing (free designs, unlimited budgets) has no tuning rows or
    # price paths; the page reads a missing CSV as no rows.
    for name, written in (("markets_tuning.csv", tuning), ("markets_prices.csv", paths)):
        if written:
            write_csv(written, out / name)
    (out / PROVENANCE).write_text(provenance)
    return write_page(rows, tuning, out, provenance)


def rewrite_page(folder: Path, provenance: str) -> list[str]:
    """markets.md and its figures again from the CSVs and provenance a run left in `folder`."""
    if not (folder / "markets.csv").is_file():
        raise ValueError(f"{folder} holds no markets.csv (the output folder of a markets run)")
    made = (folder / PROVENANCE).read_text() if (folder / PROVENANCE).is_file() else ""
    return write_page(read_csv(folder / "markets.csv"), read_csv(folder / "markets_tuning.csv"), folder,
                      made.rstrip() + f" Page re-written by {provenance.removeprefix('Made by ')}")


def write_page(rows: list[dict], tuning: list[dict], out: Path, provenance: str) -> list[str]:
    """markets.md and its figures from a run's rows."""
    lines = targets(rows)
    page = out / "markets.md"
    sections = ["# Markets: the designs the paper argues about, at budgets on the scale of prices", "", provenance, "",
                "What each design does and how the run is set up: [the market designs](../markets.md).", "",
                "## The radix auction against the best tiers", "", comparison_table(rows, tuning), "", LEGEND, ""]
    for w, load in sorted({_key(r)[:2] for r in rows}):
        sections += [f"## {w}, load {load:g}", "", design_table(rows, w, load), ""]
    sections += ["## One bidder deviating from its pacer", "", deviation_table(rows), "",
                 "## Free priority: honest against claimed", "", claims_table(rows), "",
                 "## Targets", "", *lines, "", "## Figures", "", figure_links(figures(rows, out), page)]
    page.write_text("\n".join(sections) + "\n")
    return [comparison_table(rows, tuning), *lines]

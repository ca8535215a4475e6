"""`compare`'s tables, verdicts, figure and TensorBoard layout, from the evaluation episodes.

Every comparison here is paired: two policies are compared on the same evaluation episodes (the
same seeds, so the same workloads, draws and opponents), and a learned algorithm's rows pool its
training seeds, each seed's episode k paired with the reference's episode k.

- `summarize`: per policy and metric, the mean and 95% CI over episodes, and the paired
  differences of the focal utility from each reference (`REFERENCES`) on the same episodes.
- `seed_table`: per learned algorithm, 95% CIs over training seeds (a seed's mean is one sample):
  its untrained start, its score, its gain over the start, its paired differences from the
  references, and the share of the headroom it takes, (learned - best_fixed) / (hindsight -
  best_fixed).
- `verdicts`: one sentence per learned algorithm, from `seed_table`'s intervals.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from agents.evaluation import METRIC_UNITS, METRICS, mean_metrics
from agents.stats import format_ci, mean_ci

REFERENCES = ("ogd", "best_fixed", "pid_tuned", "hindsight")
"""What every policy's utility is paired with, where the run has it: the paper's OGD, the best
constant, the tuned PI pacer (the strongest policy that needs no learning) and the per-episode best
constant in hindsight (an upper bound on constants)."""
BASELINE_BOUNDS = ("privileged", "hindsight", "unlimited_budget")
"""Headroom rows that are bounds, not policies a bidder could play: no verdict compares with them
as "the best baseline"."""


def paired_name(reference: str) -> str:
    """The metric name of the paired utility difference from `reference`."""
    return f"utility_vs_{reference}"


def paired(results: Sequence[dict[str, float]], reference: Sequence[float]) -> list[float]:
    """Each episode's utility minus the reference's on the same episode (episode i pairs with the
    reference's episode i mod len(reference): a pooled algorithm lists its seeds' episodes in turn)."""
    return [r["utility"] - reference[i % len(reference)] for i, r in enumerate(results)]


def summarize(groups: dict[str, list[dict[str, float]]],
              references: dict[str, Sequence[float]]) -> list[dict[str, object]]:
    """One row per (policy, metric): n, mean, ci95 (half-width), ci_low, ci_high; the metrics are
    METRICS and `utility_vs_<reference>` for each reference utility per episode in `references`."""
    rows = []
    for policy, results in groups.items():
        values = {m: [r[m] for r in results] for m in METRICS}
        values.update({paired_name(ref): paired(results, utility) for ref, utility in references.items()})
        for metric, xs in values.items():
            mean, half = mean_ci(xs)
            rows.append({"policy": policy, "metric": metric, "n": len(xs), "mean": mean, "ci95": half,
                         "ci_low": mean - half, "ci_high": mean + half})
    return rows


def markdown(rows: list[dict[str, object]], policies: list[str], metrics: Sequence[str]) -> str:
    """A markdown table: one line per policy, one column per metric of `metrics` it has, `mean ± ci95`."""
    cell = {(r["policy"], r["metric"]): format_ci(r["mean"], r["ci95"]) for r in rows}
    shown = [m for m in metrics if any(r["metric"] == m for r in rows)]
    n = {r["policy"]: r["n"] for r in rows}
    lines = ["| policy | n | " + " | ".join(shown) + " |", "|---|---|" + "---|" * len(shown)]
    for p in policies:
        lines.append(f"| {p} | {n[p]} | " + " | ".join(cell.get((p, m), "") for m in shown) + " |")
    return "\n".join(lines)


def seed_stats(runs: list[list[dict[str, float]]], starts: list[list[dict[str, float]]] | None,
               references: dict[str, Sequence[float]]) -> dict[str, tuple[float, float]]:
    """An algorithm's statistics with 95% CIs over its seeds (`runs[s]`: seed s's episodes;
    `starts[s]`: its untrained policy's on the same episodes): utility, start, gain over the start,
    the paired difference from each reference and, with best_fixed and hindsight among them, the
    share of the headroom, (learned - best_fixed) / (hindsight - best_fixed) per seed."""
    out = {"utility": mean_ci([np.mean([r["utility"] for r in run]) for run in runs])}
    if starts is not None:
        out["start"] = mean_ci([np.mean([r["utility"] for r in run]) for run in starts])
        out["gain_over_start"] = mean_ci([np.mean(paired(run, [r["utility"] for r in start]))
                                          for run, start in zip(runs, starts)])
    for ref, utility in references.items():
        out[paired_name(ref)] = mean_ci([np.mean(paired(run, utility)) for run in runs])
    if "best_fixed" in references and "hindsight" in references:
        low, high = np.mean(references["best_fixed"]), np.mean(references["hindsight"])
        out["headroom_share"] = mean_ci([(np.mean([r["utility"] for r in run]) - low) / (high - low) for run in runs])
    return out


def seed_table(stats: dict[str, dict[str, tuple[float, float]]], seeds: int) -> str:
    """A markdown table of each algorithm's `seed_stats` (95% CI over its `seeds` training seeds):
    start, utility, gain over the start, the paired differences, the share of the headroom."""
    keys = list(dict.fromkeys(k for s in stats.values() for k in s))
    shown = [c for c in ("start", "utility", "gain_over_start") if c in keys]
    shown += [k for k in keys if k.startswith("utility_vs_")] + [c for c in ("headroom_share",) if c in keys]
    lines = ["| algorithm | seeds | " + " | ".join(shown) + " |", "|---|---|" + "---|" * len(shown)]
    for algo, s in stats.items():
        lines.append(f"| {algo} | {seeds} | " + " | ".join(format_ci(*s[c]) if c in s else "" for c in shown) + " |")
    return "\n".join(lines)


def _compared(name: str, interval: tuple[float, float]) -> str:
    """"better than NAME by X ± Y", "worse than ...", or "not distinguishable from ..." (95% CI)."""
    mean, half = interval
    if half == 0.0:  # every seed scored the same (a search that kept its start): no interval over seeds
        return f"{mean:+.4g} against {name} (every seed the same; no interval over seeds)"
    if math.isnan(half) or abs(mean) <= half:
        return f"not distinguishable from {name} ({format_ci(mean, half)})"
    return f"{'better' if mean > 0 else 'worse'} than {name} by {format_ci(abs(mean), half)}"


def best_baseline(baselines: dict[str, float]) -> str | None:
    """The baseline of highest mean utility (`baselines`: name -> mean), bounds excluded."""
    playable = {k: v for k, v in baselines.items() if k not in BASELINE_BOUNDS}
    return max(playable, key=playable.get) if playable else None


def steps_text(asked: int, trained: Sequence[int]) -> str:
    """The steps the runs of one algorithm trained (`TrainResult.trained`, what its models record),
    e.g. "4,096 steps (2,048 asked: training stops at the end of a rollout or generation)"."""
    low, high = min(trained), max(trained)
    text = f"{low:,} steps" if low == high else f"{low:,}-{high:,} steps"
    if (low, high) != (asked, asked):
        text += f" ({asked:,} asked: training stops at the end of a rollout or generation)"
    return text


def verdicts(stats: dict[str, dict[str, tuple[float, float]]], best: str | None, seeds: int,
             steps: dict[str, str]) -> list[str]:
    """One sentence per learned algorithm: better, worse or not distinguishable from OGD and from
    the `best` baseline (`best_baseline`; `stats` must hold the paired differences from both), and
    what it gained over its untrained start, each with its 95% CI over the training seeds; `steps`
    says how many steps each algorithm trained (`steps_text`)."""
    lines = []
    for algo, s in stats.items():
        parts = [_compared(ref, s[paired_name(ref)]) for ref in dict.fromkeys(("ogd", best))
                 if ref is not None and paired_name(ref) in s]
        if "gain_over_start" in s:
            parts.append(f"gained {format_ci(*s['gain_over_start'])} over its untrained start")
        if "headroom_share" in s:
            parts.append(f"took {format_ci(*s['headroom_share'])} of the headroom")
        best_note = f" (the best baseline is {best})" if best and best != "ogd" else ""
        lines.append(f"{algo} ({seeds} seeds x {steps[algo]}, 95% CI over seeds): " + "; ".join(parts)
                     + best_note + ".")
    return lines


def plot(path: Path, rows: list[dict[str, object]], policies: list[str], metrics: Sequence[str], title: str) -> None:
    """One panel per metric: each policy's mean with its 95% CI as an error bar, the y axis on the
    metric's units and fitted to the intervals (not from 0, which would hide every difference);
    paired panels mark 0, where a policy equals its reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in metrics if any(r["metric"] == m for r in rows)]
    by = {(r["policy"], r["metric"]): r for r in rows}
    cols = (len(shown) + 1) // 2
    fig, axes = plt.subplots(2, cols, figsize=(3.4 * cols, 6.6))
    for ax, m in zip(np.ravel(axes), shown):
        for i, p in enumerate(policies):
            if (p, m) in by:
                ax.errorbar([i], [by[p, m]["mean"]], yerr=[by[p, m]["ci95"]], fmt="o", capsize=4, color=f"C{i % 10}")
        if m.startswith("utility_vs_"):
            ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xticks(range(len(policies)), policies, rotation=45, fontsize=7, ha="right")
        ax.set_xlim(-0.5, len(policies) - 0.5)
        ax.set_title(m, fontsize=10)
        ax.set_ylabel(METRIC_UNITS.get(m, METRIC_UNITS["utility"]), fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    for ax in np.ravel(axes)[len(shown):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def tensorboard_layout(curve_episodes: int) -> dict[str, dict[str, list]]:
    """TensorBoard's custom-scalars layout of a compare run's folder, as `SummaryWriter.add_custom_scalars`
    takes it: one chart per metric overlaying every run's `eval/<metric>` (learned curves, the
    baselines' and bounds' flat lines, all means over the first `curve_episodes` evaluation
    episodes), then the final evaluations over all of them, then each episode's values."""
    def charts(prefix: str) -> dict[str, list]:
        return {f"{prefix}/{m}": ["Multiline", [rf"^{prefix}/{m}$"]] for m in METRICS}

    return {f"eval: mean over the first {curve_episodes} evaluation episodes (x: environment steps)": charts("eval"),
            "final: mean over all evaluation episodes (x: the run's last step)": charts("final"),
            "episode: each evaluation episode (x: episode index)": charts("episode")}


def write_layout(root: Path, curve_episodes: int) -> None:
    """Write `tensorboard_layout` into `root`, where TensorBoard's custom-scalars tab reads it."""
    writer = SummaryWriter(str(root))
    try:
        writer.add_custom_scalars(tensorboard_layout(curve_episodes))
    finally:
        writer.close()


def _scalars(writer: SummaryWriter, prefix: str, means: dict[str, float], steps: Sequence[int]) -> None:
    for step in steps:
        for m, v in means.items():
            writer.add_scalar(f"{prefix}/{m}", v, step)


def log_learned(run_dir: Path, final: list[dict[str, float]], start: list[dict[str, float]], step: int) -> None:
    """A learned run's final evaluation over all episodes as `final/*` at its last `step`, and its
    untrained policy's on the same episodes as `start/*` there, in the run's own folder (one run
    per seed in TensorBoard; its `eval/*` curve is already there)."""
    writer = SummaryWriter(str(run_dir))
    try:
        _scalars(writer, "final", mean_metrics(final), [step])
        _scalars(writer, "start", mean_metrics(start), [step])
    finally:
        writer.close()


def log_baseline(logdir: Path, results: list[dict[str, float]], curve_episodes: int, steps: Sequence[int],
                 hparam_dict: dict[str, Any]) -> None:
    """A baseline as flat lines at every one of `steps` (where the learned runs were evaluated):
    `eval/*`, the means over the first `curve_episodes` episodes (what the learning curves average),
    `final/*` over all; each episode's metrics as `episode/*` (x: episode index); the HPARAMS tab."""
    writer = SummaryWriter(str(logdir))
    try:
        _scalars(writer, "eval", mean_metrics(results[:curve_episodes]), steps)
        _scalars(writer, "final", mean_metrics(results), steps)
        for k, r in enumerate(results):
            for m in METRICS:
                writer.add_scalar(f"episode/{m}", r[m], k)
        for summary in hparams(hparam_dict, {f"final/{m}": v for m, v in mean_metrics(results).items()}):
            writer.file_writer.add_summary(summary)
    finally:
        writer.close()


def log_bound(logdir: Path, utility: np.ndarray, curve_episodes: int, steps: Sequence[int]) -> None:
    """A headroom bound (hindsight, privileged, unlimited budget) as flat `eval/utility` and
    `final/utility` lines, so the learning curves are read against it."""
    writer = SummaryWriter(str(logdir))
    try:
        _scalars(writer, "eval", {"utility": float(np.mean(utility[:curve_episodes]))}, steps)
        _scalars(writer, "final", {"utility": float(np.mean(utility))}, steps)
    finally:
        writer.close()


def write_csv(path: Path, rows: list[dict[str, object]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_episodes(path: Path, episodes: dict[str, list[dict[str, float]]], eval_seed: int,
                   label: str = "policy", keys: Sequence[str] = METRICS) -> None:
    """Every episode's metrics `keys`, one row per `label` (a policy, a population) and episode."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([label, "episode", "seed", *keys])
        for name, results in episodes.items():
            for k, r in enumerate(results):
                writer.writerow([name, k, eval_seed + k, *(r[key] for key in keys)])

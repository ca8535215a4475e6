"""Can a pacing policy see a burst coming? How well the observation predicts the load ahead.

    python -m experiments.studies.burst_visibility [--episodes 100] [--ahead 10] [--folds 5]

Plays episodes of the first pacing scenario (`auction_gym.scenarios`, "bursty_v0") with the focal bidder
on OGD, as `compare`'s `ogd` baseline plays them, and fits ridge regressions from what a policy could
know before a round to what is coming:

- `burst_now`: whether the round is played inside a burst window of the workload (`in_burst` at the
  engine time before the round, the schedule `policies.png` shades);
- `burst_ahead`: the share of the next `ahead` rounds played inside a burst;
- `queue_growth`: the change of the observed total queue feature (log scale, `Obs.TOTAL_QUEUE`) from
  this round to `ahead` rounds later.

Predictors: the current total queue feature alone; the whole current observation (what PPO sees);
the last 4 observations stacked (`frame_stack=4`, zeros before the episode's start, as
`agents.sb3.stack` builds them); and, as a ceiling the observation does not reach, the burst clock:
sine and cosine of the first three harmonics of the engine time's phase in the burst period (the
workload's schedule is periodic in engine time, which the observation does not contain). Rows are
the rounds after the first (whose start time, the end of the warm-up, the rollout does not give)
and before the last `ahead`.

Scores are out-of-sample R^2: episodes are split into `folds` groups, each group scored by a fit on
the others; the table gives the mean over folds ± its 95% CI (Student's t over folds, which share
training data, so the interval is indicative).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from agents.evaluation import rollout
from agents.sb3 import stack
from agents.stats import format_ci, mean_ci
from auction_gym.market import Obs
from auction_gym.pacing import make_policy
from auction_gym.scenarios import scenario
from auction_gym.workload import AgenticConfig
from auction_gym.workload.agentic import in_burst
from experiments.argtypes import positive_int

SCENARIO = scenario("bursty_v0")
"""The env arguments by default: this study measured the first pacing scenario, "bursty_v0" (`auction_gym.scenarios`)."""

TARGETS = ("burst_now", "burst_ahead", "queue_growth")
PREDICTORS = ("queue only", "observation", "4 stacked observations", "burst clock (not observed)")
FRAMES = 4
"""Observations stacked in the `4 stacked observations` predictor (RL Zoo's `frame_stack=4`, tried in the pacing benchmark)."""
HARMONICS = 3
RIDGE = 1e-3
"""Ridge penalty on standardized features (per row; only keeps collinear features, such as the
stacked copies of constant ones, from making the fit singular)."""


def episode_rows(env_kwargs: dict[str, Any], seed: int, ahead: int) -> tuple[dict[str, np.ndarray],
                                                                          dict[str, np.ndarray]]:
    """One OGD episode seeded `seed` as regression rows, one per round with `ahead` rounds after it:
    each predictor's features (name -> array rows x features) and each target (name -> array rows)."""
    if ahead < 1:
        raise ValueError(f"ahead must be >= 1, got {ahead}")
    steps = rollout(make_policy("ogd"), env_kwargs, seed)
    rows = len(steps) - 1 - ahead
    if rows < 1:
        raise ValueError(f"an episode of {len(steps)} rounds has none with {ahead} rounds after it")
    stacked, previous = [], None
    for o, _ in steps:
        previous = stack(previous, o, FRAMES)
        stacked.append(previous)
    # Rows are rounds 1, 2, ...: the engine time before round t is the time after round t - 1; the
    # first round's (the end of the warm-up) is not in its info.
    obs, stacked = np.array([o for o, _ in steps[1:]], dtype=np.float64), np.array(stacked[1:], dtype=np.float64)
    before = np.array([info["time"] for _, info in steps[:-1]])
    bursts = AgenticConfig(**env_kwargs.get("workload_kwargs", {}))
    burst = in_burst(before, bursts).astype(np.float64)
    phase = 2 * np.pi * np.mod(before, bursts.burst_period) / bursts.burst_period
    clock = np.column_stack([f(h * phase) for h in range(1, HARMONICS + 1) for f in (np.sin, np.cos)])
    queue = obs[:, Obs.TOTAL_QUEUE]
    targets = {
        "burst_now": burst[:rows],
        "burst_ahead": np.array([burst[t + 1:t + 1 + ahead].mean() for t in range(rows)]),
        "queue_growth": queue[ahead:ahead + rows] - queue[:rows],
    }
    features = dict(zip(PREDICTORS, (queue[:rows, None], obs[:rows], stacked[:rows], clock[:rows])))
    return features, targets


def ridge_r2(x_fit: np.ndarray, y_fit: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
             penalty: float = RIDGE) -> float:
    """Out-of-sample R^2 (1 - SSE / SST around the test mean; 0 = no better than a constant, can be
    negative) of a ridge regression with intercept fitted on (x_fit, y_fit), features standardized
    with the fit rows' mean and spread (constant features dropped)."""
    mean, std = x_fit.mean(0), x_fit.std(0)
    keep = std > 1e-12
    scale = lambda x: (x[:, keep] - mean[keep]) / std[keep]  # noqa: E731
    a, b = scale(x_fit), scale(x_test)
    coef = np.linalg.solve(a.T @ a + penalty * len(a) * np.eye(a.shape[1]), a.T @ (y_fit - y_fit.mean()))
    residual = y_test - (y_fit.mean() + b @ coef)
    total = np.sum((y_test - y_test.mean()) ** 2)
    return float(1.0 - np.sum(residual**2) / total) if total > 0 else float("nan")


def visibility(env_kwargs: dict[str, Any], episodes: int, ahead: int, folds: int,
               seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """Out-of-sample R^2 of each predictor for each target (target -> predictor -> one R^2 per
    fold) over `episodes` OGD episodes seeded `seed, seed + 1, ...`, split into `folds` groups."""
    if not 2 <= folds <= episodes:
        raise ValueError(f"folds must be between 2 and episodes ({episodes}), got {folds}")
    data = [episode_rows(env_kwargs, seed + k, ahead) for k in range(episodes)]
    group = np.arange(episodes) % folds
    scores: dict[str, dict[str, list[float]]] = {t: {p: [] for p in PREDICTORS} for t in TARGETS}
    for fold in range(folds):
        fit = [d for d, g in zip(data, group) if g != fold]
        test = [d for d, g in zip(data, group) if g == fold]
        for target in TARGETS:
            y_fit = np.concatenate([t[target] for _, t in fit])
            y_test = np.concatenate([t[target] for _, t in test])
            for p in PREDICTORS:
                scores[target][p].append(ridge_r2(np.concatenate([f[p] for f, _ in fit]), y_fit,
                                                  np.concatenate([f[p] for f, _ in test]), y_test))
    return scores


def markdown(scores: dict[str, dict[str, list[float]]]) -> str:
    """The R^2 table: a row per predictor, a column per target, mean over folds ± 95% CI."""
    lines = ["| predictor | " + " | ".join(TARGETS) + " |", "|---|" + "---|" * len(TARGETS)]
    for p in PREDICTORS:
        lines.append(f"| {p} | " + " | ".join(format_ci(*mean_ci(scores[t][p])) for t in TARGETS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=positive_int, default=100, help="OGD episodes, seeds 0..N-1 (default 100)")
    ap.add_argument("--ahead", type=positive_int, default=10,
                    help="rounds ahead for burst_ahead and queue_growth (default 10)")
    ap.add_argument("--folds", type=positive_int, default=5, help="cross-validation folds over episodes (default 5)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    try:
        scores = visibility(SCENARIO, args.episodes, args.ahead, args.folds)
    except ValueError as e:  # too many folds, or `ahead` as long as the episode
        ap.error(str(e))
    print(f"out-of-sample R^2, {args.episodes} OGD episodes of the compare scenario, {args.folds} folds, "
          f"ahead = {args.ahead} rounds:\n")
    print(markdown(scores))
    print(f"\nwall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()

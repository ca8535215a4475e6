"""experiments.studies.burst_visibility: regression rows from OGD episodes and out-of-sample R^2."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.studies.burst_visibility import PREDICTORS, TARGETS, episode_rows, markdown, ridge_r2, visibility

TINY = {"horizon": 40, "workload_kwargs": {"burst_period": 2.0, "burst_factor": 3.0, "burst_duration": 0.5}}


def test_rows_line_up_with_the_episode():
    features, targets = episode_rows(TINY, 0, ahead=3)
    rows = TINY["horizon"] - 1 - 3
    assert {k: v.shape for k, v in features.items()} == {
        "queue only": (rows, 1), "observation": (rows, 12), "4 stacked observations": (rows, 48),
        "burst clock (not observed)": (rows, 6)}
    assert set(targets) == set(TARGETS) and all(v.shape == (rows,) for v in targets.values())
    # The newest of the stacked observations is the current one.
    np.testing.assert_array_equal(features["4 stacked observations"][:, -12:], features["observation"])
    with pytest.raises(ValueError, match="none with 40 rounds after it"):
        episode_rows(TINY, 0, ahead=40)


def test_ridge_r2_is_one_for_a_linear_target_and_near_zero_for_noise():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + 3.0
    assert ridge_r2(x[:200], y[:200], x[200:], y[200:]) == pytest.approx(1.0, abs=1e-3)
    noise = rng.normal(size=400)
    assert abs(ridge_r2(x[:200], noise[:200], x[200:], noise[200:])) < 0.05


def test_visibility_scores_every_predictor_on_every_fold():
    scores = visibility(TINY, episodes=4, ahead=3, folds=2)
    assert all(len(scores[t][p]) == 2 for t in TARGETS for p in PREDICTORS)
    # The burst clock sees the schedule, whatever the episode.
    assert min(scores["burst_now"]["burst clock (not observed)"]) > 0.5
    assert markdown(scores).count("\n") == len(PREDICTORS) + 1
    with pytest.raises(ValueError, match="folds"):
        visibility(TINY, episodes=4, ahead=3, folds=5)

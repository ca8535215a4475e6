"""The tuned baselines: chosen on tuning seeds, never on the evaluation seeds."""

from __future__ import annotations

import numpy as np
import pytest

from agents.baselines import ETA_GRID, FIXED_GRID, best_fixed, ogd_tuned, tune
from agents.evaluation import evaluate
from auction_gym.pacing import FixedMultiplier, OGDPacer

# A fixed 40 requests/s whichever env id plays it: v1 and v2 draw each episode's rate, so theirs is given here too.
ENV = {"horizon": 20, "episode_draws": {"rate": [40.0]}}


def test_tune_picks_the_candidate_with_the_highest_mean_utility():
    candidates = {"fixed:0": FixedMultiplier(0.0), "fixed:1": FixedMultiplier(1.0), "fixed:0.3": FixedMultiplier(0.3)}
    tuned = tune("best_fixed", candidates, ENV, episodes=3, seed=5)
    for spec, policy in candidates.items():
        expected = np.mean([r["utility"] for r in evaluate(policy, ENV, 3, 5, progress=False)])
        assert tuned.utility[spec] == pytest.approx(expected)
    assert tuned.choice == max(tuned.utility, key=tuned.utility.get)
    assert tuned.policy is candidates[tuned.choice]
    assert "tuning seeds 5..7" in tuned.describe() and tuned.choice in tuned.describe()


def test_tuning_never_uses_the_evaluation_seeds():
    with pytest.raises(ValueError, match="overlap the evaluation seeds"):
        tune("best_fixed", {"fixed:1": FixedMultiplier(1.0)}, ENV, episodes=5, seed=998)


def test_best_fixed_and_ogd_tuned_choose_from_their_grids():
    fixed = best_fixed(ENV, episodes=2)
    assert set(fixed.utility) == {f"fixed:{a:g}" for a in FIXED_GRID}
    assert isinstance(fixed.policy, FixedMultiplier) and fixed.policy.alpha in FIXED_GRID
    ogd = ogd_tuned(ENV, episodes=2)
    assert isinstance(ogd.policy, OGDPacer) and ogd.policy.eta in ETA_GRID
    assert ogd.utility[ogd.choice] == max(ogd.utility.values())

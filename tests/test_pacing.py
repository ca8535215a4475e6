"""Built-in policies: the OGD update rule, batching, and the policy specs."""

from __future__ import annotations

import numpy as np
import pytest

from agents import FixedMultiplier, OGDPacer, Truthful, make_policy
from auction_gym import Obs
from auction_gym.pacing import PIDPacer


def obs(prev_alpha: float, spend_ratio: float, alpha_max: float = 2.0) -> np.ndarray:
    o = np.zeros(Obs.SIZE, dtype=np.float32)
    o[Obs.PREV_MULTIPLIER] = prev_alpha / alpha_max
    o[Obs.LAST_SPEND_LOG] = np.log1p(spend_ratio)
    return o


def test_ogd_update_matches_the_formula():
    pacer = OGDPacer(eta=0.1, lambda_max=5.0)
    lam = 0.5  # alpha = 1 / 1.5
    for z in (0.0, 1.0, 3.0, 40.0):
        expected_lam = min(max(lam - 0.1 * (1.0 - z), 0.0), 5.0)
        action, state = pacer.predict(obs(1 / (1 + lam), z))
        assert action.shape == (1,) and state is None
        assert action[0] == pytest.approx(1 / (1 + expected_lam), rel=1e-5)


def test_ogd_stays_truthful_when_underspending_and_floors_at_lambda_max():
    pacer = OGDPacer(eta=0.5, lambda_max=3.0)
    assert pacer.predict(obs(1.0, 0.0))[0][0] == pytest.approx(1.0)
    assert pacer.predict(obs(0.25, 100.0))[0][0] == pytest.approx(0.25, rel=1e-5)


def test_ogd_paces_down_over_repeated_overspending():
    pacer, alpha = OGDPacer(eta=0.05), 1.0
    for _ in range(20):
        alpha = float(pacer.predict(obs(alpha, 3.0))[0][0])
    assert alpha == pytest.approx(1 / (1 + 20 * 0.05 * 2), rel=1e-4)


def test_batched_predict():
    batch = np.stack([obs(1.0, 0.0), obs(0.5, 5.0), obs(0.2, 1.0)])
    for policy in (OGDPacer(), Truthful(), FixedMultiplier(0.7)):
        action, _ = policy.predict(batch)
        assert action.shape == (3, 1) and action.dtype == np.float32
        single = np.stack([policy.predict(o)[0] for o in batch])
        assert np.allclose(action, single)


def test_multipliers_are_predicts_actions_as_floats():
    """The environments' per-step call gives exactly `predict`'s multipliers (float32 values)."""
    batch = np.stack([obs(1.0, 0.0), obs(0.5, 5.0), obs(0.2, 1.0), obs(0.3, 0.7)])
    batch[:, Obs.TIME_LEFT], batch[:, Obs.BUDGET_LEFT] = 0.6, [0.9, 0.1, 0.5, 0.55]
    for policy in (OGDPacer(), PIDPacer(), Truthful(), FixedMultiplier(0.1)):
        got = policy.multipliers(batch.tolist())
        assert all(type(a) is float for a in got)
        assert got == policy.predict(batch)[0].ravel().tolist()


def test_make_policy_specs():
    assert isinstance(make_policy("ogd"), OGDPacer)
    assert isinstance(make_policy("truthful"), Truthful)
    assert make_policy("fixed:0.25").alpha == 0.25
    own = Truthful()
    assert make_policy(own) is own
    for bad in ("fixed:abc", "fixed:-1", "greedy", object()):
        with pytest.raises(ValueError):
            make_policy(bad)
    with pytest.raises(ValueError):
        OGDPacer(eta=0.0)

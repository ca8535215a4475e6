"""The normalized action's map to the bid multiplier, and built-in policies mapped to it."""

from __future__ import annotations

import numpy as np
import pytest

from agents import FixedMultiplier, OGDPacer, Truthful, focal_policy
from auction_gym import Obs
from auction_gym.action import action_box, check_action_type, clip, parse_action, to_action, to_multiplier
from auction_gym.pacing import NormalizedActions


def test_clip_is_min_of_max_to_the_bit():
    """Every value, signed zeros, infinities, NaN and ints included, gives what min(max()) gives."""
    values = [-np.inf, -3.0, -1.0, -0.5, -0.0, 0.0, 0, 1e-300, 0.5, 1, 1.0, 2.0, 7.0, np.inf, np.nan]
    for low, high in ((0.0, 2.0), (-1.0, 1.0), (0.0, 0.0), (1e-3, np.inf), (0, 1)):
        for x in values:
            got, want = clip(x, low, high), min(max(x, low), high)
            assert repr(got) == repr(want) and type(got) is type(want), (x, low, high)


@pytest.mark.parametrize("alpha_max", [1.5, 2.0, 4.0])
def test_map_is_exact_at_the_ends_and_truthful_and_continuous_increasing(alpha_max):
    assert [to_multiplier(a, alpha_max) for a in (-1.0, 0.0, 1.0)] == [0.0, 1.0, alpha_max]
    assert to_multiplier(-7.0, alpha_max) == 0.0 and to_multiplier(7.0, alpha_max) == alpha_max  # clipped
    grid = np.linspace(-1.0, 1.0, 2001).tolist()
    alphas = [to_multiplier(a, alpha_max) for a in grid]
    assert all(b > a for a, b in zip(alphas, alphas[1:]))
    step = max(1.0, alpha_max - 1.0) * 1e-3  # the grid step times the steeper slope: no jump at 0
    assert max(b - a for a, b in zip(alphas, alphas[1:])) <= step + 1e-12
    assert to_multiplier(0.5, alpha_max) == pytest.approx(1 + 0.5 * (alpha_max - 1))
    assert to_multiplier(-0.25, alpha_max) == 0.75


def test_to_action_inverts_to_multiplier():
    for alpha in (0.0, 0.3, 1.0, 1.7, 3.0):
        assert to_multiplier(to_action(alpha, 3.0), 3.0) == pytest.approx(alpha, abs=1e-15)
    assert to_action(9.0, 3.0) == 1.0 and to_action(-1.0, 3.0) == -1.0  # clipped to [0, alpha_max]
    # Exact for every float32 multiplier up to 1 (the built-ins' output): 1 + (alpha - 1) == alpha.
    alphas = np.random.default_rng(0).random(10_000, dtype=np.float32).tolist()
    assert all(to_multiplier(to_action(a, 2.0), 2.0) == a for a in alphas)


def test_parse_action_per_type_and_checks():
    assert parse_action(np.array([0.5], np.float32), "normalized", 3.0) == 2.0
    assert parse_action([0.5], "multiplier", 3.0) == 0.5
    assert parse_action(5.0, "multiplier", 3.0) == 3.0
    for bad in ([np.nan], [np.inf], [0.0, 1.0]):
        with pytest.raises(ValueError):
            parse_action(bad, "normalized", 2.0)
    assert action_box("normalized", 3.0).low.tolist() == [-1.0] and action_box("multiplier", 3.0).high.tolist() == [3.0]
    with pytest.raises(ValueError, match="alpha_max must be > 1"):
        check_action_type("normalized", 1.0)
    check_action_type("multiplier", 1.0)


def test_focal_policy_maps_only_builtins_in_a_normalized_env():
    obs = np.zeros((3, Obs.SIZE), np.float32)
    obs[:, Obs.PREV_MULTIPLIER] = 0.5
    mapped = focal_policy(FixedMultiplier(0.25), "normalized", 3.0)
    assert isinstance(mapped, NormalizedActions)
    action, state = mapped.predict(obs)
    assert action.shape == (3, 1) and action.dtype == np.float64 and state is None
    assert action.ravel().tolist() == [float(np.float32(0.25)) - 1.0] * 3
    assert mapped.predict(obs[0])[0].shape == (1,)
    assert focal_policy(Truthful()).predict(obs[0])[0].tolist() == [0.0]  # defaults: normalized, alpha_max 2
    pacer = OGDPacer()
    assert focal_policy(pacer, "multiplier", 2.0) is pacer
    model = object()  # anything but a MultiplierPolicy acts in the env's space already
    assert focal_policy(model, "normalized", 2.0) is model
    with pytest.raises(ValueError, match="alpha_max must be > 1"):
        focal_policy(pacer, "normalized", 1.0)

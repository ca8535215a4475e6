"""The action maps to the bid multiplier and their inverses, the built-in pacers' names, and
built-in policies mapped to an environment's actions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents import FixedMultiplier, OGDPacer, Truthful, focal_policy
from agents.baselines import CANDIDATES
from auction_gym import Obs, RadixAuctionEnv
from auction_gym.action import (
    ACTION_TYPES,
    LOG_ALPHA_MIN,
    action_box,
    action_map,
    check_action_type,
    clip,
    parse_action,
    to_action,
    to_multiplier,
)
from auction_gym.pacing import EnvActions, PIDPacer, builtin_policy_names, make_policy, policy_spec


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


FAST = dict(horizon=20, workload_kwargs={"rate": 40.0})
ALPHA_MAX = 2.0
multipliers = st.floats(LOG_ALPHA_MIN, ALPHA_MAX)
actions = st.floats(-1.0, 1.0)


def _row(prev_alpha: float, spend_over_rho: float = 1.0) -> list[float]:
    """An observation row that the PI pacer reads: its multiplier played last and last spend."""
    obs = np.zeros(Obs.SIZE, np.float32)
    obs[Obs.PREV_MULTIPLIER] = prev_alpha / ALPHA_MAX
    obs[Obs.LAST_SPEND_LOG] = np.log1p(spend_over_rho)
    obs[Obs.TIME_LEFT], obs[Obs.BUDGET_LEFT] = 0.5, 0.4
    return obs.tolist()


@pytest.mark.parametrize("action_type", ["normalized", "log", "multiplier"])
@given(alpha=multipliers)
def test_stateless_maps_invert(action_type, alpha):
    """The three stateless types, as ActionMaps, ignore obs and prev_alpha and keep their maps."""
    amap = action_map(action_type, ALPHA_MAX)
    a = amap.action(alpha, [], 0.5)
    assert amap.multiplier(a, [], 0.5) == pytest.approx(alpha, rel=1e-12)
    assert amap.reset(0.7) == 0.7 and amap.space == action_box(action_type, ALPHA_MAX)


@given(a=actions, prev=multipliers, bound=st.floats(0.01, 2.0))
def test_delta_map_and_its_inverse(a, prev, bound):
    amap = action_map("delta", ALPHA_MAX, delta_bound=bound, delta_start=0.25)
    alpha = amap.multiplier(a, [], prev)
    assert alpha == pytest.approx(min(max(prev * np.exp(bound * a), LOG_ALPHA_MIN), ALPHA_MAX), rel=1e-12)
    assert amap.multiplier(0.0, [], prev) == prev  # a = 0 holds the multiplier, exactly
    if LOG_ALPHA_MIN < alpha < ALPHA_MAX:  # inside the clip the inverse is exact up to rounding
        assert amap.action(alpha, [], prev) == pytest.approx(a, abs=1e-9)
    assert amap.reset(1.0) == 0.25


def test_delta_inverse_clips_a_change_beyond_the_bound():
    amap = action_map("delta", ALPHA_MAX, delta_bound=0.3)
    assert amap.action(0.5 * np.exp(0.6), [], 0.5) == 1.0 and amap.action(0.5 * np.exp(-0.6), [], 0.5) == -1.0
    assert amap.multiplier(5.0, [], 0.5) == pytest.approx(0.5 * np.exp(0.3))  # the action clipped to the box


@given(a=actions, prev=st.floats(0.01, 1.5), spend=st.floats(0.0, 3.0))
def test_residual_map_and_its_inverse(a, prev, spend):
    base = PIDPacer(0.05, 0.01, alpha_max=ALPHA_MAX)
    amap = action_map("residual", ALPHA_MAX, residual_base=base, residual_scale=0.5)
    row = _row(prev, spend)
    played = base.multipliers([row])[0]
    assert amap.multiplier(0.0, row, 123.0) == played  # a = 0 plays the base exactly; prev_alpha unused
    alpha = amap.multiplier(a, row, 123.0)
    assert alpha == pytest.approx(min(max(played * np.exp(0.5 * a), LOG_ALPHA_MIN), ALPHA_MAX), rel=1e-12)
    if LOG_ALPHA_MIN < alpha < ALPHA_MAX:
        assert amap.action(alpha, row, 123.0) == pytest.approx(a, abs=1e-9)


@pytest.mark.parametrize("bad, match", [
    (dict(delta_bound=0.0), "delta_bound"), (dict(delta_bound=np.inf), "delta_bound"),
    (dict(delta_bound=np.nan), "delta_bound"), (dict(residual_scale=-1.0), "residual_scale"),
    (dict(action_type="delta", delta_start=0.0), "delta_start"),
    (dict(action_type="delta", delta_start=2.5), "delta_start"),
    (dict(residual_base="pid:kp=1"), "residual_base"), (dict(residual_base="nope"), "residual_base"),
    (dict(action_type="deltas"), "action_type"),
])
def test_bad_action_arguments_are_refused_in_one_line(bad, match):
    with pytest.raises(ValueError, match=match) as err:
        RadixAuctionEnv(**bad, **FAST)
    assert "\n" not in str(err.value)
    if match == "residual_base":
        assert "pid:kp=<x>,ki=<y>" in str(err.value)  # names the valid names
    if match == "action_type":
        assert all(t in str(err.value) for t in ACTION_TYPES)


def test_pacer_names_parse_to_their_pacers():
    pid = make_policy("pid:kp=0.05,ki=0.01", alpha_max=3.0)
    assert isinstance(pid, PIDPacer) and (pid.kp, pid.ki, pid.alpha_max) == (0.05, 0.01, 3.0)
    ogd = make_policy("ogd:eta=0.2")
    assert isinstance(ogd, OGDPacer) and ogd.eta == 0.2
    for bad in ("pid:ki=0.01,kp=0.05", "pid:kp=0.05", "ogd:eta=x", "ogd:step=1", "pid:kp=-1,ki=0"):
        with pytest.raises(ValueError):
            make_policy(bad)
    assert "pid:kp=<x>,ki=<y>" in builtin_policy_names() and "ogd:eta=<x>" in builtin_policy_names()


@pytest.mark.parametrize("family", sorted(CANDIDATES))
def test_every_baseline_candidate_name_builds_that_candidate(family):
    """The tuned baselines name their candidates with policy_spec, which make_policy reads back."""
    for name, policy in CANDIDATES[family](2.0).items():
        assert repr(make_policy(name, 2.0)) == repr(policy), name
    assert policy_spec("pid", kp=0.05, ki=0.01) == "pid:kp=0.05,ki=0.01"
    with pytest.raises(ValueError):
        policy_spec("pid", ki=0.01, kp=0.05)


@pytest.mark.parametrize("action_type", ["normalized", "log", "delta", "residual"])
def test_focal_policy_plays_a_builtins_multipliers_under_every_type(action_type):
    """Mapped through the env's inverse, a pacer plays the multipliers it chooses (up to rounding;
    under "delta" a pacer whose changes stay within the bound)."""
    env = RadixAuctionEnv(action_type=action_type, **FAST)
    pacer = PIDPacer(0.02, 0.05)
    player = focal_policy(pacer, env)
    assert isinstance(player, EnvActions) and player.action_type == action_type
    obs, _ = env.reset(seed=3)
    for _ in range(FAST["horizon"]):
        want = float(pacer.predict(obs)[0][0])
        action, _ = player.predict(obs)
        assert action.shape == (1,) and env.action_space.contains(action.astype(np.float32))
        obs, _, terminated, truncated, info = env.step(action)
        assert info["multiplier"] == pytest.approx(want, rel=1e-9)
        if terminated or truncated:
            break


def test_focal_policy_leaves_multiplier_envs_and_models_alone():
    pacer = OGDPacer()
    assert focal_policy(pacer, RadixAuctionEnv(action_type="multiplier", **FAST)) is pacer
    model = object()  # anything but a MultiplierPolicy acts in the env's space already
    assert focal_policy(model, RadixAuctionEnv(**FAST)) is model
    obs = np.zeros((3, Obs.SIZE), np.float32)
    action, state = focal_policy(FixedMultiplier(0.25), RadixAuctionEnv(alpha_max=3.0, **FAST)).predict(obs)
    assert action.shape == (3, 1) and action.dtype == np.float64 and state is None  # a batch, row by row
    assert action.ravel().tolist() == [float(np.float32(0.25)) - 1.0] * 3
    assert focal_policy(Truthful(), RadixAuctionEnv(**FAST)).predict(obs[0])[0].tolist() == [0.0]

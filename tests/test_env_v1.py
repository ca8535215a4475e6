"""RadixAuction-v1, the "delta" and "residual" actions in an episode, the paired reward, unknown
keywords, and built-in baselines scored the same under every action type and reward."""

from __future__ import annotations

import warnings
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from pettingzoo.test import parallel_api_test
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import auction_gym
from agents.evaluation import evaluate
from auction_gym import MarketConfig, RadixAuctionEnv
from auction_gym.action import ACTION_TYPES
from auction_gym.envs.radix_auction_env import REWARDS
from auction_gym.pacing import TUNED_PI, FixedMultiplier, make_policy
from auction_gym.scenarios import V1_ACTION_TYPE, V1_KWARGS, scenario

# A fixed 40 requests/s whichever env id plays it: v1 and v2 draw each episode's rate, so theirs is given here too.
TOY = dict(horizon=30, episode_draws={"rate": [40.0]})


def test_v1_is_the_calibrated_scenario_and_v0_keeps_its_defaults():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # v1 is out of date since v2
        v1 = gym.make("RadixAuction-v1").unwrapped
    calibrated = RadixAuctionEnv(**scenario("calibrated_v1"))
    assert v1.config == calibrated.config and v1.config.cost_model == "service" and v1.config.horizon == 200
    assert v1.action_map.action_type == V1_ACTION_TYPE and v1.reward == "cost"
    assert gym.spec("RadixAuction-v0").kwargs == {}
    v0 = RadixAuctionEnv()
    # v0 and v1 keep the order of tied requests by id; the market's default orders them by the cache.
    assert v0.config == MarketConfig(tie_break="request_id") and v1.config.tie_break == "request_id"
    assert v0.action_map.action_type == "normalized" and v0.reward == "utility"
    v2 = gym.make("RadixAuction-v2").unwrapped
    assert v2.config == RadixAuctionEnv(**scenario("calibrated")).config
    assert v2.config == replace(v1.config, tie_break="cached_prefix")
    assert all(f"| {name:<16} | {value!r}" in RadixAuctionEnv.__doc__ for name, value in V1_KWARGS.items())


@pytest.mark.parametrize("kwargs", [{}, {"action_type": "residual"}, {"reward": "paired"}],
                         ids=["delta", "residual", "paired"])
def test_env_checkers_are_silent_on_v2(kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("RadixAuction-v2", **kwargs)
        assert env.action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        gym_check_env(env.unwrapped)
        sb3_check_env(env)


@pytest.mark.parametrize("make", [lambda **kw: gym.make("RadixAuction-v0", **kw),
                                  lambda **kw: gym.make("RadixAuction-v1", **kw), auction_gym.parallel_env],
                         ids=["v0", "v1", "parallel_env"])
def test_an_unknown_keyword_names_the_closest_and_the_valid_ones(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(TypeError) as err:
            make(horizn=10)
    message = str(err.value)
    assert isinstance(err.value, ValueError) and "\n" not in message
    assert "'horizn'" in message and "did you mean 'horizon'" in message
    assert "valid: " in message and "reward_scale" in message and "workload_kwargs" in message


def test_parallel_env_builds_v1s_and_v2s_market_and_action():
    env = auction_gym.parallel_env(version="v1", horizon=12)
    assert env.config == RadixAuctionEnv(**{**scenario("calibrated_v1"), "horizon": 12}).config
    assert env.action_map.action_type == V1_ACTION_TYPE
    parallel_api_test(env, num_cycles=12)
    v2 = auction_gym.parallel_env(version="v2", horizon=12)
    assert v2.config == RadixAuctionEnv(**{**scenario("calibrated"), "horizon": 12}).config
    assert auction_gym.parallel_env().config.tie_break == "request_id"
    with pytest.raises(ValueError, match=r"version must be one of \['v0', 'v1', 'v2'\]"):
        auction_gym.parallel_env(version="v3")


def _play(env: RadixAuctionEnv, policy, seed: int = 4) -> list[tuple]:
    """(observation, reward, info) of every step of one episode, `policy` a callable of the
    observation giving the action."""
    obs, _ = env.reset(seed=seed)
    steps, done = [], False
    while not done:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        steps.append((obs, reward, info))
        done = terminated or truncated
    return steps


def _acting(pacer):
    return lambda obs: pacer.predict(obs)[0]


def test_residual_at_zero_is_the_base_pacer_bit_for_bit():
    base = make_policy(TUNED_PI)
    residual = _play(RadixAuctionEnv(action_type="residual", residual_scale=0.7, **TOY),
                     lambda obs: np.zeros(1, np.float32))
    played = _play(RadixAuctionEnv(action_type="multiplier", **TOY), _acting(base))
    assert len(residual) == len(played) == TOY["horizon"]
    for (obs_r, reward_r, info_r), (obs_p, reward_p, info_p) in zip(residual, played):
        assert obs_r.tobytes() == obs_p.tobytes() and reward_r == reward_p and info_r == info_p
    assert len({info["multiplier"] for _, _, info in played}) > 5  # the pacer moved


def test_delta_at_zero_holds_its_start():
    steps = _play(RadixAuctionEnv(action_type="delta", delta_start=0.2, **TOY), lambda obs: np.zeros(1))
    assert [info["multiplier"] for _, _, info in steps] == [0.2] * TOY["horizon"]
    up = _play(RadixAuctionEnv(action_type="delta", delta_start=0.2, delta_bound=0.1, **TOY), lambda obs: [1.0])
    assert [info["multiplier"] for _, _, info in up][:3] == pytest.approx([0.2 * np.exp(0.1 * k) for k in (1, 2, 3)])


def test_paired_reward_is_zero_when_the_learner_plays_the_reference():
    env = RadixAuctionEnv(action_type="multiplier", reward="paired", reference_policy=TUNED_PI, **TOY)
    steps = _play(env, _acting(make_policy(TUNED_PI)))
    assert [reward for _, reward, _ in steps] == [0.0] * TOY["horizon"]
    assert any(info["reference_reward"] != 0.0 for _, _, info in steps)


def test_paired_return_is_the_cost_return_less_the_references():
    learner = _acting(FixedMultiplier(0.3))
    paired = _play(RadixAuctionEnv(action_type="multiplier", reward="paired", **TOY), learner)
    cost = _play(RadixAuctionEnv(action_type="multiplier", reward="cost", **TOY), learner)
    reference = _play(RadixAuctionEnv(action_type="multiplier", reward="cost", **TOY), _acting(make_policy(TUNED_PI)))
    scale = RadixAuctionEnv(**TOY).reward_scale
    assert [info["reference_reward"] * scale for _, _, info in paired] == [r for _, r, _ in reference]
    got = sum(r for _, r, _ in paired)
    assert got == pytest.approx(sum(r for _, r, _ in cost) - sum(r for _, r, _ in reference), rel=1e-12)
    assert abs(got) > 1e-6  # a fixed 0.3 is not the reference


@pytest.mark.parametrize("bad", [dict(reference_policy=None), dict(reference_policy="pid:kp=0.05"),
                                 dict(reference_policy=FixedMultiplier(0.5))])
def test_paired_needs_a_named_reference(bad):
    with pytest.raises(ValueError, match="reference_policy must name a built-in policy"):
        RadixAuctionEnv(reward="paired", **bad, **TOY)
    if bad["reference_policy"] is None:
        RadixAuctionEnv(reward="cost", **bad, **TOY)  # no shadow, no reference needed


@pytest.mark.parametrize("spec", ["fixed:0.05", "pid:kp=0.05,ki=1"])
def test_a_baselines_evaluation_is_the_same_under_every_action_type_and_reward(spec):
    """Scored in multipliers: through "delta"'s inverse these would be clipped to its bound (a
    fixed 0.05 is 10 rounds of delta_bound away from the start)."""
    pacer = make_policy(spec)
    rows = {(t, r): evaluate(pacer, {**TOY, "action_type": t, "reward": r}, episodes=2, progress=False)
            for t in ACTION_TYPES for r in REWARDS}
    first = rows[("multiplier", "utility")]
    assert all(row == first for row in rows.values()) and first[0] != first[1]

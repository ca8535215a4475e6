"""Inputs a researcher could plausibly pass that used to fail late (at the first reset, after a tenth
of a training run), deep inside (a TypeError or ZeroDivisionError naming no argument) or silently:
each is refused where it is given, with a message naming the argument."""

from __future__ import annotations

import gc
import sys

import gymnasium as gym
import numpy as np
import pytest

import auction_gym  # noqa: F401  (registers the env ids)
from agents.baselines import tune
from agents.callbacks import EvalMetricsCallback
from agents.evaluation import evaluate
from agents.stats import mean_ci
from agents.training import TrainConfig, run_settings
from auction_gym.action import action_value
from auction_gym.engine import EngineConfig, SimEngine
from auction_gym.envs.common import check_env_kwargs
from auction_gym.envs.parallel_env import parallel_env
from auction_gym.envs.vector import make_vec
from auction_gym.market import Market, MarketConfig
from auction_gym.pacing import make_policy

SHORT = dict(horizon=5, episode_draws={"rate": [40.0]})


def make(**kwargs):
    return gym.make("RadixAuction-v2", **kwargs)


@pytest.mark.both_cores
def test_an_integral_float_count_is_kept_as_an_int_and_the_env_plays():
    # 4.0 passed check_count but was kept as a float, which broke the env's lists (a TypeError from deep inside).
    config = MarketConfig(num_bidders=4.0, horizon=5.0)
    assert (config.num_bidders, config.horizon) == (4, 5)
    assert type(config.num_bidders) is int and type(config.horizon) is int
    env = make(num_bidders=4.0, **SHORT)
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(np.array([0.0], dtype=np.float32))
    assert info["round"] == 1 and not terminated


@pytest.mark.parametrize("kwargs, named", [
    (dict(engine_kwargs={"kv_capacity_tokens": 0}), "kv_capacity_tokens"),
    (dict(engine_kwargs={"max_running_requests": float("nan")}), "max_running_requests"),
    (dict(episode_draws={}, workload_kwargs={"rate": 0.0}), "rate"),  # was a ZeroDivisionError at reset
    (dict(episode_draws={}, workload_kwargs={"rate": -1.0}), "rate"),
    (dict(episode_draws={}, workload_kwargs={"rate": "20"}), "rate"),  # was a TypeError at reset
    (dict(cost_model="tokens", request_overhead=-1.0), "request_overhead"),
])
def test_market_values_are_refused_when_the_env_is_built_not_at_its_first_reset(kwargs, named):
    # check_env_kwargs, what training, evaluation and the command line check env arguments with
    # before any work, only builds the env: a value refused at the first reset passed it.
    with pytest.raises(ValueError, match=named):
        check_env_kwargs(kwargs, "RadixAuction-v2")


@pytest.mark.parametrize("kwargs, named", [
    (dict(alpha_max="2"), "alpha_max"),
    (dict(budget_per_round="0.1"), "budget_per_round"),
    (dict(reward_scale="1"), "reward_scale"),
    (dict(budget=True), "budget"),
    (dict(budget="1"), "budget must be"),  # was "budget has 1 entries for 4 bidders"
    (dict(episode_draws={"rate": 40.0}), "episode_draws"),  # one number, not a list
    (dict(workload_kwargs="rate=20"), "workload_kwargs"),
    (dict(focal_bidder=1.5), "focal_bidder"),  # matched no bidder: all four played the others' policy
    (dict(focal_bidder=True), "focal_bidder"),
    (dict(focal_bidder="0"), "focal_bidder"),
])
def test_a_wrong_type_is_a_value_error_naming_the_argument(kwargs, named):
    with pytest.raises(ValueError, match=named):
        make(**kwargs)


def test_numbers_of_numpy_types_are_numbers():
    env = make(budget=np.float32(3.0), **{**SHORT, "episode_draws": {"rate": [np.float32(40.0)]}}).unwrapped
    assert env.market.budget.tolist() == [3.0] * 4
    env.reset(seed=0)
    assert env.market.draws["rate"] == 40.0


def test_the_parallel_env_names_a_wrong_reward_scale():
    with pytest.raises(ValueError, match="reward_scale"):
        parallel_env("v1", reward_scale=None)


@pytest.mark.parametrize("seed", [-1, 1.5, "0"])
def test_the_parallel_env_names_a_wrong_seed(seed):
    env = parallel_env("v1", **SHORT)
    with pytest.raises(ValueError, match="seed"):  # numpy's own spoke of "entropy"
        env.reset(seed=seed)


def test_the_parallel_env_asks_for_a_dict_of_actions():
    env = parallel_env("v1", **SHORT)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="dict"):  # was "missing actions for" every agent
        env.step([0.0] * 4)


def test_the_parallel_env_names_the_agent_whose_action_is_not_a_number():
    env = parallel_env("v1", **SHORT)
    env.reset(seed=0)
    actions = {agent: np.array([0.0], dtype=np.float32) for agent in env.agents}
    with pytest.raises(TypeError, match="action of bidder_1"):
        env.step({**actions, "bidder_1": None})


def test_an_action_that_is_not_a_number_is_named():
    env = make(**SHORT)
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action must be a number"):
        env.step(None)
    with pytest.raises(TypeError, match="action must be a number"):
        env.step({"alpha": 0.5})
    assert action_value([[0.5]]) == 0.5  # a nested list of one number, as an array of that shape is read


@pytest.mark.parametrize("observation", [np.zeros((3, 12)), np.zeros(3)])
def test_action_for_names_an_observation_it_cannot_read(observation):
    # The residual map's base pacer reads the row's features: a batch's rows, or a short row, was an IndexError.
    env = make(action_type="residual", **SHORT).unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError, match="observation must be one agent's 12 features"):
        env.action_for(1.0, observation)


def test_the_parallel_env_action_for_asks_for_a_reset_first():
    env = parallel_env("v1", **SHORT)
    with pytest.raises(RuntimeError, match="reset"):  # was an IndexError of its agents' last multipliers
        env.action_for(1.0, np.zeros(12), "bidder_0")


def test_a_vector_env_that_fails_to_build_raises_only_its_own_error():
    unraisable = []
    previous, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with pytest.raises(ValueError, match="autoreset_mode"):
            make_vec("RadixAuction-v2", num_envs=2, autoreset_mode="Disabled", **SHORT)
        gc.collect()
    finally:
        sys.unraisablehook = previous
    # Gymnasium's __del__ closed the half-built env: an AttributeError printed as "Exception ignored".
    assert [u.exc_type for u in unraisable] == []


@pytest.mark.parametrize("kwargs, named", [
    (dict(episodes=0), "episodes"),
    (dict(episodes=2.5), "episodes"),
    (dict(seed=-1), "seed"),
    (dict(eval_freq=2.5), "eval_freq"),
    (dict(env_kwargs={"horizn": 5}), "horizn"),
])
def test_the_eval_callback_refuses_its_arguments_before_training(kwargs, named):
    # Each was met at the first evaluation, after a tenth of the run.
    arguments = {"env_kwargs": SHORT, "eval_freq": 100, **kwargs}
    with pytest.raises(ValueError, match=named):
        EvalMetricsCallback(**arguments)


def test_evaluate_refuses_a_fractional_episode_count():
    with pytest.raises(ValueError, match="episodes"):
        evaluate(make_policy("truthful", 2.0), SHORT, episodes=2.5, progress=False)


@pytest.mark.parametrize("field", ["timesteps", "n_envs"])
def test_run_settings_refuse_a_fractional_count(field):
    # int() made 2.5 envs 2 (and timesteps=0.5 a refusal of "0").
    with pytest.raises(ValueError, match=field):
        run_settings(TrainConfig(**{field: 2.5}), 1000)
    _, timesteps, n_envs = run_settings(TrainConfig(**{field: 2.0}), 1000)
    assert {"timesteps": timesteps, "n_envs": n_envs}[field] == 2


def test_tune_refuses_no_candidates():
    with pytest.raises(ValueError, match="candidates"):  # was max()'s "arg is an empty sequence"
        tune("best_fixed", {}, SHORT, episodes=1)


def test_mean_ci_refuses_a_table_it_would_pool():
    table = [[1.0, 2.0, 3.0], [2.0, 3.0, 4.0]]  # seeds x episodes
    with pytest.raises(ValueError, match="1-D"):
        mean_ci(table)
    mean, half = mean_ci([np.mean(row) for row in table])
    assert mean == 2.5 and half > 0


@pytest.mark.both_cores
@pytest.mark.parametrize("config", [{"kv_capacity_tokens": 4096}, MarketConfig()])
def test_an_engine_names_a_config_that_is_not_an_engine_config(config):
    """A dict of fields, or a config of another kind, failed on a missing attribute deep inside."""
    with pytest.raises(TypeError, match=r"config must be an instance of EngineConfig \(None: its defaults\), got "
                                        f"{type(config).__name__}"):
        SimEngine("fcfs", config)


@pytest.mark.both_cores
@pytest.mark.parametrize("config", [{"num_bidders": 3}, EngineConfig()])
def test_a_market_names_a_config_that_is_not_a_market_config(config):
    with pytest.raises(TypeError, match=f"config must be an instance of MarketConfig .*got {type(config).__name__}"):
        Market(config)


def test_a_dict_config_is_told_how_to_become_one():
    with pytest.raises(TypeError, match=r"build one with MarketConfig\(\*\*fields\)"):
        Market({"num_bidders": 3})


@pytest.mark.both_cores
@pytest.mark.parametrize("scheduler", [EngineConfig(), 3, object()])
def test_an_engine_names_a_scheduler_that_is_no_policy(scheduler):
    """The config given first, in the scheduler's place, failed on the missing `name` of a policy."""
    with pytest.raises(TypeError, match=r"a scheduler must be an auction_gym.policy.AdmissionPolicy or the name of a "
                                        rf"registered one \(auction_gym.scheduler_names\(\)\), got {type(scheduler).__name__}"):
        SimEngine(scheduler)


@pytest.mark.both_cores
def test_a_market_takes_its_multipliers_in_one_row_and_refuses_others():
    """(1, n) and (n, 1) are one row of multipliers; a (2, 2) array for 4 bidders was flattened into
    some order of bidders, unseen."""
    config = MarketConfig(horizon=5, warmup=1.0)
    runs = []
    for shape in [(4,), (1, 4), (4, 1)]:
        market = Market(config)
        market.reset(0)
        runs.append([market.step(np.full(shape, a)).payments.tolist() for a in (1.0, 0.5, 2.0)])
    assert runs[0] == runs[1] == runs[2]
    market = Market(config)
    market.reset(0)
    with pytest.raises(ValueError, match=r"need 4 finite multipliers >= 0 in one row, got an array of shape \(2, 2\)"):
        market.step(np.ones((2, 2)))
    for bad in ([1.0] * 3, [1.0, 1.0, 1.0, np.nan], [1.0, 1.0, 1.0, -1.0], [1.0, 1.0, 1.0, np.inf]):
        with pytest.raises(ValueError, match="need 4 finite multipliers >= 0, got"):
            market.step(bad)
    assert market.round == 0


@pytest.mark.both_cores
def test_a_market_names_a_seed_that_is_no_int_at_least_0():
    """numpy's refusal spoke of "entropy" or a negative integer, and a string went through int()."""
    market = Market(MarketConfig(horizon=3, warmup=1.0))
    for seed in (-1, "3", 1.5, True, None):
        with pytest.raises(ValueError, match=rf"seed must be an int >= 0, got {seed!r}"):
            market.reset(seed)
    played = []
    for seed in (3, np.int64(3)):
        market.reset(seed)
        played.append([market.step([1.0] * 4).payments.tolist() for _ in range(3)])
    assert played[0] == played[1]

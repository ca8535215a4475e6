"""The market's metrics of every training episode reach a plain SB3 run's TensorBoard, under the
metric names `radix-auction train` uses."""

from __future__ import annotations

import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import auction_gym  # noqa: F401  (registers the envs)
from agents.callbacks import MarketMetricsCallback
from agents.evaluation import METRICS

HORIZON = 16


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny PPO run on two envs of short episodes, logging to TensorBoard."""
    torch.set_num_threads(1)
    logdir = tmp_path_factory.mktemp("tb")
    env = make_vec_env("RadixAuction-v2", n_envs=2, seed=0, env_kwargs={"horizon": HORIZON})
    callback = MarketMetricsCallback()
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, tensorboard_log=str(logdir))
    model.learn(192, callback=callback, tb_log_name="ppo")
    acc = EventAccumulator(str(next(logdir.iterdir())))
    acc.Reload()
    return callback, {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}


def test_every_metric_is_logged_with_the_train_commands_names(run):
    callback, scalars = run
    expected = {f"rollout/{m}" for m in (*METRICS, "mean_multiplier")}
    assert expected <= set(scalars), expected - set(scalars)
    # 192 steps on 2 envs = 96 rounds each: 6 episodes of 16 rounds per env.
    assert len(callback.episodes) == 2 * 192 // 2 // HORIZON


def test_the_logged_values_are_the_episodes_means(run):
    callback, scalars = run
    logged = [e.value for e in scalars["rollout/budget_spent_frac"]]
    assert all(0.0 <= v <= 1.0 for v in logged)
    assert all(0.0 < e["mean_multiplier"] <= 2.0 for e in callback.episodes)
    # Every episode is in some dump's mean: the dumps' values lie within the episodes' range.
    utilities = [e["utility"] for e in callback.episodes]
    assert all(min(utilities) - 1e-6 <= e.value <= max(utilities) + 1e-6 for e in scalars["rollout/utility"])


def test_an_env_without_the_markets_info_is_named():
    env = make_vec_env("Pendulum-v1", n_envs=1, seed=0)
    model = PPO("MlpPolicy", env, n_steps=200, batch_size=50, n_epochs=1, seed=0)
    with pytest.raises(ValueError, match="needs a RadixAuction env"):
        model.learn(200, callback=MarketMetricsCallback())

"""RecurrentPPO (`ppo_lstm`, sb3-contrib): training, saving, loading, and evaluation that carries the
LSTM state through an episode and starts each episode from a fresh one."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from agents.evaluation import evaluate
from agents.sb3 import SB3Policy, check_hyperparams, detect_algo, load_hyperparams, load_policy
from experiments.commands import evaluate as evaluate_cmd
from experiments.commands import train as train_cmd

# A fixed 40 requests/s whichever env id plays it: v1 and v2 draw each episode's rate, so theirs is given here too.
ENV = {"horizon": 20, "episode_draws": {"rate": [40.0]},
       "workload_kwargs": {"burst_period": 4.0, "burst_factor": 3.0, "burst_duration": 1.0}}
ENV_JSON = json.dumps(ENV)


class Recorder:
    """A policy that plays `policy` and records each action it returns, in order; with `forget`, it
    drops the LSTM state and plays every step as an episode's first."""

    def __init__(self, policy: SB3Policy, forget: bool = False) -> None:
        self.policy, self.forget, self.actions = policy, forget, []

    @property
    def action_space(self):
        return self.policy.action_space

    def predict(self, observation: np.ndarray, state: Any = None, episode_start: np.ndarray | None = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        if self.forget:
            state, episode_start = None, np.array([True])
        action, state = self.policy.predict(observation, state, episode_start, deterministic)
        self.actions.append(np.array(action))
        return action, state


@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory):
    """A 64-step ppo_lstm run through `radix-auction train` (normalized observations)."""
    logdir = tmp_path_factory.mktemp("runs")
    train_cmd.main(["--algo", "ppo_lstm", "--timesteps", "64", "--logdir", str(logdir), "--env-kwargs", ENV_JSON,
                    "--eval-episodes", "1", "--no-progress", "--hyperparams", "n_steps=64", "batch_size=32",
                    "n_epochs=1", "policy_kwargs=dict(lstm_hidden_size=8, net_arch=[8])"])
    return logdir / "ppo_lstm_s0"


def test_ppo_lstm_trains_saves_and_evaluates_from_its_zip(lstm_run, tmp_path, capsys):
    model = lstm_run / "model.zip"
    assert (lstm_run / "vecnormalize.pkl").exists() and detect_algo(model) == "ppo_lstm"
    policy = load_policy(model)
    assert type(policy.model).__name__ == "RecurrentPPO" and policy.vecnormalize is not None
    evaluate_cmd.main(["--policy", str(model), "--episodes", "2", "--logdir", str(tmp_path), "--no-progress"])
    assert "utility" in capsys.readouterr().out


def test_evaluation_carries_the_lstm_state_and_resets_it_each_episode(lstm_run):
    policy = load_policy(lstm_run / "model.zip")
    both, alone = Recorder(policy), Recorder(policy)
    evaluate(both, ENV, 2, seed=3, progress=False)
    evaluate(alone, ENV, 1, seed=4, progress=False)
    rounds = ENV["horizon"]
    # The second episode of an evaluation plays as if it were the first: no state from the one before.
    np.testing.assert_array_equal(np.array(both.actions[rounds:]), np.array(alone.actions))

    # That check has teeth: the state at the end of an episode changes the next action, and so does
    # carrying the state within an episode rather than starting every step from a zero state.
    obs = np.zeros(policy.model.observation_space.shape, dtype=np.float32)
    _, state = policy.model.predict(obs, None, np.array([True]), deterministic=True)
    for _ in range(5):
        _, state = policy.model.predict(obs, state, np.array([False]), deterministic=True)
    fresh, _ = policy.model.predict(obs, state, np.array([True]), deterministic=True)
    leaked, _ = policy.model.predict(obs, state, np.array([False]), deterministic=True)
    assert not np.array_equal(fresh, leaked)
    stateless = Recorder(policy, forget=True)
    evaluate(stateless, ENV, 1, seed=4, progress=False)
    assert not np.array_equal(np.array(stateless.actions), np.array(alone.actions))


def test_ppo_lstm_hyperparameters_are_checked():
    check_hyperparams("ppo_lstm", load_hyperparams("ppo_lstm"))
    with pytest.raises(ValueError, match="unknown hyperparameter 'lstm_hidden_size' for ppo_lstm"):
        check_hyperparams("ppo_lstm", {"lstm_hidden_size": 8})  # a policy_kwargs entry, not the algorithm's

"""The CMA-ES policy search: its policy, common random numbers, seeds, and the learner registry's
plumbing (`train --algo cmaes`, `compare --algos cmaes`)."""

from __future__ import annotations

import csv
import json
from itertools import islice

import gymnasium as gym
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agents.evaluation import DEFAULT_EVAL_SEED, METRICS, evaluate
from agents.learners import LEARNERS, check_hyperparams
from agents.policy_search import SearchParams, SearchPolicy, generations, score, search_seeds
from agents.sb3 import load_policy
from agents.training import TrainConfig, train
from auction_gym.pacing import make_policy
from experiments.commands import compare as compare_cmd
from experiments.commands import evaluate as evaluate_cmd
from experiments.commands import train as train_cmd

# A fixed 40 requests/s whichever env id plays it: v1 and v2 draw each episode's rate, so theirs is given here too.
ENV = {"horizon": 20, "episode_draws": {"rate": [40.0]}}
TINY = {"popsize": 3, "episodes_per_generation": 2}


@pytest.fixture
def env():
    made = gym.make("RadixAuction-v0", **ENV)
    yield made
    made.close()


def test_zero_weights_play_a_zero_action_in_any_shape(env):
    policy = SearchPolicy.for_env(env)
    obs, _ = env.reset(seed=0)
    action, state = policy.predict(obs, state="kept")
    assert action.shape == (1,) and action[0] == 0.0 and state == "kept"
    batch, _ = policy.predict(np.stack([obs, obs * 2]))
    assert batch.shape == (2, 1) and not batch.any()
    # Zero weights sit mid-box on any box (a multiplier in [0, 2]: 1); other weights move the action.
    assert SearchPolicy(np.zeros(13), policy.scale, low=0.0, high=2.0).act(obs)[0, 0] == 1.0
    assert policy.with_params(np.ones(13)).act(obs)[0, 0] > 0
    hidden = SearchPolicy.for_env(env, hidden=3)
    assert hidden.params.size == 3 * (12 + 2) + 1 and hidden.act(obs)[0, 0] == 0.0


def test_saved_model_loads_and_acts_the_same(env, tmp_path):
    policy = SearchPolicy.for_env(env, hidden=2).with_params(np.random.default_rng(0).normal(size=29))
    policy.save(tmp_path / "model.npz", ENV, "RadixAuction-v0")
    loaded = load_policy(tmp_path / "model.npz")
    obs = np.stack([env.reset(seed=s)[0] for s in range(3)])
    assert np.array_equal(loaded.act(obs), policy.act(obs)) and loaded.action_space == env.action_space
    with np.load(tmp_path / "model.npz") as f:
        assert json.loads(str(f["env_kwargs"])) == ENV
    with pytest.raises(ValueError, match="expected 13 weights"):
        SearchPolicy(np.zeros(5), policy.scale)


def test_a_candidate_equal_to_the_incumbent_scores_the_same(env):
    """Common random numbers: the same weights on the same seeds score the same, whatever was
    played in between on the reused env; other seeds or other weights score otherwise."""
    zero = SearchPolicy.for_env(env)
    other = zero.with_params(np.full(13, -2.0))
    utility, steps = score([zero, other, zero.with_params(zero.params.copy())], env, [3, 4])
    assert steps == 3 * 2 * 20
    assert np.array_equal(utility[0], utility[2])
    assert not np.array_equal(utility[0], utility[1])
    assert not np.array_equal(score([zero], env, [5, 6])[0][0], utility[0])


def test_the_search_plays_only_its_own_seeds(env, played_seeds):
    """Every episode the search plays is seeded below the evaluation seeds and outside the run's
    evaluation episodes."""
    played = played_seeds
    pool = search_seeds(eval_seed=10, eval_episodes=5)
    assert len(pool) == DEFAULT_EVAL_SEED - 5 and not set(range(10, 15)) & set(pool)
    rows = [row for row, _ in islice(generations(env, SearchPolicy.for_env(env), SearchParams(**TINY), 0, pool), 3)]
    assert len(played) == sum((3 + 2) * 2 for _ in rows) - 2  # the first generation's champion is its incumbent
    assert all(s is not None and 0 <= s < DEFAULT_EVAL_SEED and not 10 <= s < 15 for s in played)
    assert [r.steps for r in rows] == [8 * 20, 18 * 20, 28 * 20]  # 20 steps an episode


class Toy(gym.Env):
    """Ten steps of a random observation x; utility -(a - target)^2 with target = x0 - x1."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, self.np_random.random(2).astype(np.float32)
        return self.x, {}

    def step(self, action):
        utility = -float((action[0] - (self.x[0] - self.x[1])) ** 2)
        self.t, self.x = self.t + 1, self.np_random.random(2).astype(np.float32)
        return self.x, utility, False, self.t == 10, {"utility": utility}


def test_the_search_improves_on_a_toy_objective():
    env = Toy()
    start = SearchPolicy.for_env(env)
    params = SearchParams(popsize=6, sigma0=0.5, episodes_per_generation=8)
    rows, champion = [], start.params
    for row, champion in islice(generations(env, start, params, 0, search_seeds(DEFAULT_EVAL_SEED, 0)), 25):
        rows.append(row)
    seeds = range(500, 520)
    before, after = (score([start.with_params(w)], env, seeds)[0].mean() for w in (start.params, champion))
    assert after > before + 0.5 * abs(before)
    assert any(r.replaced for r in rows)


def test_train_and_evaluate_through_the_cli(tmp_path, capsys):
    train_cmd.main(["--algo", "cmaes", "--timesteps", "200", "--logdir", str(tmp_path), "--env-kwargs",
                    json.dumps(ENV), "--eval-episodes", "2", "--eval-freq", "100", "--no-progress",
                    "--hyperparams", "popsize=3", "episodes_per_generation=2"])
    run = tmp_path / "cmaes_s0"
    assert "saved" in capsys.readouterr().out
    with open(run / "search.csv") as f:
        rows = list(csv.DictReader(f))
    # (1 + 3) then (2 + 3) policies a generation, 2 episodes of 20 steps each; 200 steps asked.
    assert [int(r["steps"]) for r in rows] == [160, 360]
    acc = EventAccumulator(str(run))
    acc.Reload()
    assert {f"eval/{m}" for m in METRICS} <= set(acc.Tags()["scalars"])
    assert [e.step for e in acc.Scalars("eval/utility")] == [160, 360]
    assert json.loads((run / "config.json").read_text())["env_kwargs"] == ENV
    results = evaluate(load_policy(run / "model.npz"), ENV, 2, progress=False)
    assert [r["utility"] for r in results] != [r["utility"] for r in evaluate(
        load_policy(run / "model.npz"), ENV, 2, seed=DEFAULT_EVAL_SEED + 2, progress=False)]
    evaluate_cmd.main(["--policy", str(run / "model.npz"), "--episodes", "2", "--logdir", str(tmp_path / "eval"),
                       "--no-progress"])
    out = capsys.readouterr().out
    assert f"environment arguments from {run / 'config.json'}" in out
    assert (tmp_path / "eval" / "cmaes_s0").is_dir()  # named after the model's run folder


def test_train_returns_what_it_played(tmp_path):
    result = train(TrainConfig(algo="cmaes", logdir=tmp_path, timesteps=50, env_kwargs=ENV, eval_episodes=1,
                               progress=False, hyperparams=TINY))
    assert result.model_path.name == "model.npz" and result.asked == 50 and result.trained == 160
    assert result.eval_steps == (160,) and len(result.final_evaluation) == 1


@pytest.mark.parametrize("hyperparams, message", [
    ({"n_steps": 64}, "unknown hyperparameter 'n_steps' for a policy search; valid: n_timesteps, popsize"),
    ({"popsize": 2.5}, "popsize=2.5 for a policy search: expected an integer"),
    ({"popsize": 1}, "out of range"),
])
def test_bad_search_hyperparams_are_refused(hyperparams, message):
    with pytest.raises(ValueError, match=message):
        check_hyperparams("cmaes", hyperparams)


def test_registry_drives_validation_and_help(tmp_path, capsys):
    assert "cmaes" in LEARNERS
    with pytest.raises(SystemExit):
        train_cmd.main(["--help"])
    assert "cmaes" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        compare_cmd.main(["--algos", "ppo,dqn", "--logdir", str(tmp_path), "--out", str(tmp_path)])
    assert exc.value.code == 2 and "valid: ppo, ppo_paired, ppo_lstm, sac, td3, a2c, cmaes" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_runs_the_search_end_to_end(tmp_path, capsys):
    compare_cmd.main(["--algos", "cmaes", "--timesteps", "40", "--seeds", "1", "--episodes", "2", "--jobs", "1",
                      "--logdir", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--env-kwargs",
                      json.dumps(ENV), "--no-progress", "--tuning-episodes", "2", "--hyperparams", "popsize=2",
                      "episodes_per_generation=1", "--baselines", "ogd"])
    table = capsys.readouterr().out
    assert "| cmaes |" in table and "| cmaes_s0 |" in table
    assert (tmp_path / "runs" / "compare" / "cmaes_s0" / "model.npz").is_file()


RESIDUAL = {**ENV, "action_type": "residual"}
"""A run whose own action (a = 0: the PI pacer) differs from cmaes_log's (a = 0: truthful)."""


def truthful_utilities(env_kwargs: dict, episodes: int) -> list[float]:
    return [r["utility"] for r in evaluate(make_policy("truthful"), env_kwargs, episodes, progress=False)]


@pytest.fixture(scope="module")
def log_run(tmp_path_factory):
    """A tiny cmaes_log run (its file plays "log") in a "residual" scenario."""
    return train(TrainConfig(algo="cmaes_log", logdir=tmp_path_factory.mktemp("runs"), timesteps=50,
                             env_kwargs=RESIDUAL, eval_episodes=1, progress=False, hyperparams=TINY))


def test_a_learner_plays_its_files_action_in_training_and_evaluation(log_run):
    result = log_run
    played = {**RESIDUAL, "action_type": "log"}
    assert result.env_kwargs == played
    assert json.loads((result.run_dir / "config.json").read_text())["env_kwargs"] == played
    with np.load(result.model_path) as f:
        assert json.loads(str(f["env_kwargs"])) == played
    # Zero weights under "log" bid truthfully; under the run's "residual" they would play PI.
    start = load_policy(result.initial_model_path)
    assert [r["utility"] for r in evaluate(start, played, 2, progress=False)] == truthful_utilities(RESIDUAL, 2)
    untyped = SearchPolicy(start.params, start.scale)  # the same weights, unchecked: played as "residual"
    assert [r["utility"] for r in evaluate(untyped, RESIDUAL, 2, progress=False)] != truthful_utilities(RESIDUAL, 2)


def test_action_kwargs_can_be_overridden_to_the_runs_own(tmp_path):
    result = train(TrainConfig(algo="cmaes_log", logdir=tmp_path, timesteps=50, env_kwargs=RESIDUAL,
                               eval_episodes=1, progress=False, hyperparams={**TINY, "action_kwargs": {}}))
    assert result.env_kwargs == RESIDUAL


@pytest.mark.parametrize("algo", ["cmaes", "ppo"])
@pytest.mark.parametrize("bad", [{"horizon": 5}, {"reward": "paired"}, "log"])
def test_action_kwargs_name_only_the_action(algo, bad):
    with pytest.raises(ValueError, match="action_kwargs=.*expected a mapping of action_type, delta_bound"):
        check_hyperparams(algo, {"action_kwargs": bad})


def test_compare_scores_each_model_in_the_action_it_was_trained_in(tmp_path, capsys):
    compare_cmd.main(["--algos", "cmaes_log", "--timesteps", "40", "--seeds", "1", "--episodes", "2", "--jobs", "1",
                      "--logdir", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--env-kwargs",
                      json.dumps(RESIDUAL), "--no-progress", "--tuning-episodes", "2", "--curve-episodes", "1",
                      "--hyperparams", "popsize=2", "episodes_per_generation=1", "--baselines", "truthful"])
    assert 'cmaes_log plays {"action_type": "log"}' in (tmp_path / "out" / "compare.md").read_text()
    with open(tmp_path / "out" / "episodes.csv") as f:
        rows = list(csv.DictReader(f))
    start = [float(r["utility"]) for r in rows if r["policy"] == "cmaes_log_s0_start"]
    assert start == pytest.approx(truthful_utilities(RESIDUAL, 2), abs=1e-6)


def test_train_says_which_action_its_learner_played(tmp_path, capsys):
    train_cmd.main(["--algo", "cmaes_log", "--timesteps", "40", "--logdir", str(tmp_path), "--env-kwargs",
                    json.dumps(RESIDUAL), "--eval-episodes", "1", "--no-progress",
                    "--hyperparams", "popsize=2", "episodes_per_generation=1"])
    assert 'played {"action_type": "log"} (the learner\'s action_kwargs)' in capsys.readouterr().out
    train_cmd.main(["--algo", "cmaes", "--timesteps", "40", "--logdir", str(tmp_path), "--env-kwargs",
                    json.dumps(RESIDUAL), "--eval-episodes", "1", "--no-progress",
                    "--hyperparams", "popsize=2", "episodes_per_generation=1"])
    assert "played" not in capsys.readouterr().out


def test_a_model_is_refused_in_another_action_of_the_same_box(log_run):
    """"log" and "residual" share Box(-1, 1): the saved action type is what tells a model's env."""
    result = log_run
    for path in (result.model_path, result.initial_model_path):
        policy = load_policy(path)
        assert policy.action_type == "log"
        with pytest.raises(ValueError, match="trained on action_type='log', the environment plays 'residual'"):
            evaluate(policy, RESIDUAL, 1, progress=False)
        assert len(evaluate(policy, result.env_kwargs, 1, progress=False)) == 1

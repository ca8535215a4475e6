"""`radix-auction tune` and agents.tuning: a study runs, writes its files, prunes when asked, and
never plays an evaluation seed."""

from __future__ import annotations

import csv
import json

import numpy as np
import optuna
import pytest
import yaml

from agents.evaluation import DEFAULT_EVAL_SEED, evaluate
from agents.learners import check_hyperparams
from agents.sb3 import ENV_ID, load_hyperparams, load_policy, saved_env_kwargs
from agents.tuning import SEARCH_SPACES, Objective, hyperparams_of, storage
from auction_gym.scenarios import scenario
from experiments.commands import tune as tune_cmd

# A fixed 40 requests/s whichever env id plays it: v1 and v2 draw each episode's rate, so theirs is given here too.
ENV = {"horizon": 20, "episode_draws": {"rate": [40.0]}}


def test_a_tiny_study_writes_its_files_and_plays_no_evaluation_seed(tmp_path, played_seeds, capsys):
    played = played_seeds
    tune_cmd.main(["--trials", "2", "--timesteps", "128", "--n-envs", "2", "--tuning-episodes", "2",
                   "--evaluations", "2", "--startup-trials", "1", "--env-kwargs", json.dumps(ENV),
                   "--out", str(tmp_path)])
    assert {"trials.csv", "trials.md", "best.yml", "study.journal", "trials"} <= {p.name for p in tmp_path.iterdir()}
    with open(tmp_path / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["trial"] for r in rows] == ["0", "1"] and all(r["param_learning_rate"] for r in rows)
    best = (tmp_path / "best.yml").read_text()
    assert "# radix-auction tune --algo ppo --trials 2" in best and "# Seeds: scored on tuning episodes 0..1" in best
    entry = yaml.safe_load(best)[ENV_ID]
    check_hyperparams("ppo", entry)
    assert entry["n_envs"] == 2 and "log_std_init=" in entry["policy_kwargs"]
    seeds = [s for s in played if s is not None]
    assert seeds and max(seeds) < DEFAULT_EVAL_SEED
    # A complete trial's value is its model's mean utility on the tuning episodes, seeds 0 and 1.
    done = next(r for r in rows if r["state"] == "COMPLETE")
    path = tmp_path / "trials" / f"trial_{done['trial']}" / "model.zip"
    assert saved_env_kwargs(path)[0] == {**scenario("calibrated"), **ENV}  # tune's default scenario, ENV over it
    replayed = evaluate(load_policy(path), saved_env_kwargs(path)[0], 2, seed=0, progress=False)
    assert float(done["value"]) == pytest.approx(np.mean([r["utility"] for r in replayed]))


@pytest.mark.parametrize("pruner, state", [(optuna.pruners.ThresholdPruner(lower=1e12), "PRUNED"),
                                           (optuna.pruners.NopPruner(), "COMPLETE")])
def test_a_trial_is_pruned_when_its_pruner_says_so(tmp_path, pruner, state):
    objective = Objective("ppo", ENV, timesteps=256, n_envs=1, episodes=1, logdir=str(tmp_path), evaluations=4)
    study = optuna.create_study(storage=storage(tmp_path / "s.journal"), direction="maximize", pruner=pruner,
                                sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial({"n_steps": 64, "batch_size": 64})
    study.optimize(objective, n_trials=1)
    trial = study.trials[0]
    assert trial.state.name == state
    steps = sorted(trial.intermediate_values)
    # Pruned at its first evaluation and stopped there; otherwise evaluated to the end.
    assert steps == ([64] if state == "PRUNED" else [64, 128, 192, 256])


def test_tuning_seeds_never_reach_the_evaluation_seeds(tmp_path):
    with pytest.raises(ValueError, match="reach the evaluation seeds"):
        Objective("ppo", ENV, 64, 1, DEFAULT_EVAL_SEED + 1, str(tmp_path))
    with pytest.raises(ValueError, match="no search space for algo 'td3'; valid: ppo, sac"):
        Objective("td3", ENV, 64, 1, 2, str(tmp_path))


@pytest.mark.parametrize("algo", sorted(SEARCH_SPACES))
def test_every_point_of_a_search_space_is_valid_hyperparameters(algo):
    trial = optuna.trial.FixedTrial({name: (dim.values[-1] if dim.kind == "choice" else dim.values[0])
                                     for name, dim in SEARCH_SPACES[algo].items()})
    sampled = {name: dim.suggest(trial, name) for name, dim in SEARCH_SPACES[algo].items()}
    hp = hyperparams_of(algo, sampled, n_envs=1)
    check_hyperparams(algo, {**load_hyperparams(algo), **hp})
    if algo == "ppo":  # RL Zoo's rule: a minibatch is at most a rollout
        assert hyperparams_of(algo, {**sampled, "n_steps": 64, "batch_size": 256}, 2)["batch_size"] == 128


def test_trials_are_split_over_the_processes():
    assert tune_cmd.shares(5, 2) == [3, 2] and tune_cmd.shares(1, 4) == [1] and sum(tune_cmd.shares(7, 3)) == 7

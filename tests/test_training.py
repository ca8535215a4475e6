"""The learned-pacing workflow: train, evaluate, compare, TensorBoard tags, resume, errors."""

from __future__ import annotations

import json

import pytest
from stable_baselines3.common.callbacks import BaseCallback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agents.evaluation import METRICS, episode_metrics, evaluate, policy_from_spec
from agents.sb3 import detect_algo, load_hyperparams, vecnormalize_path
from agents.stats import mean_ci
from agents.training import TrainConfig, train
from experiments import compare as compare_cmd
from experiments import evaluate as evaluate_cmd
from experiments import train as train_cmd

ENV = {"horizon": 20, "workload_kwargs": {"rate": 40.0, "burst_period": 4.0, "burst_factor": 3.0,
                                          "burst_duration": 1.0}}
ENV_JSON = json.dumps(ENV)
PPO_TINY = ["n_steps=64", "batch_size=32", "n_epochs=2"]
EVAL_TAGS = {f"eval/{m}" for m in METRICS}


def scalars(logdir) -> dict[str, list]:
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}


def train_argv(logdir, *extra: str) -> list[str]:
    return ["--algo", "ppo", "--timesteps", "256", "--logdir", str(logdir), "--env-kwargs", ENV_JSON,
            "--eval-episodes", "2", "--eval-freq", "128", "--no-progress", *extra, "--hyperparams", *PPO_TINY]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A PPO run of 256 steps (normalized, checkpoints every 128 steps)."""
    logdir = tmp_path_factory.mktemp("runs")
    train_cmd.main(train_argv(logdir, "--checkpoint-every", "128"))
    return logdir / "ppo_s0"


def test_train_writes_model_stats_and_tensorboard(trained):
    assert (trained / "model.zip").exists() and (trained / "vecnormalize.pkl").exists()
    assert detect_algo(trained / "model.zip") == "ppo"
    assert sorted(p.name for p in (trained / "checkpoints").iterdir()) == [
        "ppo_128_steps.zip", "ppo_256_steps.zip", "ppo_vecnormalize_128_steps.pkl", "ppo_vecnormalize_256_steps.pkl"]
    assert vecnormalize_path(trained / "checkpoints" / "ppo_128_steps.zip").name == "ppo_vecnormalize_128_steps.pkl"
    tags = scalars(trained)
    assert EVAL_TAGS <= set(tags) and "train/value_loss" in tags
    assert tags["eval/utility"][-1].step == 256
    acc = EventAccumulator(str(trained))
    acc.Reload()
    assert "_hparams_/experiment" in acc.PluginTagToContent("hparams")


def test_evaluate_builtin_and_zip_on_identical_seeds(trained, tmp_path, capsys):
    for spec in ("ogd", str(trained / "model.zip")):
        evaluate_cmd.main(["--policy", spec, "--episodes", "3", "--seed", "7", "--logdir", str(tmp_path),
                           "--env-kwargs", ENV_JSON, "--no-progress"])
    assert "utility" in capsys.readouterr().out
    for name in ("ogd", "ppo_s0"):
        tags = scalars(tmp_path / name)
        assert EVAL_TAGS <= set(tags)
        assert [e.step for e in tags["eval/utility"]] == [0, 1, 2]
    # Identical seeds give identical episodes: the welfare of a deterministic policy repeats exactly.
    ogd = policy_from_spec("ogd")
    assert evaluate(ogd, ENV, 2, seed=7, progress=False) == evaluate(ogd, ENV, 2, seed=7, progress=False)


def test_resume_continues_step_count(trained, tmp_path):
    train_cmd.main(train_argv(tmp_path, "--resume", str(trained / "model.zip"), "--run-name", "resumed"))
    tags = scalars(tmp_path / "resumed")
    assert tags["eval/utility"][-1].step == 512
    assert min(e.step for e in tags["eval/utility"]) > 256


def test_ctrl_c_saves_a_checkpoint(tmp_path):
    class Interrupt(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= 64:
                raise KeyboardInterrupt
            return True

    config = TrainConfig(algo="ppo", logdir=tmp_path, timesteps=256, env_kwargs=ENV, progress=False,
                         hyperparams={"n_steps": 32, "batch_size": 32, "n_epochs": 1})
    with pytest.raises(SystemExit) as exc:
        train(config, callbacks=[Interrupt()])
    assert exc.value.code == 130
    assert (tmp_path / "ppo_s0" / "model.zip").exists() and (tmp_path / "ppo_s0" / "vecnormalize.pkl").exists()
    assert list((tmp_path / "ppo_s0").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("algo, n_envs, hyperparams", [
    ("sac", 2, {"learning_starts": 32, "batch_size": 16}),  # two SubprocVecEnv workers
    ("td3", 1, {"learning_starts": 32, "batch_size": 16}),
    ("a2c", 1, {}),
])
def test_every_algo_trains_and_saves(tmp_path, algo, n_envs, hyperparams):
    train(TrainConfig(algo=algo, logdir=tmp_path, timesteps=64, n_envs=n_envs, env_kwargs=ENV, eval_episodes=1,
                      progress=False, hyperparams=hyperparams))
    assert detect_algo(tmp_path / f"{algo}_s0" / "model.zip") == algo


@pytest.mark.parametrize("argv, message", [
    (["--algo", "dqn"], "unknown --algo 'dqn'; valid: ppo, sac, td3, a2c"),
])
def test_bad_algo(tmp_path, argv, message):
    with pytest.raises(SystemExit, match=message):
        train_cmd.main([*argv, "--logdir", str(tmp_path)])


@pytest.mark.parametrize("policy", ["greedy", "fixed:abc", "missing.zip"])
def test_bad_policy(tmp_path, policy):
    with pytest.raises(SystemExit, match="evaluate: (unknown policy|bad policy|model not found)"):
        evaluate_cmd.main(["--policy", policy, "--logdir", str(tmp_path), "--no-progress"])


def test_bad_compare_algos(tmp_path):
    with pytest.raises(SystemExit, match="valid: ppo, sac, td3, a2c"):
        compare_cmd.main(["--algos", "ppo,dqn", "--logdir", str(tmp_path), "--out", str(tmp_path)])


def test_hyperparams_files_load_for_every_algo():
    for algo in ("ppo", "sac", "td3", "a2c"):
        hp = load_hyperparams(algo)
        assert hp["policy"] == "MlpPolicy" and hp["n_timesteps"] > 0


def test_metric_definitions():
    step = {"utility": 1.0, "welfare": 2.0, "payment": 0.5, "spent": 0.5, "budget": 2.0, "latency": 1.0,
            "ttft": 0.1, "hit_rate": 0.5, "admitted": 1, "finished": 1}
    empty = {**step, "utility": 0.0, "welfare": 0.0, "payment": 0.0, "spent": 1.0, "latency": 0.0, "ttft": 0.0,
             "hit_rate": 0.0, "admitted": 0, "finished": 0}
    later = {**step, "spent": 1.5, "latency": 4.0, "finished": 3, "hit_rate": 1.0, "admitted": 3}
    m = episode_metrics([step, empty, later])
    assert m == {"utility": 2.0, "welfare": 4.0, "budget_spent_frac": 0.75, "mean_latency": 3.25,
                 "ttft": 0.1, "cache_hit_rate": 0.875, "payments": 1.0}
    assert mean_ci([1.0, 3.0]) == (2.0, pytest.approx(12.706))


def test_compare_end_to_end(tmp_path, capsys):
    compare_cmd.main(["--algos", "ppo", "--timesteps", "64", "--seeds", "1", "--episodes", "2",
                      "--logdir", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--env-kwargs", ENV_JSON,
                      "--eval-freq", "64", "--no-progress", "--hyperparams", "n_steps=32", "batch_size=32",
                      "n_epochs=1"])
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} == {"compare.csv", "compare.md", "compare.png", "episodes.csv"}
    table = capsys.readouterr().out
    assert "| ppo |" in table and "| ogd |" in table and "| truthful |" in table
    for run in ("ppo_s0", "eval/ppo_s0", "eval/ogd", "eval/truthful"):
        assert EVAL_TAGS <= set(scalars(tmp_path / "runs" / run))

"""Multi-agent training on RLlib: a tiny PPO run per policy sharing (one iteration of 200 env
steps, sampled in this process), checkpoints, Ctrl-C, TensorBoard tags, and the evaluation of the
learned population. Skipped when Ray is not installed (the `rllib` extra)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import torch  # noqa: E402
from ray.rllib.core import Columns  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from test_training import scalars, session_status, usage_error  # noqa: E402

from agents.evaluation import METRICS, evaluate  # noqa: E402
from agents.population import MARKET_METRICS, agent_names, evaluate_population  # noqa: E402
from agents.rllib import SHARED_MODULE, load_population, module_ids, ppo_config  # noqa: E402
from agents.rllib_training import MultiTrainConfig, init_ray, train_multi  # noqa: E402
from experiments.cli import main as cli_main  # noqa: E402

# A fixed 40 requests/s whichever env id plays it: v1 and v2 draw each episode's rate, so theirs is given here too.
ENV = {"horizon": 20, "episode_draws": {"rate": [40.0]}}
AGENTS = agent_names(ENV)
# One iteration of 200 env steps (800 bidder steps), one pass of minibatches of 100.
TINY = {"train_batch_size_per_learner": 200, "minibatch_size": 100, "num_epochs": 1}


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    init_ray(num_cpus=1)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A shared-policy run through the command line and a per-bidder run through the API."""
    logdir = tmp_path_factory.mktemp("rllib")
    cli_main(["train-multi", "--timesteps", "200", "--logdir", str(logdir), "--env-kwargs", json.dumps(ENV),
              "--eval-episodes", "1", "--hyperparams", *(f"{k}={v}" for k, v in TINY.items())])
    per_bidder = train_multi(MultiTrainConfig(logdir=logdir, timesteps=200, sharing="per_bidder", env_kwargs=ENV,
                                              hyperparams=TINY, eval_episodes=1))
    return {"shared": logdir / "rllib_shared_s0", "per_bidder": per_bidder.run_dir}


def test_sharing_maps_bidders_to_modules():
    assert module_ids("shared", AGENTS) == [SHARED_MODULE]
    assert module_ids("per_bidder", AGENTS) == AGENTS
    for sharing in ("shared", "per_bidder"):
        config = ppo_config(ENV, sharing)
        assert set(config.policies) == set(module_ids(sharing, AGENTS))
        assert [config.policy_mapping_fn(a, None) for a in AGENTS] == [
            SHARED_MODULE if sharing == "shared" else a for a in AGENTS]
    with pytest.raises(ValueError, match="unknown policy sharing"):
        module_ids("everyone", AGENTS)


def test_a_run_writes_a_checkpoint_per_sharing_and_the_eval_tags(trained):
    shared, per_bidder = trained["shared"], trained["per_bidder"]
    modules = shared / "checkpoint" / "learner_group" / "learner" / "rl_module"
    assert sorted(p.name for p in modules.iterdir() if p.is_dir()) == [SHARED_MODULE]
    modules = per_bidder / "checkpoint" / "learner_group" / "learner" / "rl_module"
    assert sorted(p.name for p in modules.iterdir() if p.is_dir()) == AGENTS
    for run in (shared, per_bidder):
        tags = scalars(run)
        assert {f"eval/{m}" for m in METRICS} | {f"population/{m}" for m in MARKET_METRICS} <= set(tags)
        assert [e.step for e in tags["eval/utility"]] == [200]
        assert "rllib/episode_return_mean" in tags
        assert session_status(run) == "STATUS_SUCCESS"
        assert json.loads((run / "config.json").read_text())["env_kwargs"] == ENV


def test_loaded_populations_share_or_not_and_evaluate_to_finite_metrics(trained, monkeypatch):
    monkeypatch.chdir(trained["shared"])
    shared = load_population("checkpoint", AGENTS)  # a relative path, as typed on the command line
    per_bidder = load_population(trained["per_bidder"] / "checkpoint", AGENTS)
    assert len({id(p) for p in shared.values()}) == 1
    assert len({id(p) for p in per_bidder.values()}) == len(AGENTS)
    for population in (shared, per_bidder):
        episodes = evaluate_population(population, ENV, episodes=2, progress=False)
        assert all(math.isfinite(v) for e in episodes for v in e.values())
        focal = evaluate(population["bidder_0"], ENV, episodes=1, progress=False)
        assert all(math.isfinite(v) for v in focal[0].values())


def test_a_policy_acts_on_its_gaussian_mean_inside_the_action_space(trained):
    policy = load_population(trained["per_bidder"] / "checkpoint", AGENTS)["bidder_1"]
    obs = np.random.default_rng(0).uniform(0, 1, (5, 12)).astype(np.float32)
    with torch.no_grad():
        inputs = policy.module.forward_inference({Columns.OBS: torch.from_numpy(obs)})[Columns.ACTION_DIST_INPUTS]
    mean = inputs[:, :1].numpy()  # a diagonal Gaussian's inputs are its means, then its log stds
    action, state = policy.predict(obs)
    assert state is None and action.shape == (5, 1)
    np.testing.assert_allclose(action, np.clip(mean, -1.0, 1.0), atol=1e-6)  # unsquash onto [-1, 1] rounds
    np.testing.assert_allclose(policy.predict(obs[0])[0], action[0], atol=1e-6)  # a batch of 1 rounds differently


def test_ctrl_c_saves_a_checkpoint(tmp_path):
    def interrupt(steps, result):
        raise KeyboardInterrupt

    config = MultiTrainConfig(logdir=tmp_path, timesteps=1000, env_kwargs=ENV, hyperparams=TINY, eval_episodes=1)
    with pytest.raises(SystemExit) as exc:
        train_multi(config, on_iteration=interrupt)
    assert exc.value.code == 130
    run = tmp_path / "rllib_shared_s0"
    assert set(load_population(run / "checkpoint", AGENTS)) == set(AGENTS)
    assert session_status(run) == "STATUS_FAILURE"
    text = EventAccumulator(str(run), size_guidance={"tensors": 0}).Reload().Tensors("run/status/text_summary")
    assert "interrupted at step 200" in " ".join(str(t) for t in text)


def test_load_population_errors(trained, tmp_path):
    with pytest.raises(ValueError, match="not an RLlib algorithm checkpoint"):
        load_population(tmp_path, AGENTS)
    with pytest.raises(ValueError, match="has no module for bidder_4"):
        load_population(trained["per_bidder"] / "checkpoint", [*AGENTS, "bidder_4"])


@pytest.mark.parametrize("argv, message", [
    (["--policies", "everyone"], "--policies: unknown policy sharing 'everyone'; valid: shared, per_bidder"),
    (["--hyperparams", "learning_rate=0.1"], "--hyperparams: unknown RLlib PPO training argument(s) learning_rate"),
    (["--hyperparams", "minibatch_size=5000"], "--hyperparams: `minibatch_size` (5000) must be <="),
    (["--env-kwargs", '{"other_bidders": "truthful"}'], "--env-kwargs: other_bidders"),
    (["--address", "auto", "--num-cpus", "2"], "--num-cpus sets up a local Ray"),
    (["--num-env-runners", "64"], "--num-env-runners 64 --num-learners 0: each takes a CPU"),
])
def test_train_multi_user_errors_before_any_work(tmp_path, capsys, argv, message):
    assert message in usage_error(capsys, "train-multi", ["--logdir", str(tmp_path), *argv])
    assert not list(tmp_path.iterdir())


def test_evaluate_multi_compares_learned_populations_with_the_baselines(trained, tmp_path, capsys):
    cli_main(["evaluate-multi", "--checkpoint", str(trained["shared"] / "checkpoint"),
              str(trained["per_bidder"] / "checkpoint"), "--episodes", "2", "--out", str(tmp_path), "--no-progress"])
    md = (tmp_path / "population.md").read_text()
    for name in ("rllib_shared_s0", trained["per_bidder"].name, "ogd", "truthful"):
        assert f"| {name} | 2 |" in md and f"| {name} | bidder_3 |" in md
    assert json.dumps(ENV) in md  # the scenario the runs were trained in, from their config.json
    focal = md.split("focal bidder of RadixAuction-v0")[1]  # bidder 0's policies against OGD, as compare scores
    assert "utility_vs_ogd" in focal and "| rllib_shared_s0 | 2 |" in focal and "| ogd | 2 |" in focal
    assert "nan" not in md

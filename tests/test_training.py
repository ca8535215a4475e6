"""The learned-pacing workflow: train, evaluate, compare, TensorBoard tags, resume, errors."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.api_pb2 import Status
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from agents.evaluation import DEFAULT_EVAL_SEED, METRICS, episode_metrics, evaluate, policy_from_spec
from agents.learners import check_hyperparams as check_learner_hyperparams
from agents.sb3 import (
    HYPERPARAMS_DIR,
    detect_algo,
    load_hyperparams,
    load_policy,
    make_env,
    played_action_type,
    saved_env_kwargs,
    vecnormalize_path,
)
from agents.stats import format_ci, mean_ci
from agents.training import TrainConfig, train
from auction_gym.envs.sb3_vec import RadixAuctionVecEnv
from auction_gym.pacing import FixedMultiplier, Truthful
from auction_gym.scenarios import scenario
from experiments.cli import build_parser
from experiments.cli import main as cli_main
from experiments.commands import compare as compare_cmd
from experiments.commands import compare_report
from experiments.commands import evaluate as evaluate_cmd
from experiments.commands import train as train_cmd
from experiments.commands.headroom_report import headroom

# A fixed 40 requests/s whichever env id plays it: v1 and v2 draw each episode's rate, so theirs is given here too.
ENV = {"horizon": 20, "episode_draws": {"rate": [40.0]},
       "workload_kwargs": {"burst_period": 4.0, "burst_factor": 3.0, "burst_duration": 1.0}}
ENV_JSON = json.dumps(ENV)
PPO_TINY = ["n_steps=64", "batch_size=32", "n_epochs=2", "n_envs=1"]
EVAL_TAGS = {f"eval/{m}" for m in METRICS}


def usage_error(capsys, command: str, argv: list[str]) -> str:
    """Run `radix-auction COMMAND ARGV`, expect a one-line user error (exit 2); its message."""
    with pytest.raises(SystemExit) as exc:
        cli_main([command, *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 or err.startswith("usage:"), err
    return err.splitlines()[-1]


def session_status(logdir) -> str:
    """The status of the HPARAMS session written in `logdir`."""
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")["_hparams_/session_end_info"]
    return Status.Name(HParamsPluginData.FromString(content).session_end_info.status)


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
    assert session_status(trained) == "STATUS_SUCCESS"


def test_evaluate_builtin_and_zip_on_identical_seeds(trained, tmp_path, capsys):
    for spec in ("ogd", str(trained / "model.zip")):
        evaluate_cmd.main(["--policy", spec, "--episodes", "3", "--seed", "7", "--logdir", str(tmp_path),
                           "--env-kwargs", ENV_JSON, "--no-progress"])
    out = capsys.readouterr().out
    assert "utility" in out and " ± " in out and "+-" not in out
    for name in ("ogd", "ppo_s0"):
        tags = scalars(tmp_path / name)
        assert EVAL_TAGS <= set(tags)
        assert [e.step for e in tags["episode/utility"]] == [0, 1, 2]
        assert [e.step for e in tags["eval/utility"]] == [0]
        assert tags["eval/utility"][0].value == pytest.approx(sum(e.value for e in tags["episode/utility"]) / 3)
    # Identical seeds give identical episodes: the welfare of a deterministic policy repeats exactly.
    ogd = policy_from_spec("ogd")
    assert evaluate(ogd, ENV, 2, seed=7, progress=False) == evaluate(ogd, ENV, 2, seed=7, progress=False)


def test_resume_continues_step_count(trained, tmp_path):
    train_cmd.main(train_argv(tmp_path, "--resume", str(trained / "model.zip"), "--run-name", "resumed"))
    tags = scalars(tmp_path / "resumed")
    assert tags["eval/utility"][-1].step == 512
    assert min(e.step for e in tags["eval/utility"]) > 256


def test_a_second_run_never_overwrites_the_first(tmp_path, capsys):
    argv = ["--algo", "ppo", "--timesteps", "32", "--logdir", str(tmp_path), "--env-kwargs", ENV_JSON,
            "--eval-episodes", "1", "--no-progress", "--hyperparams", "n_steps=32", "batch_size=32", "n_epochs=1",
            "n_envs=1"]
    train_cmd.main(argv)
    first = (tmp_path / "ppo_s0" / "model.zip").read_bytes()
    events = sorted(p.name for p in (tmp_path / "ppo_s0").glob("events.out.tfevents.*"))
    train_cmd.main(argv)
    assert (tmp_path / "ppo_s0" / "model.zip").read_bytes() == first
    assert sorted(p.name for p in (tmp_path / "ppo_s0").glob("events.out.tfevents.*")) == events
    assert (tmp_path / "ppo_s0_2" / "model.zip").exists()
    assert f"saved {tmp_path / 'ppo_s0_2' / 'model.zip'}" in capsys.readouterr().out
    train_cmd.main([*argv, "--overwrite"])  # asked: replaces ppo_s0, one events file again
    assert len(list((tmp_path / "ppo_s0").glob("events.out.tfevents.*"))) == 1
    assert not (tmp_path / "ppo_s0_3").exists()
    # Resuming continues in the run it resumes, on purpose, in the scenario it was trained in.
    train_cmd.main(["--algo", "ppo", "--timesteps", "32", "--logdir", str(tmp_path), "--eval-episodes", "1",
                    "--no-progress", "--n-envs", "1", "--resume", str(tmp_path / "ppo_s0_2" / "model.zip")])
    assert f"{tmp_path / 'ppo_s0_2' / 'config.json'}" in capsys.readouterr().out
    assert scalars(tmp_path / "ppo_s0_2")["eval/utility"][-1].step == 64
    assert not (tmp_path / "ppo_s0_3").exists()
    for _ in range(2):
        evaluate_cmd.main(["--policy", "ogd", "--episodes", "1", "--logdir", str(tmp_path / "eval"),
                           "--env-kwargs", ENV_JSON, "--no-progress"])
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["ogd", "ogd_2"]


def test_evaluate_uses_the_scenario_the_model_was_trained_in(trained, tmp_path, capsys):
    model = str(trained / "model.zip")
    evaluate_cmd.main(["--policy", model, "--episodes", "2", "--seed", "3", "--logdir", str(tmp_path),
                       "--no-progress"])
    out = capsys.readouterr().out
    assert f"environment arguments from {trained / 'config.json'}" in out
    expected = evaluate(load_policy(model), ENV, 2, seed=3, progress=False)
    mean, half = mean_ci([r["utility"] for r in expected])
    assert f"utility            {format_ci(mean, half)}" in out
    evaluate_cmd.main(["--policy", model, "--episodes", "1", "--logdir", str(tmp_path), "--no-progress",
                       "--env-kwargs", '{"horizon": 5}'])
    assert "overridden by --env-kwargs: " + json.dumps({**ENV, "horizon": 5}) in capsys.readouterr().out


def test_evaluation_runs_once_per_rollout_and_the_output_says_what_was_trained(tmp_path, capsys):
    # Asked for 64 steps, PPO collects a whole rollout of 128: one evaluation, at its end, not one
    # every 6 steps of the same policy.
    train_cmd.main(["--algo", "ppo", "--timesteps", "64", "--logdir", str(tmp_path), "--env-kwargs", ENV_JSON,
                    "--eval-episodes", "1", "--no-progress", "--hyperparams", "n_steps=128", "batch_size=64",
                    "n_epochs=1", "n_envs=1"])
    out = capsys.readouterr().out
    assert "(128 steps, 1 evaluations" in out and "trained 128 steps, 64 asked" in out
    assert [e.step for e in scalars(tmp_path / "ppo_s0")["eval/utility"]] == [128]
    # With --eval-freq below a rollout, evaluations fall on rollout boundaries.
    result = train(TrainConfig(algo="ppo", logdir=tmp_path, timesteps=256, env_kwargs=ENV, eval_freq=32,
                               eval_episodes=1, progress=False,
                               hyperparams={"n_steps": 64, "batch_size": 64, "n_epochs": 1, "n_envs": 1}))
    assert [e.step for e in scalars(result.run_dir)["eval/utility"]] == [64, 128, 192, 256]
    assert (result.asked, result.trained, result.eval_steps) == (256, 256, (64, 128, 192, 256))


def test_ctrl_c_saves_a_checkpoint(tmp_path):
    class Interrupt(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= 64:
                raise KeyboardInterrupt
            return True

    config = TrainConfig(algo="ppo", logdir=tmp_path, timesteps=256, env_kwargs=ENV, progress=False,
                         hyperparams={"n_steps": 32, "batch_size": 32, "n_epochs": 1, "n_envs": 1})
    with pytest.raises(SystemExit) as exc:
        train(config, callbacks=[Interrupt()])
    assert exc.value.code == 130
    assert (tmp_path / "ppo_s0" / "model.zip").exists() and (tmp_path / "ppo_s0" / "vecnormalize.pkl").exists()
    assert list((tmp_path / "ppo_s0").glob("events.out.tfevents.*"))
    assert session_status(tmp_path / "ppo_s0") == "STATUS_FAILURE"  # not SB3's SUCCESS written at the start
    assert "interrupted at step" in " ".join(
        str(t) for t in EventAccumulator(str(tmp_path / "ppo_s0"), size_guidance={"tensors": 0}).Reload().Tensors(
            "run/status/text_summary"))


@pytest.mark.parametrize("algo, n_envs, vec_env, hyperparams", [
    ("sac", 2, "subproc", {"learning_starts": 32, "batch_size": 16}),  # two SubprocVecEnv workers
    ("td3", 2, "dummy", {"learning_starts": 32, "batch_size": 16}),
    ("a2c", 1, "dummy", {}),
])
def test_every_algo_trains_and_saves(tmp_path, algo, n_envs, vec_env, hyperparams):
    train(TrainConfig(algo=algo, logdir=tmp_path, timesteps=64, n_envs=n_envs, env_kwargs=ENV, eval_episodes=1,
                      progress=False, hyperparams=hyperparams, vec_env=vec_env))
    assert detect_algo(tmp_path / f"{algo}_s0" / "model.zip") == algo


@pytest.mark.parametrize("argv, message", [
    (["--algo", "dqn"], "unknown --algo 'dqn'; valid: ppo, ppo_paired, ppo_lstm, sac, td3, a2c"),
    (["--algo", "ppo", "--env-kwargs", '{"horizn": 5}'], "--env-kwargs: RadixAuction-v2 got an unknown argument 'horizn' (did you mean 'horizon'?); valid:"),
    (["--algo", "ppo", "--env-kwargs", '{"horizon": -5}'], "--env-kwargs: horizon must be a positive int"),
    (["--algo", "ppo", "--hyperparams", "n_stepz=64"], "unknown hyperparameter 'n_stepz' for ppo; valid:"),
    (["--algo", "ppo", "--hyperparams", "learning_rate=fast"], "hyperparameter learning_rate='fast' for ppo: expected float"),
    (["--algo", "ppo", "--hyperparams", "n_steps"], "--hyperparams expects KEY=VALUE, got 'n_steps'"),
    (["--algo", "ppo", "--hyperparams", "n_steps=0"], "ppo rejected its hyperparameters"),
    (["--algo", "ppo", "--hyperparams-file", "missing.yml"], "--hyperparams-file: no such file: missing.yml"),
    (["--algo", "ppo", "--resume", "missing.zip"], "--resume: model not found: missing.zip"),
    (["--algo", "ppo", "--timesteps", "abc"], "argument --timesteps: expected a number, got 'abc'"),
])
def test_train_user_errors_are_one_line(tmp_path, capsys, argv, message):
    assert message in usage_error(capsys, "train", [*argv, "--logdir", str(tmp_path), "--no-progress"])
    assert not any(tmp_path.iterdir())  # nothing started


@pytest.mark.parametrize("policy, message", [
    ("greedy", "--policy: unknown policy 'greedy'"),
    ("fixed:abc", "--policy: bad policy"),
    ("missing.zip", "--policy: model not found: missing.zip"),
    ("no_data.zip", "is not an SB3 model zip: it has no 'data' entry"),
])
def test_bad_policy(tmp_path, monkeypatch, capsys, policy, message):
    monkeypatch.chdir(tmp_path)
    with zipfile.ZipFile(tmp_path / "no_data.zip", "w") as z:
        z.writestr("policy.pth", b"")
    assert message in usage_error(capsys, "evaluate", ["--policy", policy, "--logdir", "runs", "--no-progress"])


@pytest.mark.parametrize("argv, message", [
    (["--algos", "ppo,dqn"], "valid: ppo, ppo_paired, ppo_lstm, sac, td3, a2c"),
    (["--baselines", "ogd,greedy"], "--baselines: unknown policy 'greedy'"),
    (["--hyperparams", "n_stepz=3"], "--hyperparams: unknown hyperparameter 'n_stepz' for ppo"),
    (["--env-kwargs", '{"mechanism": "sjf"}'], "--env-kwargs: "),
])
def test_compare_checks_every_option_before_any_work(tmp_path, capsys, argv, message):
    assert message in usage_error(capsys, "compare", [*argv, "--logdir", str(tmp_path / "runs"),
                                                      "--out", str(tmp_path / "out"), "--no-progress"])
    assert not any(tmp_path.iterdir())


def test_hyperparams_files_load_for_every_algo():
    for algo in ("ppo", "sac", "td3", "a2c"):
        hp = load_hyperparams(algo)
        assert hp["policy"] == "MlpPolicy" and hp["n_timesteps"] > 0
    for algo in ("ppo", "ppo_paired", "sac", "cmaes"):  # the entries of the next env id, checked as a run checks them
        check_learner_hyperparams(algo, load_hyperparams(algo, env_id="RadixAuction-v1"))
    v1 = load_hyperparams("ppo", env_id="RadixAuction-v1")
    assert v1["n_envs"] == 8 and "log_std_init=" in v1["policy_kwargs"]
    # v1's PPO settings are a search's best trial, and the file says which search.
    assert "# radix-auction tune --algo ppo" in (HYPERPARAMS_DIR / "ppo.yml").read_text()
    paired = load_hyperparams("ppo_paired", env_id="RadixAuction-v1")
    assert {k: v for k, v in paired.items() if k != "train_env_kwargs"} == v1
    assert load_hyperparams("ppo_paired", env_id="RadixAuction-v1")["train_env_kwargs"] == {"reward": "paired"}


def test_make_env_steps_its_envs_in_this_process_unless_asked():
    venv = make_env(ENV, 2, 0)
    assert type(venv) is RadixAuctionVecEnv and venv.num_envs == 2  # the default: one batch of markets
    venv.close()
    for vec_env, cls in (("batched", RadixAuctionVecEnv), ("dummy", DummyVecEnv), ("subproc", SubprocVecEnv)):
        venv = make_env(ENV, 2, 0, vec_env=vec_env)
        try:
            assert type(venv) is cls and venv.num_envs == 2
        finally:
            venv.close()
    with pytest.raises(ValueError, match="unknown vec_env 'threads'; valid: batched, dummy, subproc"):
        make_env(ENV, 2, 0, vec_env="threads")


def test_train_takes_a_named_scenario_and_an_env_id(tmp_path, capsys):
    args = build_parser("train").parse_args(["train", "--scenario", "calibrated", "--env-kwargs", '{"horizon": 50}',
                                             "--logdir", str(tmp_path)])
    config = train_cmd.config_of(args)
    assert config.env_kwargs == {**scenario("calibrated"), "horizon": 50} and config.env_id == "RadixAuction-v2"
    assert "--scenario calibrated" in capsys.readouterr().out
    assert "unknown env id 'RadixAuction-v9'; valid: RadixAuction-v0" in usage_error(
        capsys, "train", ["--env-id", "RadixAuction-v9", "--logdir", str(tmp_path)])


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
    compare_cmd.main(["--algos", "ppo", "--timesteps", "64", "--seeds", "2", "--episodes", "3", "--curve-episodes", "2",
                      "--logdir", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--env-kwargs", ENV_JSON,
                      "--eval-freq", "64", "--no-progress", "--tuning-episodes", "2", "--hyperparams", "n_steps=32",
                      "batch_size=32", "n_epochs=1"])
    out, root = tmp_path / "out", tmp_path / "runs" / "compare"
    assert {p.name for p in out.iterdir()} == {"compare.csv", "compare.md", "compare.png", "policies.png",
                                               "episodes.csv", "headroom.md", "headroom.csv", "headroom.png"}
    table = capsys.readouterr().out
    for row in ("ppo", "ppo_start", "ogd", "pid", "truthful", "best_fixed", "ogd_tuned", "pid_tuned", "ppo_s0",
                "ppo_s1", "privileged", "hindsight", "unlimited_budget"):
        assert f"| {row} |" in table
    # The messages state the steps the models record: whole rollouts of 32 steps x the file's 8 envs.
    recorded = PPO.load(root / "ppo_s0" / "model.zip").num_timesteps
    assert recorded == 256
    steps = f"{recorded} steps (64 asked: training stops at the end of a rollout or generation)"
    assert "Verdicts:" in table and f"- ppo (2 seeds x {steps}, 95% CI" in table
    assert "Across training seeds" in table and "| ppo | 2 |" in table
    for column in ("utility_vs_ogd", "utility_vs_pid_tuned", "utility_vs_hindsight", "gain_over_start",
                   "headroom_share"):
        assert column in table
    # One TensorBoard run per learned seed: its curve (eval/*), final and untrained evaluations.
    assert not (root / "eval").exists()
    assert EVAL_TAGS <= set(scalars(root / "ppo_s0"))
    assert {f"final/{m}" for m in METRICS} | {f"start/{m}" for m in METRICS} <= set(scalars(root / "ppo_s0"))
    # One x axis: a baseline's and a bound's flat lines sit at the learned runs' evaluation steps,
    # the means over the first --curve-episodes episodes, as the learned curves are.
    learned_steps = {e.step for s in (0, 1) for e in scalars(root / f"ppo_s{s}")["eval/utility"]}
    ogd = scalars(root / "baselines" / "ogd")
    assert {e.step for e in ogd["eval/utility"]} == learned_steps and len({e.value for e in ogd["eval/utility"]}) == 1
    episodes = [e.value for e in ogd["episode/utility"]]
    assert len(episodes) == 3 and ogd["eval/utility"][0].value == pytest.approx(np.mean(episodes[:2]), rel=1e-6)
    assert ogd["final/utility"][0].value == pytest.approx(np.mean(episodes), rel=1e-6)
    assert {e.step for e in scalars(root / "bounds" / "hindsight")["eval/utility"]} == learned_steps
    report = (out / "compare.md").read_text()
    assert f"`{root}`" in report and "--curve-episodes 2" in report and f"each run trained ppo {steps};" in report
    assert "best_fixed = fixed:" in report and "ogd_tuned = ogd:eta=" in report and "tuning seeds 0..1" in report


def test_compare_tensorboard_layout_charts_every_metric():
    layout = compare_report.tensorboard_layout(20)
    first = next(iter(layout.values()))
    assert list(first) == [f"eval/{m}" for m in METRICS]
    assert all(chart == ["Multiline", [rf"^eval/{m}$"]] for m, chart in zip(METRICS, first.values()))
    assert [name.split(":")[0] for name in layout] == ["eval", "final", "episode"]


def test_seed_stats_pair_each_seed_with_its_references():
    runs = [[{"utility": 10.0}, {"utility": 20.0}], [{"utility": 12.0}, {"utility": 22.0}]]
    starts = [[{"utility": 9.0}, {"utility": 19.0}], [{"utility": 9.0}, {"utility": 19.0}]]
    refs = {"best_fixed": [8.0, 18.0], "hindsight": [12.0, 22.0], "ogd": [11.0, 21.0]}
    stats = compare_report.seed_stats(runs, starts, refs)
    assert stats["utility"][0] == 16.0 and stats["start"][0] == 14.0
    assert stats["gain_over_start"][0] == 2.0 and stats["utility_vs_ogd"][0] == 0.0
    # Seed 0 takes half of the headroom (15 - 13) / (17 - 13), seed 1 all of it.
    assert stats["headroom_share"][0] == pytest.approx(0.75)
    best = compare_report.best_baseline({"ogd": 16.0, "best_fixed": 13.0, "hindsight": 17.0})
    assert best == "ogd"  # hindsight is a bound, not a baseline a bidder can play
    verdict = compare_report.verdicts({"ppo": stats}, best, 2, {"ppo": "100 steps"})[0]
    assert "not distinguishable from ogd" in verdict and "gained 2 ± " in verdict
    same = compare_report.seed_stats([runs[0], runs[0]], None, refs)  # two seeds, one policy
    assert "every seed the same" in compare_report.verdicts({"cmaes": same}, best, 2, {"cmaes": "100 steps"})[0]


def test_compare_takes_the_headroom_episodes_of_the_policies_it_scored():
    """compare does not play a baseline again that the headroom report played on the same
    episodes: what the report hands over is what playing that baseline gives."""
    report = headroom(ENV, tuning_episodes=2, eval_episodes=2)
    assert set(report.episodes) == {"best_fixed", "truthful", "ogd", "ogd_tuned", "pid_tuned"}
    played = {name: evaluate(policy, ENV, 2, DEFAULT_EVAL_SEED, progress=False)
              for name, policy in (("ogd", policy_from_spec("ogd")), ("truthful", policy_from_spec("truthful")),
                                   *report.tuned.items())}
    assert {name: report.episodes[name] for name in played} == played
    # The check has teeth: another policy, or other episodes, play differently here.
    assert evaluate(FixedMultiplier(0.0), ENV, 2, DEFAULT_EVAL_SEED, progress=False) != played["truthful"]
    assert evaluate(Truthful(), ENV, 2, DEFAULT_EVAL_SEED + 1, progress=False) != played["truthful"]


def test_stack_matches_sb3s_frame_stacking():
    from gymnasium import spaces
    from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

    from agents.sb3 import stack

    sb3 = StackedObservations(1, 3, spaces.Box(-10, 10, (4,)))
    rng = np.random.default_rng(0)
    first = rng.normal(size=4).astype(np.float32)
    expected, ours = sb3.reset(first[None])[0], stack(None, first, 3)
    np.testing.assert_array_equal(ours, expected)
    for _ in range(5):
        obs = rng.normal(size=4).astype(np.float32)
        expected = sb3.update(obs[None], np.array([False]), [{}])[0][0]
        ours = stack(ours, obs, 3)
        np.testing.assert_array_equal(ours, expected)


def test_frame_stack_trains_and_evaluates(tmp_path):
    result = train(TrainConfig(algo="ppo", logdir=tmp_path, timesteps=64, env_kwargs=ENV, eval_episodes=1,
                               progress=False, hyperparams={"n_steps": 64, "batch_size": 32, "n_epochs": 1,
                                                            "frame_stack": 3}))
    policy = load_policy(result.model_path)
    assert policy.frames == 3 and policy.model.observation_space.shape == (36,)
    assert EVAL_TAGS <= set(scalars(result.run_dir))
    first, again = (evaluate(policy, ENV, 2, seed=3, progress=False) for _ in range(2))
    assert first == again  # each episode starts a fresh stack, so repeated evaluations agree
    with pytest.raises(ValueError, match="frame_stack=0"):
        train(TrainConfig(algo="ppo", logdir=tmp_path, timesteps=64, env_kwargs=ENV, progress=False,
                          hyperparams={"frame_stack": 0}))


def test_train_env_kwargs_reach_the_training_envs_only(tmp_path, monkeypatch):
    """A hyperparameter file's `train_env_kwargs` (a training reward) shape the training envs; the
    evaluations play the run's own env arguments."""
    import agents.training as training

    made = []
    make_env = training.make_env
    monkeypatch.setattr(training, "make_env", lambda kwargs, *a, **k: made.append(kwargs) or make_env(kwargs, *a, **k))
    result = train(TrainConfig(algo="ppo", logdir=tmp_path, timesteps=64, env_kwargs=ENV, eval_episodes=1,
                               progress=False, hyperparams={"n_steps": 64, "batch_size": 32, "n_epochs": 1,
                                                            "n_envs": 1, "train_env_kwargs": {"reward": "cost"}}))
    assert made == [{**ENV, "reward": "cost"}]
    assert saved_env_kwargs(result.model_path)[0] == ENV
    for bad in ("paired", {"action_type": "log"}):
        with pytest.raises(ValueError, match="train_env_kwargs"):
            train(TrainConfig(algo="ppo", logdir=tmp_path, timesteps=64, env_kwargs=ENV, progress=False,
                              hyperparams={"train_env_kwargs": bad}))


def test_a_model_knows_the_action_type_it_was_trained_in(trained):
    """Read from its run's config.json, for the final model, a checkpoint and the untrained start,
    so that an env of another action type with the same box is refused rather than played."""
    config = json.loads((trained / "config.json").read_text())
    expected = played_action_type(config["env_kwargs"], config["env_id"])
    other = "log" if expected != "log" else "normalized"
    for path in (trained / "model.zip", trained / "initial" / "model.zip", trained / "checkpoints" / "ppo_128_steps.zip"):
        policy = load_policy(path)
        assert policy.action_type == expected
        with pytest.raises(ValueError, match=f"trained on action_type='{expected}'"):
            evaluate(policy, {**ENV, "action_type": other}, 1, progress=False, env_id=config["env_id"])

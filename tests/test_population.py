"""Population evaluation on the PettingZoo env (every bidder on its policy); no Ray needed."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from agents.evaluation import evaluate, policy_from_spec
from agents.population import (
    BIDDER_METRICS,
    MARKET_METRICS,
    agent_names,
    check_population_env_kwargs,
    evaluate_population,
    uniform_population,
)
from experiments.cli import main as cli_main

# A fixed 40 requests/s whichever env id plays it: v1 and v2 draw each episode's rate, so theirs is given here too.
ENV = {"horizon": 30, "episode_draws": {"rate": [40.0]},
       "workload_kwargs": {"burst_period": 4.0, "burst_factor": 3.0, "burst_duration": 1.0}}


def test_population_metrics_are_the_evaluation_metrics_of_every_bidder():
    agents = agent_names(ENV)
    episodes = evaluate_population(uniform_population("ogd", agents), ENV, episodes=3, seed=7, progress=False)
    assert len(episodes) == 3
    for e in episodes:
        assert set(e) == {*MARKET_METRICS, *(f"{a}/{m}" for a in agents for m in BIDDER_METRICS)}
        assert all(math.isfinite(v) for v in e.values())
        assert e["revenue"] == pytest.approx(sum(e[f"{a}/payments"] for a in agents))
        assert e["total_utility"] == pytest.approx(e["welfare"] - e["revenue"])
    # All-OGD on the PettingZoo env (its defaults are v0's) is the market RadixAuction-v0 plays with
    # OGD focal and OGD opponents: the same seeds give bidder 0 the same metrics, market and own.
    focal = evaluate(policy_from_spec("ogd"), ENV, episodes=3, seed=7, progress=False, env_id="RadixAuction-v0")
    for e, f in zip(episodes, focal):
        for m in ("welfare", "mean_latency", "ttft", "cache_hit_rate"):
            assert e[m] == pytest.approx(f[m], rel=1e-12)
        for m in BIDDER_METRICS:
            assert e[f"bidder_0/{m}"] == pytest.approx(f[m], rel=1e-12)


def test_identical_seeds_for_every_population_and_truthful_spends_more():
    agents = agent_names(ENV)
    ogd = evaluate_population(uniform_population("ogd", agents), ENV, episodes=2, seed=3, progress=False)
    assert ogd == evaluate_population(uniform_population("ogd", agents), ENV, episodes=2, seed=3, progress=False)
    truthful = evaluate_population(uniform_population("truthful", agents), ENV, episodes=2, seed=3, progress=False)
    assert sum(e["revenue"] for e in truthful) >= sum(e["revenue"] for e in ogd)


def test_population_errors():
    agents = agent_names(ENV)
    with pytest.raises(ValueError, match="no policy for bidder_3"):
        evaluate_population(uniform_population("ogd", agents[:3]), ENV, episodes=1, progress=False)

    class OtherSpace:
        action_space = gym.spaces.Box(0.0, 5.0, (1,), np.float32)

        def predict(self, observation, state=None, episode_start=None, deterministic=True):
            return np.zeros(1, np.float32), state

    with pytest.raises(ValueError, match="the policy acts in"):
        evaluate_population({a: OtherSpace() for a in agents}, ENV, episodes=1, progress=False)
    with pytest.raises(ValueError, match="other_bidders"):
        check_population_env_kwargs({"other_bidders": "truthful"})
    with pytest.raises(ValueError, match="got an unknown argument"):
        check_population_env_kwargs({"horizn": 3})
    with pytest.raises(ValueError, match="built-in"):
        uniform_population("runs/ppo_s0/model.zip", agents)


def test_evaluate_multi_baselines_only(tmp_path, capsys):
    cli_main(["evaluate-multi", "--baselines", "ogd,truthful,fixed:0.02", "--episodes", "2", "--env-kwargs",
              json.dumps(ENV), "--out", str(tmp_path), "--no-progress"])
    md = (tmp_path / "population.md").read_text()
    for row in ("| ogd | 2 |", "| truthful | 2 |", "| fixed_0.02 | 2 |", "| fixed_0.02 | bidder_3 |"):
        assert row in md
    assert "welfare_vs_ogd" in md and "revenue_vs_ogd" in md
    with open(tmp_path / "population.csv") as f:
        rows = list(csv.DictReader(f))
    ogd_vs_ogd = [r for r in rows if r["population"] == "ogd" and r["metric"] == "welfare_vs_ogd"]
    assert float(ogd_vs_ogd[0]["mean"]) == 0.0
    assert (tmp_path / "population.png").stat().st_size > 0
    with open(tmp_path / "population_episodes.csv") as f:
        assert len(list(csv.DictReader(f))) == 6


@pytest.mark.parametrize("argv, message", [
    (["--baselines", "ogd", "--env-kwargs", '{"focal_bidder": 1}'], "--env-kwargs: focal_bidder"),
    (["--baselines", "bogus"], "--baselines: unknown policy 'bogus'"),
    (["--baselines", ""], "nothing to evaluate"),
])
def test_evaluate_multi_user_errors(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        cli_main(["evaluate-multi", "--out", str(tmp_path), *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_ray_stays_optional():
    """The SB3 path and the env library never import Ray; without Ray, train-multi says how to
    install it (one line, exit 2)."""
    code = ("import sys; sys.modules['ray'] = None\n"  # as if Ray were not installed
            "import auction_gym, agents.training, agents.callbacks, agents.population, experiments.commands.compare, "
            "experiments.commands.train_multi, experiments.commands.evaluate_multi\n"
            "from experiments.cli import main\n"
            "try:\n    main(['train-multi', '--timesteps', '10'])\n"
            "except SystemExit as e:\n    print('exit', e.code)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "exit 2" in out.stdout, out.stderr
    assert 'needs Ray RLlib, the "rllib" extra: pip install -e ".[rllib]"' in out.stderr
    assert "Traceback" not in out.stderr

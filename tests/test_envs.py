"""RadixAuction-v0 and the PettingZoo parallel env: API checkers, registration, seeding, actions."""

from __future__ import annotations

import builtins
import copy
import errno
import importlib
import inspect
import os
import pickle
import re
import subprocess
import sys
import warnings
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from pettingzoo.test import parallel_api_test
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

import auction_gym
from agents import FixedMultiplier, OGDPacer, Truthful, focal_policy
from agents.evaluation import evaluate
from agents.sb3 import load_policy
from auction_gym import Obs, RadixAuctionEnv
from auction_gym.market import observation
from auction_gym.market.observation import feature_table
from auction_gym.workload.mooncake import SAMPLE_TRACE

# A fixed 40 requests/s whichever env id plays it: v1 and v2 draw each episode's rate, so theirs is given here too.
FAST = dict(horizon=30, episode_draws={"rate": [40.0]})
SLICE = SAMPLE_TRACE


def test_gym_make_after_import():
    env = gym.make("RadixAuction-v0", **FAST)
    obs, info = env.reset(seed=0)
    assert obs.shape == (Obs.SIZE,) and obs.dtype == np.float32 and info["budget"] > 0
    assert env.observation_space.contains(obs)


def test_observation_tables_are_made_from_the_one_definition():
    """The tables of the observation in the env's docstring and observation.py's are
    `feature_table()`, one row per feature of `FEATURES` in the vector's order (the documentation
    generates its table from it too: `tests/test_docs.py`)."""
    table = feature_table()
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    assert [(int(i), name.strip()) for i, name in rows] == list(enumerate(Obs.NAMES))
    for doc in (RadixAuctionEnv.__doc__, observation.__doc__):  # None under python -OO
        assert doc is None or table in inspect.cleandoc(doc)


def test_gym_make_with_module_prefix_imports_the_package():
    code = ("import gymnasium as gym; e = gym.make('auction_gym:RadixAuction-v0', horizon=5); "
            "e.reset(seed=0); print(type(e.unwrapped).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "RadixAuctionEnv"


def test_the_package_imports_its_envs_on_first_use():
    # A fresh interpreter: importing the package registers the ids without importing PettingZoo or
    # an env module, and each env name the package exports is its module's object.
    code = ("import sys, gymnasium, auction_gym; assert 'RadixAuction-v2' in gymnasium.registry; "
            "print(sorted(m for m in sys.modules if m.startswith(('pettingzoo', 'auction_gym.envs'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    from auction_gym.envs import batch, radix_auction_env, vector

    pz = importlib.import_module("auction_gym.envs.parallel_env")  # the module: auction_gym.envs exports the function
    exported = {"RadixAuctionEnv": radix_auction_env.RadixAuctionEnv, "MarketBatch": batch.MarketBatch,
                "RadixAuctionParallelEnv": pz.RadixAuctionParallelEnv, "parallel_env": pz.parallel_env,
                "RadixAuctionVectorEnv": vector.RadixAuctionVectorEnv, "make_vec": vector.make_vec}
    for name, obj in exported.items():
        assert getattr(auction_gym, name) is obj and name in auction_gym.__all__ and name in dir(auction_gym)
    with pytest.raises(AttributeError, match="no attribute 'RadixAuctionEnvs'"):
        auction_gym.RadixAuctionEnvs


@pytest.mark.parametrize("kwargs", [{}, FAST], ids=["default", "fast"])
def test_env_checkers_pass_without_warnings(kwargs):
    # Gymnasium's make warns (DeprecationWarning) that v0 is out of date now that v1 is registered.
    with pytest.warns(DeprecationWarning, match="RadixAuction-v0 is out of date"):
        env = gym.make("RadixAuction-v0", **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the normalized Box(-1, 1) is what SB3 asks for
        assert env.action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        gym_check_env(env.unwrapped)
        sb3_check_env(env)


def test_multiplier_action_type_is_the_raw_box_and_sb3_says_it_is_not_normalized():
    env = gym.make("RadixAuction-v0", action_type="multiplier", alpha_max=3.0, **FAST)
    assert env.action_space == gym.spaces.Box(0.0, 3.0, (1,), np.float32)
    for check in (gym_check_env, sb3_check_env):
        with pytest.warns(UserWarning, match="symmetric and normalized"):
            check(env.unwrapped)


def test_pettingzoo_parallel_api():
    parallel_api_test(auction_gym.parallel_env(**FAST), num_cycles=60)


@pytest.mark.parametrize("change, message", [
    (lambda acts, agent: acts.pop(agent), "missing actions for"),
    (lambda acts, agent: acts.update(bidder_99=acts[agent]), "agents this env does not have: \\['bidder_99'\\]"),
    (lambda acts, agent: acts.update({agent: np.array([np.nan], dtype=np.float32)}), "must be finite"),
])
def test_pettingzoo_step_refuses_wrong_actions_before_the_market_steps(change, message):
    env, twin = auction_gym.parallel_env(**FAST), auction_gym.parallel_env(**FAST)
    env.reset(seed=3), twin.reset(seed=3)
    plays = {agent: np.array([0.1 * (i + 1)], dtype=np.float32) for i, agent in enumerate(env.agents)}
    wrong = dict(plays)
    change(wrong, env.agents[-1])
    with pytest.raises(ValueError, match=message):
        env.step(wrong)
    out, expected = env.step(plays), twin.step(plays)  # the same step as the twin's, which saw no wrong one
    assert all(a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a) for a, b in zip(out, expected))


def test_pettingzoo_env_names_what_is_wrong_with_an_agent_or_a_call():
    env = auction_gym.parallel_env(**FAST)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step({})
    for ask in (env.observation_space, env.action_space, partial(env.action_for, 1.0, np.zeros(Obs.SIZE))):
        with pytest.raises(ValueError, match="no agent 'bidder_9' in this env"):
            ask("bidder_9")


def test_step_types_and_info_keys():
    env = RadixAuctionEnv(**FAST)
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step(np.array([1.0], dtype=np.float32))
    assert type(reward) is float and type(terminated) is bool and type(truncated) is bool
    for key in ("payment", "spent", "budget", "welfare", "hit_rate", "latency", "ttft", "revenue"):
        assert key in info and np.isfinite(info[key])


def test_episode_terminates_at_horizon():
    env = RadixAuctionEnv(**FAST)
    env.reset(seed=2)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        done = terminated or truncated
    assert terminated and steps == 30
    with pytest.raises(RuntimeError):
        env.step([1.0])


def test_same_seed_same_actions_identical():
    rollouts = []
    for seed in (42, 42, 43):
        env = RadixAuctionEnv(**FAST)
        trace = [env.reset(seed=seed)[0].tolist()]
        for a in np.linspace(0, 2, 30):
            obs, r, te, tr, info = env.step([a])
            trace.append((obs.tolist(), r, te, tr, sorted(info.items())))
        rollouts.append(trace)
    assert rollouts[0] == rollouts[1]
    assert rollouts[0] != rollouts[2]


@pytest.mark.parametrize("action_type", ["normalized", "multiplier"])
def test_actions_are_clipped_and_non_finite_raise(action_type):
    env = RadixAuctionEnv(action_type=action_type, alpha_max=3.0, **FAST)
    env.reset(seed=0)
    assert env.step([7.0])[4]["multiplier"] == 3.0
    assert env.step([-3.0])[4]["multiplier"] == 0.0
    for bad in ([np.nan], [np.inf], [1.0, 2.0]):
        with pytest.raises(ValueError):
            env.step(bad)


def test_normalized_actions_play_the_documented_multipliers():
    env = RadixAuctionEnv(alpha_max=3.0, **FAST)
    env.reset(seed=0)
    played = [env.step([a])[4]["multiplier"] for a in (-1.0, -0.5, 0.0, 0.5, 1.0)]
    assert played == [0.0, 0.5, 1.0, 2.0, 3.0]  # 1 + a below truthful, 1 + 2a above
    assert env.observation_space.contains(env.step([1.0])[0])
    assert env.step([1.0])[0][Obs.PREV_MULTIPLIER] == 1.0  # still multiplier / alpha_max


@pytest.mark.parametrize("make", [RadixAuctionEnv, auction_gym.parallel_env], ids=["env", "parallel_env"])
def test_bad_action_type_or_alpha_max_raise(make):
    with pytest.raises(ValueError, match="action_type must be one of"):
        make(action_type="raw")
    for alpha_max in (1.0, 0.5):
        with pytest.raises(ValueError, match="alpha_max must be > 1 with action_type='normalized'"):
            make(alpha_max=alpha_max)
        make(alpha_max=alpha_max, action_type="multiplier")  # the raw multiplier needs only alpha_max > 0


def test_bad_arguments_raise():
    for bad in (dict(focal_bidder=4), dict(other_bidders="greedy"), dict(other_bidders=["ogd"]),
                dict(reward_scale=0.0), dict(mechanism="vickrey"), dict(render_mode="human")):
        with pytest.raises(ValueError):
            RadixAuctionEnv(**bad)


@pytest.mark.parametrize("policy", [OGDPacer(), Truthful(), FixedMultiplier(0.5)])
def test_builtin_policies_run_under_evaluate_policy(policy):
    venv = make_vec_env(RadixAuctionEnv, n_envs=2, seed=0, env_kwargs=FAST)
    mean, std = evaluate_policy(focal_policy(policy, venv.envs[0]), venv, n_eval_episodes=2)
    assert np.isfinite(mean) and np.isfinite(std)


def episode_infos(policy, action_type: str, seed: int = 5) -> list[dict]:
    """The infos of one FAST episode with `policy` (mapped by focal_policy) as the focal bidder."""
    env = RadixAuctionEnv(action_type=action_type, **FAST)
    player = focal_policy(policy, env)
    obs, _ = env.reset(seed=seed)
    infos, done = [], False
    while not done:
        action, _ = player.predict(obs)
        assert env.action_space.contains(action.astype(np.float32))
        obs, _, terminated, truncated, info = env.step(action)
        infos.append(info)
        done = terminated or truncated
    return infos


def test_builtin_policies_play_the_same_multipliers_in_both_action_types():
    truthful = episode_infos(Truthful(), "normalized")
    assert {i["multiplier"] for i in truthful} == {1.0}
    for action_type in ("normalized", "multiplier"):
        fixed = episode_infos(FixedMultiplier(0.05), action_type)
        assert {i["multiplier"] for i in fixed} == {float(np.float32(0.05))}  # the policy's float32 0.05
    ogd = episode_infos(OGDPacer(eta=0.5), "normalized")
    assert ogd == episode_infos(OGDPacer(eta=0.5), "multiplier")
    assert len({i["multiplier"] for i in ogd}) > 3 and min(i["multiplier"] for i in ogd) < 0.5  # it paced


def test_evaluate_maps_builtins_and_refuses_a_model_of_another_action_space(tmp_path):
    kwargs = {**FAST, "action_type": "multiplier"}
    assert evaluate(Truthful(), FAST, 1, progress=False) == evaluate(Truthful(), kwargs, 1, progress=False)
    from stable_baselines3 import PPO

    PPO("MlpPolicy", RadixAuctionEnv(**kwargs), n_steps=32, batch_size=32, seed=0).save(tmp_path / "old.zip")
    old = load_policy(tmp_path / "old.zip")  # Box(0, 2), as a model saved with action_type="multiplier"
    with pytest.raises(ValueError, match=r"needs env_kwargs \{\"action_type\": \"multiplier\"\}"):
        evaluate(old, FAST, 1, progress=False)
    assert len(evaluate(old, kwargs, 1, progress=False)) == 1


def test_other_bidders_per_bidder_and_focal_choice():
    env = RadixAuctionEnv(other_bidders=["truthful", "fixed:0.3", OGDPacer()], focal_bidder=2, **FAST)
    env.reset(seed=0)
    for _ in range(5):
        env.step([0.0])  # truthful
    alpha = env.market.alpha
    assert alpha[0] == 1.0 and alpha[1] == pytest.approx(0.3) and alpha[2] == 1.0


@pytest.mark.parametrize("action_type", ["normalized", "multiplier"])
def test_other_bidders_act_in_multipliers_whatever_the_focal_action_type(action_type):
    focal = {"normalized": 1.0, "multiplier": 2.0}[action_type]  # alpha_max in either
    env = RadixAuctionEnv(other_bidders=["fixed:0.3", "fixed:1.5", "truthful"], action_type=action_type, **FAST)
    env.reset(seed=0)
    for _ in range(10):
        env.step([focal])
    assert env.market.alpha.tolist() == [2.0, float(np.float32(0.3)), 1.5, 1.0]
    ogd = RadixAuctionEnv(other_bidders="ogd", action_type=action_type, **FAST)
    ogd.reset(seed=0)
    reference = RadixAuctionEnv(other_bidders="ogd", action_type="multiplier", **FAST)
    reference.reset(seed=0)
    for _ in range(30):
        ogd.step([focal])
        reference.step([2.0])
    assert ogd.market.alpha.tolist() == reference.market.alpha.tolist() and min(ogd.market.alpha) < 1.0
    with pytest.raises(ValueError, match="other_bidders act in multipliers"):
        RadixAuctionEnv(other_bidders=focal_policy(Truthful(), RadixAuctionEnv(**FAST)), **FAST)


class _Constant:
    """A policy object that plays a fixed raw action for every bidder it is asked about."""

    def __init__(self, value: float) -> None:
        self.value = value

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        return np.full((len(observation), 1), self.value, dtype=np.float32), state


class _Delegate:
    """A policy object, not a MultiplierPolicy, that answers through a built-in's predict."""

    def __init__(self, policy: OGDPacer) -> None:
        self.policy = policy

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        return self.policy.predict(observation, state, episode_start, deterministic)


def test_built_in_other_bidders_play_as_their_predict():
    """The env asks a built-in through `multipliers`, any other policy through `predict`: the same play."""
    built_in = RadixAuctionEnv(other_bidders="ogd", **FAST)
    via_predict = RadixAuctionEnv(other_bidders=_Delegate(OGDPacer()), **FAST)
    built_in.reset(seed=0)
    via_predict.reset(seed=0)
    for _ in range(30):
        built_in.step([1.0])
        via_predict.step([1.0])
        assert built_in.market.alpha.tolist() == via_predict.market.alpha.tolist()
    assert min(built_in.market.alpha) < 1.0  # the pacers moved


class _HalfOGD(OGDPacer):
    """A subclass of a built-in that overrides `predict` (here: half the OGD pacer's multiplier)."""

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        action, state = super().predict(observation, state, episode_start, deterministic)
        return action / 2, state


def test_a_built_in_whose_predict_is_overridden_is_asked_through_it():
    env = RadixAuctionEnv(other_bidders=_HalfOGD(), **FAST)
    ogd = RadixAuctionEnv(other_bidders="ogd", **FAST)
    env.reset(seed=0)
    ogd.reset(seed=0)
    env.step([1.0])
    ogd.step([1.0])  # the first round: every other bidder plays its multiplier from the same observation
    assert env.market.alpha[1:].tolist() == (ogd.market.alpha[1:] / 2).tolist()


def test_other_bidders_actions_are_clipped_and_non_finite_raise():
    env = RadixAuctionEnv(other_bidders=_Constant(9.0), **FAST)
    env.reset(seed=0)
    env.step([0.0])
    assert env.market.alpha.tolist() == [1.0, 2.0, 2.0, 2.0]
    env = RadixAuctionEnv(other_bidders=["truthful", _Constant(np.nan), "truthful"], **FAST)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="policy of bidder 2"):
        env.step([0.0])


def test_mooncake_workload_runs_on_the_slice():
    env = RadixAuctionEnv(workload="mooncake", trace_path=str(SLICE), horizon=20,
                          workload_kwargs={"time_scale": 0.25}, engine_kwargs={"kv_capacity_tokens": 200_000})
    env.reset(seed=0)
    total = 0
    for _ in range(20):
        _, _, te, tr, info = env.step([1.0])
        total += info["admitted"]
        if te or tr:
            break
    assert total > 0


def unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A trace file this process cannot open for reading. Root reads it whatever its mode, so
    there opening it is made to fail as it would for anyone else."""
    path = tmp_path / "locked.jsonl"
    path.write_text(SLICE.read_text().splitlines()[0] + "\n")
    path.chmod(0)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        real_open = builtins.open

        def guarded(file, *args, **kwargs):
            if os.fspath(file) == os.fspath(path):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", guarded)
    return path


ENVS = {"gym.make": lambda **kw: gym.make("RadixAuction-v0", **kw), "parallel_env": auction_gym.parallel_env}


@pytest.mark.parametrize("make", ENVS.values(), ids=ENVS.keys())
@pytest.mark.parametrize("workload", ["mooncake", "agentic"])
@pytest.mark.parametrize("case", ["missing", "directory", "unreadable"])
def test_bad_trace_path_raises_at_construction(make, workload, case, tmp_path, monkeypatch):
    path = {"missing": lambda: tmp_path / "no_such_trace.jsonl", "directory": lambda: tmp_path,
            "unreadable": lambda: unreadable_file(tmp_path, monkeypatch)}[case]()
    with pytest.raises(ValueError, match=f"trace_path.*{re.escape(repr(str(path)))}"):
        make(workload=workload, trace_path=str(path), horizon=5)


@pytest.mark.parametrize("make", ENVS.values(), ids=ENVS.keys())
def test_long_horizon_over_an_unstable_queue_warns_once_at_construction(make):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(horizon=5000)
    ours = [str(w.message) for w in caught if "horizon=5000" in str(w.message)]
    assert len(ours) == 1 and "waiting queue grows" in ours[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", ".*RadixAuction-v0 is out of date", DeprecationWarning)
        make()  # the default horizon
        make(horizon=5000, workload_kwargs={"rate": 12.0})  # a load the engine serves


@pytest.mark.parametrize("which", auction_gym.core.CORES)
@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_copying_an_env_says_how_to_replay_instead(which, how):
    """A copy of an env (single or PettingZoo) or of its market is refused with what to do instead
    (reset a new env with the same seed), before as after a step, and the env steps on."""
    if which == "compiled" and auction_gym.core.compiled_module() is None:
        pytest.skip("the compiled core (auction_gym._core) is not built")
    copies = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": pickle.dumps}
    with auction_gym.core.use(which):  # the engine too, built at reset
        env = gym.make("RadixAuction-v0", **FAST)
        parallel = auction_gym.parallel_env(**FAST)
        for stepped in (False, True):
            if stepped:
                env.reset(seed=0)
                env.step(env.action_space.sample())
                parallel.reset(seed=0)
            for obj in (env.unwrapped.market, parallel.market) if how == "copy" else (env, parallel):
                with pytest.raises(TypeError, match="cannot be copied or pickled.*reset it with the same seed"):
                    copies[how](obj)
        assert env.step(env.action_space.sample())[0].shape == env.observation_space.shape

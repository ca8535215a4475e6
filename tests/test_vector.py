"""Many markets per call (`auction_gym.envs.vector`): the batch steps the same episodes as
Gymnasium's SyncVectorEnv (both autoreset modes) and SB3's DummyVecEnv over the same envs and
seeds, env i as a single env seeded `seed + i`, and both faces answer their APIs' calls."""

from __future__ import annotations

import json
import pickle
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space
from stable_baselines3 import PPO
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

import auction_gym
from agents.evaluation import evaluate
from agents.sb3 import _monitored_env, load_policy
from agents.training import TrainConfig, train
from auction_gym import MarketBatch, Obs, RadixAuctionEnv, RadixAuctionVectorEnv
from auction_gym.envs.sb3_vec import RadixAuctionVecEnv
from auction_gym.envs.vector import batch_infos

ENV_ID = "RadixAuction-v2"
# Short episodes that the workload's running dry truncates on some seeds: resets of both kinds.
SHORT = {"horizon": 8, "workload_kwargs": {"num_requests": 220}}
N = 3
STEPS = 30


def same(a, b) -> bool:
    """Equal to the bit: arrays (their dtypes too), dicts and sequences of them, other values by ==."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) and a.dtype == object:
        return isinstance(b, np.ndarray) and a.shape == b.shape and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def actions(space: gym.Space, steps: int = STEPS, seed: int = 7) -> list[np.ndarray]:
    """Uniform random actions of a batched Box space, the same for every vector env compared."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(space.low, space.high).astype(space.dtype) for _ in range(steps)]


def env_fns(n: int = N) -> list:
    return [partial(gym.make, ENV_ID, **SHORT) for _ in range(n)]


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_gymnasium_face_steps_the_episodes_of_sync_vector_env(mode):
    batched, sync = RadixAuctionVectorEnv(env_fns(), mode), SyncVectorEnv(env_fns(), autoreset_mode=mode)
    assert batched.metadata["autoreset_mode"] is mode and batched.observation_space == sync.observation_space
    assert same(batched.reset(seed=11), sync.reset(seed=11))
    ended = {"terminated": 0, "truncated": 0}
    for action in actions(batched.action_space):
        out, expected = batched.step(action), sync.step(action)
        assert all(same(a, b) for a, b in zip(out, expected))
        ended["terminated"] += int(out[2].sum())
        ended["truncated"] += int(out[3].sum())
    assert ended["terminated"] >= N and ended["truncated"] >= N, ended  # several resets of both kinds seen
    # A reset of some envs only (Gymnasium's reset_mask) keeps the others' episodes going.
    mask = np.array([True, False, True])
    assert same(batched.reset(seed=3, options={"reset_mask": mask.copy()}),
                sync.reset(seed=3, options={"reset_mask": mask.copy()}))
    for action in actions(batched.action_space, 5, seed=8):
        assert all(same(a, b) for a, b in zip(batched.step(action), sync.step(action)))


def test_same_step_returns_the_reset_observation_and_the_final_one_in_infos():
    env = RadixAuctionVectorEnv(env_fns(1), AutoresetMode.SAME_STEP)
    single = gym.make(ENV_ID, **SHORT)
    obs, _ = env.reset(seed=2)
    single.reset(seed=2)
    for action in actions(env.action_space):
        obs, reward, terminated, truncated, info = env.step(action)
        last, single_reward, single_terminated, single_truncated, last_info = single.step(action[0])
        assert reward[0] == single_reward
        if single_terminated or single_truncated:
            assert terminated[0] == single_terminated and truncated[0] == single_truncated
            assert same(info["final_obs"][0], last) and info["final_info"]["payment"][0] == last_info["payment"]
            reset_obs, _ = single.reset()  # unseeded: the env's own generator goes on, as in the batch
            assert same(obs[0], reset_obs)
            return
        assert "final_obs" not in info and same(obs[0], last)
    pytest.fail("no episode ended")


def test_env_i_plays_the_episode_of_a_single_env_seeded_seed_plus_i():
    env = auction_gym.make_vec(ENV_ID, num_envs=N, seed=20, **SHORT)
    obs, _ = env.reset()  # make_vec's seed, used by the first reset
    plays = actions(env.action_space)
    batch = [env.step(a) for a in plays]
    for i in range(N):
        single = gym.make(ENV_ID, **SHORT)
        first, _ = single.reset(seed=20 + i)
        assert same(obs[i], first)
        for t, action in enumerate(plays):
            ob, reward, terminated, truncated, _ = single.step(action[i])
            assert same(batch[t][0][i], ob) and batch[t][1][i] == reward
            if terminated or truncated:
                break
    unseeded = auction_gym.make_vec(ENV_ID, num_envs=N, **SHORT)
    assert not same(unseeded.reset()[0], obs)


def test_sb3_face_is_dummy_vec_env_to_the_bit():
    fns = [partial(_monitored_env, SHORT, ENV_ID) for _ in range(N)]
    batched, dummy = RadixAuctionVecEnv(fns), DummyVecEnv(fns)
    assert batched.seed(5) == dummy.seed(5) == [5, 6, 7]
    assert same(batched.reset(), dummy.reset()) and same(batched.reset_infos, dummy.reset_infos)
    episodes = truncations = 0
    for action in actions(batch_space(batched.action_space, N)):
        obs, rewards, dones, infos = batched.step(action)
        expected = dummy.step(action)
        assert same(obs, expected[0]) and same(rewards, expected[1]) and same(dones, expected[2])
        for info, other in zip(infos, expected[3]):
            if "episode" in info:  # Monitor's episode entry; its "t" is wall-clock time
                episodes += 1
                assert info["episode"].pop("t") >= 0 and other["episode"].pop("t") >= 0
            assert same(info, other)
            truncations += info["TimeLimit.truncated"]
        assert same(batched.reset_infos, dummy.reset_infos)
    assert episodes > truncations >= N  # episodes ended by the horizon and by the workload's end


def test_the_batch_is_batched_like_gymnasiums_and_answers_its_calls():
    env = gym.make_vec(ENV_ID, num_envs=4, horizon=5, render_mode="rgb_array")
    assert isinstance(env, RadixAuctionVectorEnv) and env.num_envs == 4
    assert env.single_observation_space.shape == (Obs.SIZE,)
    assert env.observation_space == batch_space(env.single_observation_space, 4)
    assert env.action_space == batch_space(env.single_action_space, 4) and env.action_space.shape == (4, 1)
    assert env.get_attr("config")[0].horizon == 5 and env.get_attr("reward") == ("cost",) * 4  # v2's defaults
    env.reset(seed=0)
    frames = env.render()
    assert env.render_mode == "rgb_array" and len(frames) == 4 and frames[0].dtype == np.uint8
    assert env.call("action_for", 1.0, np.zeros(Obs.SIZE)) == env.call("action_for", 1.0, np.zeros(Obs.SIZE))
    env.set_attr("reward_scale", [1.0, 2.0, 3.0, 4.0])
    assert env.get_attr("reward_scale") == (1.0, 2.0, 3.0, 4.0)
    with pytest.raises(ValueError, match="expected 4 values"):
        env.set_attr("reward_scale", [1.0])
    env.close()
    assert env.closed


def test_the_sb3_face_answers_vec_env_calls():
    venv = auction_gym.make_vec(ENV_ID, num_envs=2, seed=0, vector_api="sb3", horizon=5)
    assert isinstance(venv, RadixAuctionVecEnv) and venv.env_is_wrapped(Monitor) == [True, True]
    assert venv.observation_space.shape == (Obs.SIZE,) and venv.render_mode is None
    assert venv.get_attr("reward_scale", indices=[1]) == [0.1]
    venv.env_method("reset", seed=3, indices=0)
    venv.set_attr("note", "x", indices=1)
    assert venv.get_attr("note", indices=1) == ["x"]
    assert venv.reset().shape == (2, Obs.SIZE) and venv.get_images() == [None, None]
    venv.close()


def test_training_on_the_batch_gives_the_model_that_dummy_vec_env_gives(tmp_path):
    results = {vec_env: train(TrainConfig(algo="ppo", logdir=tmp_path / vec_env, timesteps=256, n_envs=2, seed=0,
                                          env_kwargs=SHORT, vec_env=vec_env, eval_episodes=2, progress=False,
                                          hyperparams={"n_steps": 64, "batch_size": 32, "n_epochs": 2}))
               for vec_env in ("dummy", "batched")}
    dummy, batched = (PPO.load(results[v].model_path, device="cpu").policy.state_dict() for v in results)
    assert dummy.keys() == batched.keys() and all(torch.equal(dummy[k], batched[k]) for k in dummy)
    # VecNormalize (v2's PPO normalizes) saw the same observations and returns.
    stats = [pickle.loads((results[v].run_dir / "vecnormalize.pkl").read_bytes()) for v in results]
    assert same(stats[0].obs_rms.mean, stats[1].obs_rms.mean) and same(stats[0].ret_rms.var, stats[1].ret_rms.var)
    assert results["dummy"].final_evaluation == results["batched"].final_evaluation
    assert [json.loads((results[v].run_dir / "config.json").read_text())["vec_env"] for v in results] == [*results]
    # A run saved with "dummy" (as runs were before "batched") loads and plays the same episodes.
    assert same(evaluate(load_policy(results["dummy"].model_path), SHORT, episodes=2, progress=False),
                evaluate(load_policy(results["batched"].model_path), SHORT, episodes=2, progress=False))


def random_info(rng: np.random.Generator, depth: int = 0, keys: list[str] | None = None) -> dict | None:
    """An env's info of `keys` (None: keys drawn from a small pool, so envs share some and miss
    others), each value of a type drawn per env: Python and numpy scalars, arrays, objects, nested
    dicts."""
    if keys is None and rng.random() < 0.1:
        return None
    kinds = [lambda: int(rng.integers(-5, 5)), lambda: float(rng.normal()), lambda: bool(rng.integers(2)),
             lambda: np.float32(rng.normal()), lambda: np.int32(rng.integers(9)), lambda: np.bool_(rng.integers(2)),
             lambda: rng.normal(size=2), lambda: "text", lambda: None, lambda: [1, 2]]
    if depth < 2:
        kinds.append(lambda: random_info(rng, depth + 1) or {})
    info = {}
    for key in rng.permutation(["a", "b", "c", "final_obs", "d"])[: rng.integers(0, 6)] if keys is None else keys:
        # A key keeps one type across envs most of the time (as the env's infos do), mixes now and then.
        kind = kinds[int(rng.integers(len(kinds)))] if rng.random() < 0.2 else kinds[ord(key[0]) % len(kinds)]
        info[str(key)] = kind()
    return info


def identical(a, b) -> bool:
    """`same`, dicts' keys in the same order too, and NaN equal to NaN (a None written into a
    float column)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) and a.dtype != object:
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and all(identical(x, y) for x, y in zip(a, b))
    return same(a, b)


def test_infos_are_batched_as_gymnasium_batches_them_env_by_env():
    rng = np.random.default_rng(0)
    vector = RadixAuctionVectorEnv(env_fns(1))

    def env_by_env(infos):
        out = {}
        for i, info in enumerate(infos):
            if info is not None:
                out = vector._add_info(out, info, i)
        return out

    def outcome(batch, infos):
        try:
            return batch(infos)
        except (TypeError, ValueError, AttributeError) as error:  # an input the env-by-env rules refuse too
            return type(error)

    taken = 0
    for _ in range(400):
        # A third of the batches as a market's steps give them: every env the same keys in the same order.
        shared = rng.random() < 0.3
        keys = list(rng.permutation(["a", "b", "c", "final_obs", "d"])[: rng.integers(1, 6)]) if shared else None
        infos = [random_info(rng, keys=keys) for _ in range(int(rng.integers(1, 6)))]
        vector.num_envs = len(infos)  # `_add_info` reads only num_envs
        expected, fast = outcome(env_by_env, infos), batch_infos(infos, len(infos))
        if isinstance(expected, type):
            assert fast is None, infos  # left to the env-by-env rules, which raise their own error
        if fast is None:
            continue
        taken += 1
        assert identical(fast, expected), infos
    assert taken > 250  # most batches take the key-by-key path
    assert batch_infos([{"_a": 1}], 1) is None and batch_infos([{"a": {}}, {"a": 1}], 2) is None


BAD_STEPS = {
    "a row short": lambda good: good[:-1],
    "a row too many": lambda good: np.concatenate([good, good[:1]]),
    "one number": lambda good: 0.5,
    "None": lambda good: None,
    "the last row not finite": lambda good: np.concatenate([good[:-1], [[np.nan]]]).astype(good.dtype),
    "an infinite row first": lambda good: np.concatenate([[[np.inf]], good[1:]]).astype(good.dtype),
    "a row of words": lambda good: [*good[:-1].tolist(), ["x"]],
}


@pytest.mark.parametrize("api", ["gymnasium", "sb3"])
@pytest.mark.parametrize("bad", BAD_STEPS)
def test_a_wrong_step_is_refused_before_any_env_steps(api, bad):
    # The envs before a bad row would otherwise have stepped: the batch out of step with itself.
    env, twin = (auction_gym.make_vec(ENV_ID, num_envs=N, seed=5, vector_api=api, **SHORT) for _ in range(2))
    env.reset(), twin.reset()
    plays = actions(env.action_space if api == "gymnasium" else batch_space(env.action_space, N), 4)
    for action in plays[:2]:
        env.step(action), twin.step(action)
    with pytest.raises(ValueError, match="no env was stepped"):
        env.step(BAD_STEPS[bad](plays[2]))
    for action in plays[2:]:  # the same episodes as the twin's, which saw no wrong step
        out, expected = env.step(action), twin.step(action)
        if api == "sb3":  # its Monitor times each episode ("episode": wall time "t"), which no two runs share
            out, expected = ([*step[:-1], [{k: v for k, v in info.items() if k != "episode"} for info in step[-1]]]
                             for step in (out, expected))
        assert all(same(a, b) for a, b in zip(out, expected))


def test_the_action_of_an_env_that_resets_instead_of_stepping_is_not_read():
    env = RadixAuctionVectorEnv(env_fns(2), AutoresetMode.NEXT_STEP)
    env.reset(seed=1)
    for action in actions(env.action_space):
        _, _, terminated, truncated, _ = env.step(action)
        if (ended := terminated | truncated).any() and not ended.all():
            break
    else:
        pytest.fail("no step ended one env's episode alone")
    # The ended env resets in this step (NEXT_STEP), its action ignored; a bad one there is refused.
    unread = np.where(ended[:, None], np.nan, 0.0).astype(np.float32)
    obs, reward, *_ = env.step(unread)
    assert reward[ended].tolist() == [0.0] and np.isfinite(obs).all()
    with pytest.raises(ValueError, match="no env was stepped"):
        env.step(np.where(ended[:, None], 0.0, np.nan).astype(np.float32))


@pytest.mark.parametrize("seeds, error, message", [
    ([7, "a", 8], TypeError, "a seed must be an int or None, got 'a'"),
    ([7, 1.0, 2], TypeError, "a seed must be an int or None, got 1.0"),
    ([7, True, 2], TypeError, "a seed must be an int or None, got True"),  # as a lone True is refused
    ([7, -2, 3], ValueError, "a seed must be >= 0, got -2"),
    ("abc", TypeError, "seed must be an int, None, or one int or None per env"),
    ([7, 8], ValueError, "expected 3 seeds"),
])
def test_wrong_seeds_are_refused_before_any_env_resets(seeds, error, message):
    env, twin = RadixAuctionVectorEnv(env_fns()), RadixAuctionVectorEnv(env_fns())
    env.reset(seed=4), twin.reset(seed=4)
    with pytest.raises(error, match=message):
        env.reset(seed=seeds)
    plays = actions(env.action_space, 3)
    for action in plays:  # env 0 kept its episode: the twin's, which saw no wrong reset
        assert all(same(a, b) for a, b in zip(env.step(action), twin.step(action)))
    # numpy's ints are seeds as Python's are (Gymnasium's seeding takes only Python's).
    assert same(env.reset(seed=np.array([5, 6, 7])), twin.reset(seed=[5, 6, 7]))
    with pytest.raises(ValueError, match="reset_mask must be 3 booleans"):
        env.reset(options={"reset_mask": np.array([True, False])})


@pytest.mark.parametrize("api", ["gymnasium", "sb3"])
def test_make_vec_takes_numpys_int_as_a_seed_and_refuses_other_seeds(api):
    made = [auction_gym.make_vec(ENV_ID, num_envs=2, seed=seed, vector_api=api, **SHORT)
            for seed in (np.int64(9), 9)]
    assert same(*(env.reset() for env in made))
    for seed, error in ((2.0, TypeError), (True, TypeError), ([1, 2], TypeError), (-1, ValueError)):
        with pytest.raises(error, match="seed"):
            auction_gym.make_vec(ENV_ID, num_envs=2, seed=seed, vector_api=api)


@pytest.mark.parametrize("call, message", [
    (lambda: MarketBatch(env_fns(1), AutoresetMode.DISABLED), "autoreset_mode must be one of"),
    (lambda: auction_gym.make_vec(ENV_ID, num_envs=2.5), "num_envs must be a positive int"),
    (lambda: auction_gym.make_vec(ENV_ID, num_envs=0, vector_api="sb3"), "num_envs must be a positive int"),
    (lambda: gym.make_vec(ENV_ID, num_envs=1.5, vectorization_mode="vector_entry_point"),
     "num_envs must be a positive int"),
    (lambda: MarketBatch([]), "at least one env"),
    (lambda: MarketBatch([lambda env=RadixAuctionEnv(horizon=5): env] * 2), "the same env more than once"),
    (lambda: MarketBatch([partial(RadixAuctionEnv, horizon=5), partial(RadixAuctionEnv, action_type="multiplier")]),
     "share their observation and action spaces"),
    (lambda: auction_gym.make_vec(ENV_ID, vector_api="rllib"), "vector_api must be one of"),
    (lambda: auction_gym.make_vec(ENV_ID, vector_api="sb3", autoreset_mode="NextStep"), "leave autoreset_mode out"),
    (lambda: RadixAuctionVectorEnv(env_fns(2)).reset(seed=[1]), "expected 2 seeds"),
])
def test_wrong_construction_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()

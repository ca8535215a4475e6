"""Stable-Baselines3 and RL Zoo idioms on RadixAuction-v0, and the rgb_array frames they render."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import auction_gym
from auction_gym import Obs, RadixAuctionEnv
from auction_gym.envs.rendering import (
    BAR_GAP,
    BAR_WIDTH,
    BUDGET,
    FOCAL_BUDGET,
    MULTIPLIER,
    QUEUE,
    RENDER_HEIGHT,
    TRACK,
)

FAST = dict(horizon=30, workload_kwargs={"rate": 40.0})


def frame_width(bars: int) -> int:
    """The documented width of a frame with `bars` bars: 4 + 16 x bars pixels."""
    return 4 + 16 * bars


def bar_pixels(frame: np.ndarray, k: int) -> np.ndarray:
    """The middle column of bar k (0-based, left to right), top to bottom, shape (64, 3)."""
    return frame[:, BAR_GAP + k * (BAR_WIDTH + BAR_GAP) + BAR_WIDTH // 2]


def filled(column: np.ndarray, colour: tuple[int, int, int]) -> int:
    """How many pixels of a bar's column have `colour`, checking they sit at its bottom over the track."""
    is_colour = np.all(column == colour, axis=1)
    n = int(is_colour.sum())
    assert is_colour[RENDER_HEIGHT - n:].all() and np.all(column[:RENDER_HEIGHT - n] == TRACK)
    return n


@pytest.mark.parametrize("vec_env_cls, env_id", [
    (DummyVecEnv, "RadixAuction-v0"),
    # Workers started by forkserver (SB3's default) know auction_gym's id only through its module
    # prefix, unless the main script imports auction_gym (see RadixAuctionEnv's docstring).
    (SubprocVecEnv, "auction_gym:RadixAuction-v0"),
])
def test_make_vec_env_with_an_id_resets_steps_and_renders(vec_env_cls, env_id):
    venv = make_vec_env(env_id, n_envs=2, seed=0, env_kwargs=FAST, vec_env_cls=vec_env_cls)
    try:
        obs = venv.reset()
        assert obs.shape == (2, Obs.SIZE)
        obs, rewards, dones, infos = venv.step(np.ones((2, 1), dtype=np.float32))
        assert obs.shape == (2, Obs.SIZE) and rewards.shape == (2,) and "payment" in infos[0]
        assert venv.render_mode == "rgb_array"
        for frame in venv.get_images():
            assert frame.dtype == np.uint8 and frame.shape == (RENDER_HEIGHT, frame_width(4 + 2), 3)
    finally:
        venv.close()


def queue_bar(waiting: int) -> int:
    """The documented queue bar height (pixels): log scale, full at 4,096 waiting requests."""
    return round(64 * np.log1p(waiting / 64) / np.log1p(4096 / 64))


def test_rgb_array_frame_draws_budgets_queue_and_multiplier():
    env = RadixAuctionEnv(render_mode="rgb_array", num_bidders=3, focal_bidder=1, **FAST)
    assert env.render() is None  # nothing to draw before the first reset
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.shape == (64, frame_width(3 + 2), 3)
    # Full budgets (the focal bidder's yellow), the queue left by the warm-up, multiplier 1 of 2.
    assert [filled(bar_pixels(frame, k), c) for k, c in enumerate((BUDGET, FOCAL_BUDGET, BUDGET))] == [64] * 3
    assert filled(bar_pixels(frame, 3), QUEUE) == queue_bar(len(env.market.engine.waiting))
    assert filled(bar_pixels(frame, 4), MULTIPLIER) == 32
    for _ in range(20):
        env.step([1.0])  # alpha_max
    frame = env.render()
    waiting = len(env.market.engine.waiting)
    assert queue_bar(waiting) > 0 and filled(bar_pixels(frame, 3), QUEUE) == queue_bar(waiting)
    assert filled(bar_pixels(frame, 4), MULTIPLIER) == 64
    left = env.market.remaining / env.market.budget
    assert filled(bar_pixels(frame, 1), FOCAL_BUDGET) == round(64 * left[1]) < 64


def test_ansi_render_after_reset_and_step():
    env = RadixAuctionEnv(render_mode="ansi", **FAST)
    assert env.render() is None
    env.reset(seed=0)
    assert env.render().startswith("round 0/30") and "admitted=0" in env.render()  # Gymnasium wants a string
    env.step([1.0])
    assert env.render().startswith("round 1/30")


def test_parallel_env_renders_rgb_array():
    env = auction_gym.parallel_env(render_mode="rgb_array", num_bidders=3, **FAST)
    assert env.render() is None
    env.reset(seed=0)
    env.step({a: np.array([-0.5], dtype=np.float32) for a in env.agents})  # alpha = 0.5
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.shape == (64, frame_width(2 * 3 + 1), 3)
    assert [filled(bar_pixels(frame, 4 + i), MULTIPLIER) for i in range(3)] == [16] * 3  # 0.5 of 2


HYPERPARAMS = """RadixAuction-v0:
  n_timesteps: 64
  policy: 'MlpPolicy'
  n_envs: 1
  n_steps: 32
  batch_size: 32
  n_epochs: 1
"""


def test_rl_zoo_train_runs(tmp_path):
    # rl_zoo3 is not a dev dependency: rl_zoo3 2.9.2 pins pillow < 12 and python-dateutil < 3
    # (through moviepy and pytablewriter), older than what the project's venv holds.
    pytest.importorskip("rl_zoo3")
    (tmp_path / "ppo.yml").write_text(HYPERPARAMS)
    cmd = [sys.executable, "-m", "rl_zoo3.train", "--algo", "ppo", "--env", "RadixAuction-v0",
           "--gym-packages", "auction_gym", "-n", "64", "--conf-file", "ppo.yml", "-f", "logs",
           "--env-kwargs", "horizon:30", "--device", "cpu", "--seed", "0", "--eval-freq", "-1"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "logs" / "ppo" / "RadixAuction-v0_1" / "RadixAuction-v0.zip").is_file()


def test_a_fresh_ppo_bids_about_truthfully_and_sac_acts_in_the_box_unscaled():
    from stable_baselines3 import PPO, SAC

    env = RadixAuctionEnv(**FAST)
    obs, _ = env.reset(seed=0)
    ppo = PPO("MlpPolicy", env, seed=0, device="cpu")
    action, _ = ppo.predict(obs, deterministic=True)  # the Gaussian's mean, near 0 at initialisation
    assert 0.95 < env.step(action)[4]["multiplier"] < 1.05
    sac = SAC("MlpPolicy", env, seed=0, device="cpu")
    # SAC squashes with tanh into [-1, 1] and rescales to the box: with Box(-1, 1) that is the identity.
    assert sac.policy.scale_action(np.array([0.3, -1.0, 1.0])).tolist() == pytest.approx([0.3, -1.0, 1.0])

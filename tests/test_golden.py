"""Pinned behaviour: a digest of one fixed-seed episode per mechanism, of the PettingZoo env, of a
market over a cluster of replicas, and of an engine replay per scheduler.

A change that alters any trajectory (an observation, a reward, a payment, an admission time) fails
here and must say so: if the change is meant, put the digest the failure prints in GOLDEN and name
the change in the commit message. Floats are hashed at 9 significant digits, so that the last bits
of a reduction (which may differ between CPUs) do not count as a change; anything a bidder or a
researcher could see does.
"""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest

import auction_gym  # noqa: F401  (registers RadixAuction-v0)
from auction_gym import EngineConfig, SimEngine
from auction_gym.envs import RadixAuctionParallelEnv
from auction_gym.market.config import MECHANISMS
from auction_gym.scheduler import scheduler_names
from auction_gym.workload import iter_mooncake
from auction_gym.workload.mooncake import SAMPLE_TRACE

pytestmark = pytest.mark.both_cores  # conftest.py: once per core of the simulator

SLICE = SAMPLE_TRACE
INFO_KEYS = ("payment", "spent", "budget", "utility", "multiplier", "round", "time", "welfare", "revenue",
             "hit_rate", "latency", "ttft", "admitted", "finished")

GOLDEN = {
    "env/fcfs": "8479760521a02eaf",
    "env/lpm": "ce7738107a26f490",
    "env/klpm": "0c954d83592f459f",
    "env/dfs_weight": "b0fd41f2b02ab3c9",
    "env/strict_vcg": "2afaab2170382146",
    "env/radix_vcg": "a7a0782880154733",
    "parallel/radix_vcg": "760ef203e1b88615",
    "cluster/radix_vcg": "24fd788506e22f66",
    "engine/fcfs": "d8d54ac071243713",
    "engine/lpm": "7c9c92e32118250b",
    "engine/klpm": "da7fe57e0e566da6",
    "engine/dfs_weight": "594a0b6ec353e1a9",
    "engine/strict_vcg": "81ef7c80c41c8721",
    "engine/radix_vcg": "888109b1726b4394",
    "env/lpm_aging": "a5faac80a87e4fa0",
    "env/dlpm": "f655a2c5b58db682",
    "env/sglang_priority": "9762d14d2999abef",
    "env/qos_lpm": "f37226e3d65190b5",
    "env/tiers": "7a8a6fcb9fccb87a",
    "env/tiers_lpm": "bf0d74847cdc2aca",
    "env/congestion": "5cfabfbd7dc9c759",
    "engine/lpm_aging": "5c937f7f5e7c3e91",
    "engine/dlpm": "f5ba3cb286a0f1fd",
    "engine/sglang_priority": "0176b823c659a72e",
    "engine/qos_lpm": "938df00534f87f3a",
    "engine/tiers": "d78f8694faabf995",
    "engine/tiers_lpm": "59e84854fdcfe1f0",
    "engine/congestion": "b784bdcfd0a8312c",
    "v2/radix_vcg": "b5d876a1f7e7f3ad",
    "v2/strict_vcg": "d45bb5948dfeb4cb",
}


class Digest:
    """sha256 over a stream of values, floats at 9 significant digits."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, *values: object) -> None:
        for v in values:
            if isinstance(v, (np.ndarray, list, tuple)):
                self.add(*np.asarray(v, dtype=np.float64).ravel().tolist())
            elif isinstance(v, (float, np.floating)):
                self._h.update(f"{float(v):.9g};".encode())
            else:
                self._h.update(f"{v!r};".encode())

    def hexdigest(self) -> str:
        return self._h.hexdigest()[:16]


def _check(name: str, digest: Digest) -> None:
    got = digest.hexdigest()
    assert got == GOLDEN.get(name), (
        f"{name}: the trajectory changed (digest {got}, pinned {GOLDEN.get(name) or 'nothing'}). If the "
        f"change is meant, set GOLDEN[{name!r}] = {got!r} and say so in the commit message."
    )


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_env_episode_is_pinned(mechanism):
    env = gym.make("RadixAuction-v0", mechanism=mechanism)
    actions = np.random.default_rng(7).uniform(-1, 1, size=(env.unwrapped.config.horizon + 1, 1))
    _check(f"env/{mechanism}", _episode_digest(env, actions, seed=11))


@pytest.mark.parametrize("mechanism", ["radix_vcg", "strict_vcg"])
def test_v2_episode_is_pinned(mechanism):
    """RadixAuction-v2 under the auctions, whose tied (unpaid) requests go by cached prefix there."""
    env = gym.make("RadixAuction-v2", mechanism=mechanism)
    actions = np.random.default_rng(7).uniform(-1, 1, size=(env.unwrapped.config.horizon + 1, 1))
    _check(f"v2/{mechanism}", _episode_digest(env, actions, seed=6))


def _episode_digest(env, actions: np.ndarray, seed: int) -> Digest:
    """The digest of one episode of `env` seeded `seed`, playing `actions` until it ends."""
    digest = Digest()
    obs, info = env.reset(seed=seed)
    digest.add(obs, info["budget"])
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action.astype(np.float32))
        digest.add(obs, reward, terminated, truncated, *(info[k] for k in INFO_KEYS))
        if terminated or truncated:
            break
    return digest


def test_parallel_episode_is_pinned():
    env = RadixAuctionParallelEnv()
    rng = np.random.default_rng(3)
    digest = Digest()
    obs, _ = env.reset(seed=5)
    digest.add(*(obs[a] for a in env.possible_agents))
    while env.agents:
        actions = {a: rng.uniform(-1, 1, size=1).astype(np.float32) for a in env.agents}
        obs, rewards, terms, truncs, infos = env.step(actions)
        for a in env.possible_agents:
            digest.add(obs[a], rewards[a], terms[a], truncs[a], *(infos[a][k] for k in INFO_KEYS))
    _check("parallel/radix_vcg", digest)


def test_cluster_episode_is_pinned():
    """Three replicas behind the cache-aware router, each with its own auction: a round is charged
    by the replica that admitted, budgets are global."""
    env = gym.make("RadixAuction-v0", replicas=3, router="cache_aware", horizon=120,
                   workload_kwargs={"rate": 60.0})
    actions = np.random.default_rng(5).uniform(-1, 1, size=(121, 1))
    _check("cluster/radix_vcg", _episode_digest(env, actions, seed=2))


@pytest.mark.parametrize("scheduler", [s for s in MECHANISMS if s in scheduler_names()])
def test_engine_replay_is_pinned(scheduler):
    """The Mooncake slice at twice its pace (a queue builds, chunks and the cache's rules all act)."""
    engine = SimEngine(scheduler, EngineConfig())
    engine.submit(iter_mooncake(SLICE, time_scale=2.0))
    digest = Digest()
    while (it := engine.step()) is not None:
        digest.add(it.kind, it.start, it.end, it.queue_len, it.admitted, it.finished, it.retracted)
    for rid, rec in sorted(engine.records.items()):
        digest.add(rid, rec.admit, rec.first_token, rec.finish, rec.cached_tokens, rec.computed_tokens,
                   rec.retractions, rec.rejected)
    _check(f"engine/{scheduler}", digest)

"""Evaluation of any policy (built-in or learned) on fixed seeds, with the same metrics and
TensorBoard tags for all.

Per-episode metrics (`METRICS`; money in the workload's units, times in engine seconds):

- `utility`: the focal bidder's realized utility, sum over steps of `info["utility"]` (unscaled:
  value minus urgency x latency of its finished requests, minus its payments).
- `welfare`: realized welfare of the market, sum of `info["welfare"]` (all bidders, no payments).
- `budget_spent_frac`: the focal bidder's final `spent / budget`, in [0, 1].
- `mean_latency`: mean latency (s) of the requests finished in the episode, the per-step means
  `info["latency"]` weighted by `info["finished"]`.
- `ttft`: mean time to first token (s), weighted the same way.
- `cache_hit_rate`: cached / prompt tokens of admitted requests, the per-step `info["hit_rate"]`
  weighted by `info["admitted"]`.
- `payments`: the focal bidder's total payments, sum of `info["payment"]`.

Seeds: episode k of an evaluation resets the env with seed `seed + k`, whatever the policy, so
every policy faces the same workloads and (deterministic, built-in) opponents.

Actions: a built-in policy (`auction_gym.pacing.MultiplierPolicy`) outputs multipliers and is
scored in multipliers: its env is built with `action_type="multiplier"` and, for `reward="paired"`,
`reward="cost"` (`scored_kwargs`), so a baseline's row is the same whatever action type and reward
a learner is trained with, and no shadow market is built. Any other policy (an SB3 model) acts in
the env's action space, and one that declares a different `action_space`, or a loaded model
trained on another action type (its `action_type`, from its run's `config.json` or its npz: "log"
and "residual" share one box), is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

import gymnasium as gym
import numpy as np
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams
from tqdm.auto import tqdm

from auction_gym._checks import check_count
from auction_gym.pacing import (
    MultiplierPolicy,
    Policy,
    builtin_policy_names,
    focal_policy,
    is_builtin_policy,
    make_policy,
)

from .sb3 import ENV_ID, MODEL_SUFFIXES, load_policy

METRIC_UNITS = {
    "utility": "value units",
    "welfare": "value units",
    "budget_spent_frac": "share of budget",
    "mean_latency": "engine seconds",
    "ttft": "engine seconds",
    "cache_hit_rate": "share of prompt tokens",
    "payments": "value units",
}
"""Each metric's unit (see the module docstring), for axis labels."""
METRICS = tuple(METRIC_UNITS)
DEFAULT_EVAL_SEED = 1000
"""Evaluation seeds start here, away from the training seeds 0, 1, ..."""


def policy_from_spec(spec: str, alpha_max: float = 2.0) -> Policy:
    """A built-in policy (`builtin_policy_names()`: a MultiplierPolicy, whatever the env's action type:
    `evaluate` scores it in multipliers) or the path of a saved model (an SB3 zip, a policy search's npz)."""
    if spec.endswith(MODEL_SUFFIXES):
        return load_policy(spec)
    if is_builtin_policy(spec):
        return make_policy(spec, alpha_max)
    raise ValueError(f"unknown policy {spec!r}; valid: {', '.join(builtin_policy_names())}, PATH.zip, PATH.npz")


def policy_name(spec: str) -> str:
    """A run-directory name for a policy spec: the built-in's name ("fixed:0.5" -> "fixed_0.5"), or
    for a saved model its run directory's name (runs/ppo_s0/model.zip -> "ppo_s0"), else the file's stem."""
    if spec.endswith(MODEL_SUFFIXES):
        path = Path(spec)
        return path.parent.name if path.stem == "model" and path.parent.name else path.stem
    return spec.replace(":", "_")


def episode_metrics(infos: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The METRICS of one episode from its per-step `info` dicts (see the module docstring)."""
    def weighted(key: str, weight: str) -> float:
        w = sum(i[weight] for i in infos)
        return sum(i[key] * i[weight] for i in infos) / w if w else 0.0

    last = infos[-1]
    return {
        "utility": float(sum(i["utility"] for i in infos)),
        "welfare": float(sum(i["welfare"] for i in infos)),
        "budget_spent_frac": float(last["spent"] / last["budget"]),
        "mean_latency": float(weighted("latency", "finished")),
        "ttft": float(weighted("ttft", "finished")),
        "cache_hit_rate": float(weighted("hit_rate", "admitted")),
        "payments": float(sum(i["payment"] for i in infos)),
    }


def evaluate(policy: Policy, env_kwargs: dict[str, Any] | None = None, episodes: int = 10,
             seed: int = DEFAULT_EVAL_SEED, progress: bool = True, desc: str = "evaluate",
             env_id: str = ENV_ID) -> list[dict[str, float]]:
    """Run `episodes` episodes of the env `env_id` (episode k seeded `seed + k`) with deterministic
    actions, a built-in in multipliers (`scored_kwargs`); the METRICS of each episode, in order.
    ValueError when `policy` declares an `action_space` other than the env's (see the module
    docstring)."""
    episodes = check_count("episodes", episodes)  # before the env is made; 2.5 would fail in range()
    env = gym.make(env_id, **scored_kwargs(policy, env_kwargs))
    try:
        policy = _for_env(policy, env)
        return [episode_metrics([info for _, info in _episode(policy, env, seed + k)])
                for k in tqdm(range(episodes), desc=desc, unit="ep", disable=not progress, leave=False)]
    finally:
        env.close()


def rollout(policy: Policy, env_kwargs: dict[str, Any] | None = None, seed: int = DEFAULT_EVAL_SEED,
            env_id: str = ENV_ID) -> list[tuple[np.ndarray, dict[str, Any]]]:
    """One episode of the env `env_id` seeded `seed`, played as `evaluate` plays it: each step's
    observation (the one the policy acted on) and the step's `info`."""
    env = gym.make(env_id, **scored_kwargs(policy, env_kwargs))
    try:
        return list(_episode(_for_env(policy, env), env, seed))
    finally:
        env.close()


def scored_kwargs(policy: Policy, env_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """The env keyword arguments `policy` is scored under: `env_kwargs`, and for a built-in
    (MultiplierPolicy) its multipliers played as they are, with the paired reward's shadow market
    left out (see the module docstring)."""
    kwargs = dict(env_kwargs or {})
    if isinstance(policy, MultiplierPolicy):
        kwargs["action_type"] = "multiplier"
        if kwargs.get("reward") == "paired":
            kwargs["reward"] = "cost"
    return kwargs


def _for_env(policy: Policy, env: gym.Env) -> Policy:
    """`policy` acting in `env`'s action space (see `acting_in`)."""
    return acting_in(policy, env.action_space, env)


def acting_in(policy: Policy, action_space: gym.spaces.Space, env: Any, agent: str | None = None) -> Policy:
    """`policy` acting in `env`'s `action_space` (built-ins mapped by `focal_policy`; `agent` in a
    PettingZoo env); ValueError for a policy that declares another action space or was trained on
    another action type."""
    space = getattr(policy, "action_space", None)
    action_type = getattr(env, "unwrapped", env).action_map.action_type
    trained = getattr(policy, "action_type", None)
    if trained is not None and trained != action_type:
        raise ValueError(f"the policy was trained on action_type={trained!r}, the environment plays "
                         f"{action_type!r}; give it env_kwargs {{\"action_type\": \"{trained}\"}}")
    if space is not None and space != action_space:
        raise ValueError(f"the policy acts in {space}, the environment (action_type={action_type!r}) in "
                         f"{action_space}; give the type it was trained on: one trained on multipliers "
                         f"needs env_kwargs {{\"action_type\": \"multiplier\"}}")
    return focal_policy(policy, env, agent)


def _episode(policy: Policy, env: gym.Env, seed: int) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
    obs, _ = env.reset(seed=seed)
    done, start, state = False, np.array([True]), None
    while not done:
        # A policy with memory (stacked observations, an LSTM's state, passed back each step) starts
        # afresh where episode_start is true.
        action, state = policy.predict(obs, state, episode_start=start, deterministic=True)
        start = np.array([False])
        acted_on = obs
        obs, _, terminated, truncated, info = env.step(action)
        yield acted_on, info
        done = terminated or truncated


def mean_metrics(results: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean of each metric over episodes."""
    return {m: float(np.mean([r[m] for r in results])) for m in METRICS}


def add_eval_scalars(writer: SummaryWriter, means: dict[str, float], step: int) -> None:
    """Each metric's mean (`mean_metrics`) as the scalar `eval/<metric>` at `step` (environment
    steps), the tags every policy's evaluation is logged under."""
    for m, v in means.items():
        writer.add_scalar(f"eval/{m}", v, step)


def log_episodes(logdir: str | Path, results: Sequence[dict[str, float]],
                 hparam_dict: dict[str, Any] | None = None, steps: Sequence[int] = (0,)) -> Path:
    """Write an evaluation to TensorBoard in `logdir`: the mean of each metric as `eval/<metric>` at
    every one of `steps` (a flat line: pass the timesteps at which learned runs log `eval/*`, and a
    fixed policy's line overlays their curves), each episode's metrics as `episode/<metric>` (step =
    episode index), and `hparam_dict` to the HPARAMS tab with the means as its metrics. Returns
    `logdir`."""
    logdir = Path(logdir)
    means = mean_metrics(results)
    writer = SummaryWriter(str(logdir))
    try:
        for step in steps:
            add_eval_scalars(writer, means, step)
        for k, r in enumerate(results):
            for m in METRICS:
                writer.add_scalar(f"episode/{m}", r[m], k)
        if hparam_dict:
            for summary in hparams(hparam_dict, {f"eval/{m}": v for m, v in means.items()}):
                writer.file_writer.add_summary(summary)
    finally:
        writer.close()
    return logdir

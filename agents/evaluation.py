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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams
from tqdm.auto import tqdm

from auction_gym.pacing import Policy, make_policy

from .sb3 import ENV_ID, load_policy

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
    """A policy from "ogd", "truthful", "fixed:<alpha>" or the path of a saved model zip."""
    if spec.endswith(".zip"):
        return load_policy(spec)
    if spec in ("ogd", "truthful") or spec.startswith("fixed:"):
        return make_policy(spec, alpha_max)
    raise ValueError(f"unknown policy {spec!r}; valid: ogd, truthful, fixed:<alpha>, PATH.zip")


def policy_name(spec: str) -> str:
    """A run-directory name for a policy spec: the built-in's name ("fixed:0.5" -> "fixed_0.5"), or
    for a zip its run directory's name (runs/ppo_s0/model.zip -> "ppo_s0"), else the zip's stem."""
    if spec.endswith(".zip"):
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
             seed: int = DEFAULT_EVAL_SEED, progress: bool = True, desc: str = "evaluate") -> list[dict[str, float]]:
    """Run `episodes` episodes of RadixAuction-v0 (episode k seeded `seed + k`) with deterministic
    actions; the METRICS of each episode, in order."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    env = gym.make(ENV_ID, **(env_kwargs or {}))
    results = []
    try:
        for k in tqdm(range(episodes), desc=desc, unit="ep", disable=not progress, leave=False):
            obs, _ = env.reset(seed=seed + k)
            infos, done = [], False
            while not done:
                action, _ = policy.predict(obs, deterministic=True)
                obs, _, terminated, truncated, info = env.step(action)
                infos.append(info)
                done = terminated or truncated
            results.append(episode_metrics(infos))
    finally:
        env.close()
    return results


def mean_metrics(results: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean of each metric over episodes."""
    return {m: float(np.mean([r[m] for r in results])) for m in METRICS}


def log_episodes(logdir: str | Path, results: Sequence[dict[str, float]],
                 hparam_dict: dict[str, Any] | None = None) -> Path:
    """Write each episode's metrics as `eval/<metric>` (step = episode index) to TensorBoard in
    `logdir`, the means as `summary/<metric>_mean` (step 0), and `hparam_dict` to the HPARAMS tab
    with the means as its metrics. Returns `logdir`."""
    logdir = Path(logdir)
    writer = SummaryWriter(str(logdir))
    try:
        for k, r in enumerate(results):
            for m in METRICS:
                writer.add_scalar(f"eval/{m}", r[m], k)
        means = {f"summary/{m}_mean": v for m, v in mean_metrics(results).items()}
        for tag, v in means.items():
            writer.add_scalar(tag, v, 0)
        if hparam_dict:
            for summary in hparams(hparam_dict, means):
                writer.file_writer.add_summary(summary)
    finally:
        writer.close()
    return logdir

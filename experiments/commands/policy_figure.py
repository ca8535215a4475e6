"""What a pacing policy does: `compare`'s figure of each policy's multiplier over one evaluation
episode (bursts shaded) and against the queue length and the time left, over a few episodes.

The points are the rounds of evaluation episodes (seeds EVAL_SEED, EVAL_SEED + 1, ...), the same
episodes every policy is scored on, so the panels show the states a policy actually meets rather
than a sweep over made-up observations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.evaluation import rollout
from auction_gym.market import Obs
from auction_gym.market.observation import TOTAL_QUEUE_SCALE
from auction_gym.pacing import Policy
from auction_gym.workload import AgenticConfig
from auction_gym.workload.agentic import in_burst


@dataclass
class Trace:
    """A policy's rounds over some episodes, one entry per round: engine time after it (s), the
    multiplier played, the waiting requests and share of the horizon left it was played on, and
    the episode of the round."""

    time: list[float] = field(default_factory=list)
    multiplier: list[float] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    time_left: list[float] = field(default_factory=list)
    episode: list[int] = field(default_factory=list)


def trace(policy: Policy, env_kwargs: dict[str, Any], seed: int, episodes: int) -> Trace:
    """The rounds of `episodes` evaluation episodes (seeds `seed + k`) under `policy`."""
    out = Trace()
    for k in range(episodes):
        for obs, info in rollout(policy, env_kwargs, seed + k):
            # The state the policy acted on, decoded from its observation.
            out.waiting.append(round(TOTAL_QUEUE_SCALE * math.expm1(float(obs[Obs.TOTAL_QUEUE]))))
            out.time_left.append(float(obs[Obs.TIME_LEFT]))
            out.time.append(info["time"])
            out.multiplier.append(info["multiplier"])
            out.episode.append(k)
    return out


def plot_policies(path: Path, traces: dict[str, Trace], env_kwargs: dict[str, Any]) -> None:
    """Three panels: multiplier over the first episode's engine time with the burst windows of the
    workload shaded; multiplier against waiting requests (log axis); multiplier against the share
    of the horizon left. One colour per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_time, ax_queue, ax_left) = plt.subplots(1, 3, figsize=(15, 4.2))
    bursts = AgenticConfig(**env_kwargs.get("workload_kwargs", {}))
    for i, (name, tr) in enumerate(traces.items()):
        first = np.array(tr.episode) == 0
        ax_time.step(np.array(tr.time)[first], np.array(tr.multiplier)[first], where="post", color=f"C{i}",
                     label=name, lw=1.2)
        ax_queue.scatter(np.maximum(tr.waiting, 1), tr.multiplier, s=4, alpha=0.4, color=f"C{i}", label=name)
        ax_left.scatter(tr.time_left, tr.multiplier, s=4, alpha=0.4, color=f"C{i}", label=name)
    times = np.concatenate([np.array(tr.time)[np.array(tr.episode) == 0] for tr in traces.values()])
    grid = np.linspace(times.min(), times.max(), 2000)
    ax_time.fill_between(grid, 0, 1, where=in_burst(grid, bursts), transform=ax_time.get_xaxis_transform(),
                         color="0.85", label="burst")
    ax_time.set(xlabel="engine time (s), first evaluation episode", ylabel="multiplier alpha",
                title="multiplier over an episode (bursts shaded)")
    ax_queue.set(xscale="log", xlabel="waiting requests (all bidders)", ylabel="multiplier alpha",
                 title="multiplier against queue length")
    ax_left.set(xlabel="share of the horizon left", ylabel="multiplier alpha", title="multiplier against time left")
    ax_left.invert_xaxis()
    for ax in (ax_time, ax_queue, ax_left):
        ax.grid(alpha=0.3)
    ax_time.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""What a pacing policy does: `compare`'s figure of each policy's multiplier over one evaluation
episode (the scenario's load shaded: its bursts, or its load wave) and against the queue length and
the time left, over a few episodes.

The points are the rounds of evaluation episodes (seeds EVAL_SEED, EVAL_SEED + 1, ...), the same
episodes every policy is scored on, so the panels show the states a policy actually meets rather
than a sweep over made-up observations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from agents.evaluation import rollout
from auction_gym.market import Obs
from auction_gym.market.observation import TOTAL_QUEUE_SCALE
from auction_gym.pacing import Policy
from auction_gym.workload import AgenticConfig
from auction_gym.workload.agentic import in_burst, wave_shape

from ..plotting import line_styles

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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


@dataclass(frozen=True)
class LoadShading:
    """What the time panel shades: `label` names it in the legend and the title; `level(t)` is the
    shaded height at engine times `t`, as a share of the panel's height."""

    label: str
    level: Callable[[np.ndarray], np.ndarray]


def load_shading(env_kwargs: dict[str, Any]) -> LoadShading | None:
    """The scenario's load over an episode, as the workload defines it: its burst windows, else its
    load wave (the rate multiplier, scaled so that its peak fills the panel), else None."""
    cfg = AgenticConfig(**env_kwargs.get("workload_kwargs", {}))
    if cfg.burst_period > 0 and cfg.burst_duration > 0:
        return LoadShading("burst", lambda t: in_burst(t, cfg).astype(float))
    if cfg.wave_amplitude > 0:
        peak = 1.0 + cfg.wave_amplitude
        return LoadShading("load wave (rate x the mean)", lambda t: wave_shape(t, cfg) / peak)
    return None


def draw_policies(traces: dict[str, Trace], env_kwargs: dict[str, Any]) -> Figure:
    """Three panels: multiplier over the first episode's engine time with the scenario's load
    shaded (`load_shading`); multiplier against waiting requests (log axis); multiplier against the
    share of the horizon left. Each policy's own style (`experiments.plotting.line_styles`,
    layered: a policy that plays what an earlier one plays is drawn thinner on top of it, so both
    show), every policy in one legend below the panels, where it hides no curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, (ax_time, ax_queue, ax_left) = plt.subplots(1, 3, figsize=(15, 4.8))
    handles: list = []
    for (name, tr), style in zip(traces.items(), line_styles(len(traces), layered=True)):
        first = np.array(tr.episode) == 0
        # Markers on a tenth of the rounds: enough to tell the lines apart, few enough to see the steps.
        ax_time.step(np.array(tr.time)[first], np.array(tr.multiplier)[first], where="post", markersize=4,
                     markevery=max(int(first.sum()) // 10, 1), **style)
        dots = {"color": style["color"], "marker": style["marker"], "zorder": style["zorder"]}
        ax_queue.scatter(np.maximum(tr.waiting, 1), tr.multiplier, s=4, alpha=0.4, **dots)
        ax_left.scatter(tr.time_left, tr.multiplier, s=4, alpha=0.4, **dots)
        handles.append(Line2D([], [], color=style["color"], marker=style["marker"], linestyle=style["linestyle"],
                              lw=2, label=name))
    shading = load_shading(env_kwargs)
    title = "multiplier over an episode"
    if shading is not None:
        times = np.concatenate([np.array(tr.time)[np.array(tr.episode) == 0] for tr in traces.values()])
        grid = np.linspace(times.min(), times.max(), 2000)
        ax_time.fill_between(grid, 0, shading.level(grid), transform=ax_time.get_xaxis_transform(),
                             color="0.85", zorder=0)
        handles.append(Patch(color="0.85", label=shading.label))
        title += f" ({shading.label.split(' (')[0]} shaded)"
    ax_time.set(xlabel="engine time (s), first evaluation episode", ylabel="multiplier alpha", title=title)
    ax_queue.set(xscale="log", xlabel="waiting requests (all bidders)", ylabel="multiplier alpha",
                 title="multiplier against queue length")
    ax_left.set(xlabel="share of the horizon left", ylabel="multiplier alpha", title="multiplier against time left")
    ax_left.invert_xaxis()
    for ax in (ax_time, ax_queue, ax_left):
        ax.grid(alpha=0.3)
    rows = math.ceil(len(handles) / 8)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 8), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * rows, 1, 1))
    return fig


def plot_policies(path: Path, traces: dict[str, Trace], env_kwargs: dict[str, Any]) -> None:
    """`draw_policies`' figure, saved to `path`."""
    import matplotlib.pyplot as plt

    fig = draw_policies(traces, env_kwargs)
    fig.savefig(path, dpi=120)
    plt.close(fig)

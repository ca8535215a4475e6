"""What both environments share: their market configuration, argument checks, `info` dicts, and
the observation table of their docstrings."""

from __future__ import annotations

import math
import warnings
from typing import Any

from ..market import Market, MarketConfig, RoundReport
from ..market.observation import feature_table

OBSERVATION_TABLE = "{observation_table}"
"""The line of an env docstring that `with_observation_table` replaces by the observation's table."""


def market_config(
    workload_kwargs: dict[str, Any] | None = None,
    engine_kwargs: dict[str, Any] | None = None,
    backend_kwargs: dict[str, Any] | None = None,
    episode_draws: dict[str, Any] | None = None,
    **kwargs: Any,
) -> MarketConfig:
    """The MarketConfig of an environment's keyword arguments (None kwargs dicts mean empty)."""
    return MarketConfig(
        workload_kwargs=dict(workload_kwargs or {}), engine_kwargs=dict(engine_kwargs or {}),
        backend_kwargs=dict(backend_kwargs or {}), episode_draws=dict(episode_draws or {}), **kwargs,
    )


def check_env_arguments(reward_scale: float, render_mode: str | None, render_modes: list[str]) -> None:
    """The checks both environments make of their own (non-market) arguments."""
    if not math.isfinite(reward_scale) or reward_scale <= 0:
        raise ValueError(f"reward_scale must be finite and > 0, got {reward_scale!r}")
    if render_mode is not None and render_mode not in render_modes:
        raise ValueError(f"render_mode must be one of {render_modes}, got {render_mode!r}")


def warn_if_queue_unstable(config: MarketConfig) -> None:
    """Warn (once per environment, at construction) when the queue will outgrow the episode;
    `MarketConfig.queue_warning` has the criterion."""
    if (message := config.queue_warning()) is not None:
        warnings.warn(message, UserWarning, stacklevel=3)


def market_info(market: Market, report: RoundReport, bidder: int) -> dict[str, Any]:
    """The `info` dict of one bidder after a round (see RadixAuctionEnv).

    Means over no requests are reported as 0 (not NaN, so equal steps give equal infos); the
    counts `admitted` and `finished` say when a mean is empty, and weight it when aggregating.
    """
    finished = len(report.finished)
    # item(): the Python float itself, where float(array[i]) made a numpy scalar first (every step)
    return {
        "payment": report.payments.item(bidder),
        "spent": market.spent.item(bidder),
        "budget": market.budget.item(bidder),
        "utility": report.utility.item(bidder),
        "multiplier": market.alpha.item(bidder),
        "round": market.round,
        "time": report.time,
        "welfare": report.welfare,
        "revenue": report.revenue,
        "hit_rate": report.hit_rate if report.admitted else 0.0,
        "latency": report.mean_latency if finished else 0.0,
        "ttft": report.mean_ttft if finished else 0.0,
        "admitted": len(report.admitted),
        "finished": finished,
    }


def with_observation_table(doc: str | None) -> str | None:
    """`doc` with its OBSERVATION_TABLE line replaced by `observation.feature_table()`, indented as
    that line (None stays None: docstrings are stripped under python -OO)."""
    if doc is None:
        return None
    for line in doc.splitlines():
        if line.strip() == OBSERVATION_TABLE:
            indent = line[: len(line) - len(line.lstrip())]
            table = "\n".join(indent + row for row in feature_table().splitlines())
            return doc.replace(line, table)
    raise ValueError(f"no {OBSERVATION_TABLE} line in the docstring")

"""What both environments share: their market configuration, argument checks (keywords, the action
map), `info` dicts, the tables of their docstrings, and the other bidders' policy groups."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, TypeVar

import gymnasium as gym
import numpy as np

from .._checks import is_real
from ..action import DEFAULT_ACTION_TYPE, ActionMap, action_map
from ..market import Market, MarketConfig, Obs, RoundReport
from ..market.observation import feature_table
from ..pacing import TUNED_PI, Policy, make_policy, named_pacer
from ..registry import resolve
from ..scenarios import V1_KWARGS

_Env = TypeVar("_Env", bound=type)

V1_TABLE = "{v1_table}"
"""The line of an env docstring that `with_v1_table` replaces by V1_KWARGS's rows."""
OBSERVATION_TABLE = "{observation_table}"
"""The line of an env docstring that `with_observation_table` replaces by the observation's table."""


MARKET_ONLY = ("mechanism_kwargs", "budget_rounds", "initial_multiplier", "warmup")
"""MarketConfig's fields that `RadixAuctionEnv` does not take (its arguments are fixed per version;
the parallel env takes them all)."""
ENV_MARKET_ARGUMENTS = tuple(f.name for f in dataclasses.fields(MarketConfig) if f.name not in MARKET_ONLY)
"""`RadixAuctionEnv`'s market arguments: MarketConfig's fields, less MARKET_ONLY."""


def market_config(**arguments: Any) -> MarketConfig:
    """The MarketConfig of an environment's market arguments (a None kwargs dict means empty)."""
    for name in ("workload_kwargs", "engine_kwargs", "backend_kwargs", "router_kwargs", "episode_draws"):
        given = arguments.get(name)
        if given is not None and not isinstance(given, Mapping):  # dict() of a string or list fails obscurely
            raise ValueError(f"{name} must be a dict or None, got {given!r}")
        arguments[name] = dict(given or {})
    return MarketConfig(**arguments)


@dataclass(frozen=True)
class ActionArguments:
    """Both environments' action arguments: the action type and the parameters of "delta" and
    "residual" (RadixAuctionEnv's Action Space; the maps are `auction_gym.action`'s)."""

    action_type: str = DEFAULT_ACTION_TYPE
    delta_bound: float = 0.3
    delta_start: float = 1.0
    residual_base: str = TUNED_PI
    residual_scale: float = 1.0

    def action_map(self, alpha_max: float) -> ActionMap:
        """The ActionMap, its residual base resolved from its name; ValueError for any bad argument."""
        base = named_pacer(self.residual_base, alpha_max, "residual_base")
        return action_map(self.action_type, alpha_max, self.delta_bound, self.delta_start, base, self.residual_scale)


def action_for_observation(action_map: ActionMap, alpha: float, observation: np.ndarray | list[float],
                           prev_alpha: float) -> float:
    """`action_map.action` of one agent's `observation` (both envs' `action_for`). ValueError naming
    its shape for one the map cannot read, a batch of rows or a short one (an IndexError or
    TypeError from inside the base pacer), told apart on the failing path only."""
    row = observation.tolist() if isinstance(observation, np.ndarray) else list(observation)
    try:
        return action_map.action(alpha, row, prev_alpha)
    except (IndexError, TypeError):
        if np.shape(observation) == (Obs.SIZE,):
            raise
        raise ValueError(f"observation must be one agent's {Obs.SIZE} features, got shape "
                         f"{np.shape(observation)}") from None


def field_names(cls: type) -> tuple[str, ...]:
    """The fields of the dataclass `cls`, in order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def grouped(arguments: dict[str, Any], *groups: Iterable[str]) -> list[dict[str, Any]]:
    """`arguments` split by the names of each group, in the groups' order."""
    return [{k: v for k, v in arguments.items() if k in set(names)} for names in groups]


def check_env_arguments(reward_scale: float, render_mode: str | None, render_modes: list[str]) -> None:
    """The checks both environments make of their own (non-market) arguments."""
    if not (is_real(reward_scale) and math.isfinite(reward_scale) and reward_scale > 0):
        raise ValueError(f"reward_scale must be finite and > 0, got {reward_scale!r}")
    if render_mode is not None and render_mode not in render_modes:
        raise ValueError(f"render_mode must be one of {render_modes}, got {render_mode!r}")


class UnknownArgumentError(TypeError, ValueError):
    """A keyword an environment does not take: a TypeError as Python's own (what Gymnasium's callers
    catch), and a ValueError as every other argument an environment refuses."""


def valid_keywords(cls: type) -> list[str]:
    """The keyword arguments `cls` takes: the named parameters of its __init__ and, where it takes
    **kwargs, the names of `cls.extra_keywords()`."""
    params = inspect.signature(cls.__init__).parameters.values()
    named = [p.name for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    extra = cls.extra_keywords() if any(p.kind is p.VAR_KEYWORD for p in params) else []
    return named + [k for k in extra if k not in named]


def check_keywords(given: Iterable[str], valid: list[str], what: str) -> None:
    """UnknownArgumentError, one line naming the closest valid keyword and every valid one, for
    the first name of `given` not in `valid`."""
    for name in given:
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownArgumentError(f"{what} got an unknown argument {name!r}{hint}; valid: {', '.join(valid)}")


def check_env_id(env_id: str) -> None:
    """ValueError unless `env_id` is a registered env of this package, naming the valid ones."""
    ours = sorted(name for name in gym.registry if name.startswith("RadixAuction"))
    if env_id not in ours:
        raise ValueError(f"unknown env id {env_id!r}; valid: {', '.join(ours)}")


def check_env_kwargs(env_kwargs: dict[str, Any], env_id: str) -> None:
    """ValueError unless the registered env `env_id` (one of this package's) accepts `env_kwargs`:
    an unknown id or keyword is named with the valid ones, in one line; the values are checked by
    building the env once (a few milliseconds). What training, evaluation and the command line
    check a user's env arguments with, before any work starts."""
    check_env_id(env_id)
    check_keywords(env_kwargs, valid_keywords(resolve(gym.registry[env_id].entry_point)), env_id)
    gym.make(env_id, **env_kwargs).close()


def refuses_unknown_keywords(cls: _Env) -> _Env:
    """Class decorator: constructing `cls` with a keyword it does not take (`valid_keywords`, so
    its signature is the one definition) raises UnknownArgumentError instead of Python's
    TypeError, which names the culprit but not the valid arguments."""
    init: Callable[..., None] = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        check_keywords(kwargs, valid_keywords(cls), cls.__name__)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


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


def with_v1_table(doc: str | None) -> str | None:
    """`doc` with its V1_TABLE line replaced by one row per V1_KWARGS argument, indented as that
    line (None stays None: docstrings are stripped under python -OO)."""
    if doc is None:
        return None
    line = next(line for line in doc.splitlines() if line.strip() == V1_TABLE)
    indent = line[: len(line) - len(line.lstrip())]
    rows = [f"{indent}| {name:<16} | {value!r:<75} |" for name, value in V1_KWARGS.items()]
    return doc.replace(line, "\n".join(rows))


def opponent_groups(other_bidders: str | Policy | Sequence[str | Policy], others: list[int],
                    alpha_max: float) -> list[tuple[Policy, list[int], np.ndarray]]:
    """The other bidders' policies grouped by policy object, (policy, bidders, their rows): bidders
    sharing a policy are asked at once every step (`MultiplierPolicy.multipliers` for a built-in,
    else one batched predict). ValueError for a count that does not match `others`, or a policy
    that does not act in multipliers."""
    if isinstance(other_bidders, (list, tuple)):
        if len(other_bidders) != len(others):
            raise ValueError(f"other_bidders has {len(other_bidders)} policies for {len(others)} other bidders")
        policies = [make_policy(s, alpha_max) for s in other_bidders]
    else:
        policies = [make_policy(other_bidders, alpha_max)] * len(others)
    for policy in policies:
        # The opponents' actions are multipliers; a policy mapped to normalized actions (focal_policy) is not.
        if getattr(policy, "action_type", "multiplier") != "multiplier":
            raise ValueError(f"other_bidders act in multipliers, got a policy of action_type "
                             f"{policy.action_type!r}: {policy!r}")
    groups: dict[int, tuple[Policy, list[int]]] = {}
    for bidder, policy in zip(others, policies):
        groups.setdefault(id(policy), (policy, []))[1].append(bidder)
    return [(policy, bidders, np.array(bidders)) for policy, bidders in groups.values()]

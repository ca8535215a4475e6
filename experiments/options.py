"""Command-line options that several commands share, and the checks of their values: the
scenario and env arguments, KEY=VALUE hyperparameters, the evaluation during training. A command
imports these from here rather than from another command."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from agents.evaluation import DEFAULT_EVAL_SEED
from agents.sb3 import ENV_ID, saved_env_kwargs
from auction_gym.envs.common import check_env_id, check_env_kwargs
from auction_gym.envs.parallel_env import parallel_kwargs
from auction_gym.scenarios import DEFAULT_SCENARIO, SCENARIOS, scenario

from .argtypes import json_dict, positive_int, random_seed
from .errors import UsageError

MULTI_AGENT_SCENARIO = parallel_kwargs(scenario(DEFAULT_SCENARIO))
"""`train-multi`'s and `evaluate-multi`'s env arguments by default: the calibrated pacing market,
RadixAuction-v2's, every bidder learning."""


def key_values(items: list[str] | None) -> dict[str, Any]:
    """KEY=VALUE pairs with YAML-parsed values ("n_steps=64" -> {"n_steps": 64})."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--hyperparams expects KEY=VALUE, got {item!r}")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise UsageError(f"--hyperparams {key}: cannot read the value {value!r}") from None
    return out


def add_config_arguments(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """An option per field of the dataclass `cls` not in `skip`, so a config's fields are declared
    once: --field-name, its default the field's and its help the field's `metadata["help"]`. An int
    field with `metadata["positive"]` takes a positive_int, one with `metadata["seed"]` a random_seed,
    a bool is a flag (--name to set a False default, --no-name to clear a True one), a dict takes
    KEY=VALUE pairs (`config_values`)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        meta, option, kind = f.metadata, "--" + f.name.replace("_", "-"), _value_type(hints[f.name])
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if kind is bool:
            parser.add_argument("--no-" + option[2:] if default else option, dest=f.name, default=default,
                                action="store_false" if default else "store_true",
                                help=("do not " if default else "") + meta["help"])
        elif kind is dict:
            parser.add_argument(option, nargs="*", default=[], metavar="KEY=VALUE", help=meta["help"])
        else:
            shown = "" if default is None or "(default" in meta["help"] else f" (default {default})"
            parser.add_argument(option, type=_option_type(meta, kind), default=default,
                                choices=meta.get("choices"), metavar=meta.get("metavar"), help=meta["help"] + shown)


def config_values(args: argparse.Namespace, cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The values of `add_config_arguments`' options in `args`, by field name (KEY=VALUE pairs read
    by `key_values`)."""
    hints = typing.get_type_hints(cls)
    return {f.name: key_values(getattr(args, f.name)) if _value_type(hints[f.name]) is dict else getattr(args, f.name)
            for f in dataclasses.fields(cls) if f.name not in skip}


def _option_type(meta: Mapping[str, Any], kind: type) -> Callable[[str], Any]:
    """The argument type of a field's option: `kind`, or the checked type its metadata asks for."""
    return positive_int if meta.get("positive") else random_seed if meta.get("seed") else kind


def _value_type(hint: Any) -> type:
    """What a field's option reads: int, float, bool, dict or str (a path too), from its type hint
    (the one type of an `X | None`)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    kind = typing.get_origin(hint) or hint
    return kind if kind in (int, float, bool, dict) else str


def add_scenario_arguments(parser: argparse.ArgumentParser, default: str | None = DEFAULT_SCENARIO,
                           env_kwargs_help: str = "(default none)") -> None:
    """`--scenario` and `--env-kwargs`, which `scenario_kwargs` merges (headroom, compare, train,
    tune); `default` None: no scenario unless one is named (the env's own defaults)."""
    shown = default or "none: the env's own defaults"
    parser.add_argument("--scenario", default=default, choices=list(SCENARIOS),
                        help=f"named scenario (auction_gym.scenarios; default {shown})")
    parser.add_argument("--env-kwargs", type=json_dict, default={},
                        help=f"RadixAuction-v2 arguments as JSON, over the scenario's key by key {env_kwargs_help}")


def checked_env_kwargs(env_kwargs: dict[str, Any], env_id: str = ENV_ID) -> dict[str, Any]:
    """`env_kwargs` when the env `env_id` accepts them, else UsageError naming --env-id (an id that
    is not one of ours) or --env-kwargs."""
    try:
        check_env_id(env_id)
    except ValueError as e:
        raise UsageError(f"--env-id: {e}") from None
    try:
        check_env_kwargs(env_kwargs, env_id)
    except ValueError as e:
        raise UsageError(f"--env-kwargs: {e}") from None
    return env_kwargs


def scenario_kwargs(name: str | None, overrides: dict[str, Any], env_id: str = ENV_ID) -> dict[str, Any]:
    """The named scenario's env kwargs (none for None) with `overrides` over them, checked for `env_id`."""
    return checked_env_kwargs({**(scenario(name) if name else {}), **overrides}, env_id)


def run_env_kwargs(given: dict[str, Any] | None, model: str | None, env_id: str = ENV_ID) -> tuple[dict[str, Any], str]:
    """The environment arguments of a run on or of a saved `model`, checked (`checked_env_kwargs`),
    and where they come from: the model's config.json, with `given` (--env-kwargs, or a scenario's
    and --env-kwargs over them) overriding key by key; or `given` alone."""
    saved = saved_env_kwargs(model) if model is not None else None
    if saved is None:
        return checked_env_kwargs(dict(given or {}), env_id), "--env-kwargs" if given else "the defaults"
    env_kwargs, path = saved
    if given:
        return checked_env_kwargs({**env_kwargs, **given}, env_id), f"{path}, overridden by --env-kwargs"
    return checked_env_kwargs(env_kwargs, env_id), str(path)


def add_evaluation_arguments(parser: argparse.ArgumentParser, when: str, default: str) -> None:
    """--eval-freq, --eval-episodes and --eval-seed of a training command: the evaluation during
    training (`when`: where an evaluation falls after every N steps; `default`: the frequency
    without --eval-freq)."""
    parser.add_argument("--eval-freq", type=positive_int, default=None,
                        help=f"evaluate every N environment steps, {when} (default: {default})")
    parser.add_argument("--eval-episodes", type=positive_int, default=5,
                        help="episodes per evaluation during training (default 5)")
    parser.add_argument("--eval-seed", type=random_seed, default=DEFAULT_EVAL_SEED,
                        help=f"evaluation episode k uses seed EVAL_SEED + k (default {DEFAULT_EVAL_SEED})")


def rllib_modules():
    """`agents.rllib` and `agents.rllib_training`; UsageError saying how to install Ray when it is not."""
    try:
        from agents import rllib, rllib_training
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("ray"):
            raise
        raise UsageError('needs Ray RLlib, the "rllib" extra: pip install -e ".[rllib]" (setup.sh installs it)') \
            from None
    return rllib, rllib_training


BUDGETS: dict[str, dict[str, int]] = {
    "quick": {"timesteps": 2_048, "seeds": 2, "episodes": 10, "tuning_episodes": 4, "curve_episodes": 5},
    "default": {"timesteps": 60_000, "seeds": 5, "episodes": 100, "tuning_episodes": 36, "curve_episodes": 20},
    "full": {"timesteps": 300_000, "seeds": 5, "episodes": 100, "tuning_episodes": 36, "curve_episodes": 20},
}
"""`compare`'s sizes for each `--budget` (the options of the same names; `headroom --quick` takes
"quick"'s episode counts). "quick" is a first look at the outputs (two short runs per algorithm,
which learn little); "default" is sized to run in under 15 minutes on 2 cores; "full" is the long
run the documentation's tables come from."""

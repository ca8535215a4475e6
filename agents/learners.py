"""Every learner `radix-auction train --algo` and `compare --algos` accept, by name: the one registry
from which their validation, dispatch and `--help` derive (`radix-auction tune` searches those of
them with a search space, `agents.tuning.SEARCH_SPACES`).

A learner is either a Stable-Baselines3 algorithm (`family` "sb3": trained by
`agents.training.train_sb3`, saved as `model.zip`) or a policy search (`family` "search": trained by
`agents.policy_search.train_search`, saved as `model.npz`). Both read RL Zoo-format
hyperparameters from `agents/hyperparams/<name>.yml`, keyed by env id, and return a
`agents.training.TrainResult` whose model loads with `agents.sb3.load_policy`.

Light to import (no learning library; "module:Class" targets are imported on use by
`auction_gym.registry.resolve`): `agents.sb3.ALGOS` is a live view of this table's "sb3" learners.
Add one with `register_learner` (docs/extending.md, 7.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from auction_gym._deprecation import deprecated_aliases
from auction_gym.registry import resolve


@dataclass(frozen=True)
class Learner:
    """One learner of the registry."""

    name: str
    family: str
    """"sb3" (a Stable-Baselines3 algorithm) or "search" (a policy search, `agents.policy_search`)."""
    model: str
    """"module:Class" of what it trains (an SB3 algorithm class, or the search's policy class)."""
    summary: str


LEARNERS: dict[str, Learner] = {entry.name: entry for entry in (
    Learner("ppo", "sb3", "stable_baselines3:PPO", "PPO (Stable-Baselines3)"),
    Learner("ppo_paired", "sb3", "stable_baselines3:PPO",
            "PPO trained on the paired reward (a shadow episode with the reference pacer; ppo_paired.yml)"),
    # RL Zoo's name for sb3-contrib's RecurrentPPO, so agents/hyperparams/ppo_lstm.yml works there too.
    Learner("ppo_lstm", "sb3", "sb3_contrib:RecurrentPPO", "PPO with an LSTM policy (sb3-contrib's RecurrentPPO)"),
    Learner("sac", "sb3", "stable_baselines3:SAC", "SAC (Stable-Baselines3)"),
    Learner("td3", "sb3", "stable_baselines3:TD3", "TD3 (Stable-Baselines3)"),
    Learner("a2c", "sb3", "stable_baselines3:A2C", "A2C (Stable-Baselines3)"),
    Learner("cmaes", "search", "agents.policy_search:SearchPolicy",
            "CMA-ES over a small deterministic policy, candidates scored on shared episodes (agents.policy_search)"),
    Learner("cmaes_log", "search", "agents.policy_search:SearchPolicy",
            "CMA-ES as cmaes, playing the log action from truthful bidding: a pacer learned from scratch (cmaes_log.yml)"),
)}
TRAINERS = {"sb3": "agents.training:train_sb3", "search": "agents.policy_search:train_search"}
"""Each family's training function, `fn(config: TrainConfig, callbacks) -> TrainResult`."""


def register_learner(entry: Learner) -> Learner:
    """Add `entry` at the end of `LEARNERS`. ValueError when the name is taken or has a ","
    (`compare --algos` separates names with it), or its family has no trainer in `TRAINERS`."""
    if entry.name in LEARNERS:
        raise ValueError(f"learner name {entry.name!r} is already registered")
    if "," in entry.name:
        raise ValueError(f"a learner name may not contain ',', got {entry.name!r}")
    if entry.family not in TRAINERS:
        raise ValueError(f"learner {entry.name!r}: unknown family {entry.family!r}; valid: {', '.join(TRAINERS)}")
    LEARNERS[entry.name] = entry
    return entry


def learner(name: str) -> Learner:
    """The registry's entry of `name`; ValueError lists the valid names."""
    if name not in LEARNERS:
        raise ValueError(f"unknown algo {name!r}; valid: {', '.join(LEARNERS)}")
    return LEARNERS[name]


def names_text() -> str:
    """The learners' names, comma-separated, for messages and --help."""
    return ", ".join(LEARNERS)


def check_hyperparams(name: str, hyperparams: dict[str, Any]) -> None:
    """ValueError for a hyperparameter `name`'s learner does not know or a value of the wrong type
    (`agents.sb3.check_hyperparams`, `agents.policy_search.SearchParams.of`)."""
    if learner(name).family == "sb3":
        resolve("agents.sb3:check_hyperparams")(name, hyperparams)
    else:
        resolve("agents.policy_search:SearchParams").of(hyperparams)


__getattr__ = deprecated_aliases(__name__, {"load_object": ("auction_gym.registry.resolve", lambda: resolve)})

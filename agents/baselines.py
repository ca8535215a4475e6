"""Baselines a pacing study needs beside the paper's OGD: the best constant multiplier and OGD with
its step tuned, each chosen on training seeds and then scored, like every policy, on the
evaluation seeds.

- `best_fixed`: the multiplier of `FIXED_GRID` with the highest mean utility of the focal bidder
  over `TUNING_EPISODES` episodes seeded `TUNING_SEED + k`;
- `ogd_tuned`: OGD (`auction_gym.pacing.OGDPacer`) with the step of `ETA_GRID` chosen the same way;
- `pid_tuned`: the PI budget pacer (`auction_gym.pacing.PIDPacer`) with the gains of `PID_GRID`
  chosen the same way;
- `ogd`, the paper's pacing with its default step, needs no tuning.

Tuning seeds start at 0, the training seeds, and stay below `DEFAULT_EVAL_SEED` (1000), so a
baseline is never chosen on the episodes it is scored on: choosing the best of a grid on the
scoring episodes would bias its score upward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from auction_gym.pacing import FixedMultiplier, OGDPacer, PIDPacer, Policy, policy_spec

from .evaluation import DEFAULT_EVAL_SEED, evaluate

FIXED_GRID = (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
"""Constant multipliers `best_fixed` chooses among: dense near 0, where budgets push it (on the
default compare scenario 0.02 won among a grid that started at 0.02, hence the points below it)."""
ETA_GRID = (0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
"""OGD steps `ogd_tuned` chooses among; 0.02 is the paper's default (on the default compare
scenario 0.2 won among a grid that ended there, hence the larger ones)."""
PID_GRID = ((0.0, 0.01), (0.0, 0.05), (0.0, 0.2), (0.01, 0.01), (0.01, 0.05), (0.01, 0.2), (0.05, 0.01),
            (0.05, 0.05), (0.05, 0.2), (0.05, 1.0))
"""(kp, ki) gain pairs `pid_tuned` chooses among."""
TUNING_EPISODES = 20
TUNING_SEED = 0


def fixed_candidates(alpha_max: float = 2.0) -> dict[str, Policy]:
    """The constant multipliers of FIXED_GRID up to `alpha_max`, by name ("fixed:0.05")."""
    return {policy_spec("fixed", alpha=a): FixedMultiplier(a) for a in FIXED_GRID if a <= alpha_max}


def ogd_candidates(alpha_max: float = 2.0) -> dict[str, Policy]:
    """OGD with each step of ETA_GRID, by name ("ogd:eta=0.02")."""
    return {policy_spec("ogd", eta=eta): OGDPacer(eta=eta, alpha_max=alpha_max) for eta in ETA_GRID}


def pid_candidates(alpha_max: float = 2.0) -> dict[str, Policy]:
    """The PI pacer with each gain pair of PID_GRID, by name ("pid:kp=0.01,ki=0.05")."""
    return {policy_spec("pid", kp=kp, ki=ki): PIDPacer(kp, ki, alpha_max=alpha_max) for kp, ki in PID_GRID}


CANDIDATES: dict[str, Callable[[float], dict[str, Policy]]] = {
    "best_fixed": fixed_candidates, "ogd_tuned": ogd_candidates, "pid_tuned": pid_candidates}
"""Each tuned baseline's family of candidates (a function of alpha_max), by baseline name."""


@dataclass(frozen=True)
class Tuned:
    """A baseline chosen on the tuning episodes."""

    name: str
    """The baseline's name ("best_fixed", "ogd_tuned")."""
    choice: str
    """The chosen candidate, e.g. "fixed:0.05" or "ogd:eta=0.01"."""
    policy: Policy
    utility: dict[str, float]
    """Mean focal utility of every candidate on the tuning episodes, by candidate."""
    episodes: int
    seed: int

    def describe(self) -> str:
        """One line: what was chosen, among what, on which seeds."""
        best = self.utility[self.choice]
        return (f"{self.name} = {self.choice} (mean utility {best:.4g} on tuning seeds {self.seed}.."
                f"{self.seed + self.episodes - 1}, the best of {len(self.utility)} candidates)")


def tune(name: str, candidates: dict[str, Policy], env_kwargs: dict[str, Any], episodes: int = TUNING_EPISODES,
         seed: int = TUNING_SEED) -> Tuned:
    """The candidate with the highest mean focal utility over `episodes` episodes seeded `seed + k`
    (ties: the first in order). ValueError when the tuning seeds reach the evaluation seeds."""
    if not candidates:  # else max() of no utilities, after nothing was played
        raise ValueError("candidates must hold at least one policy, got none")
    if seed + episodes > DEFAULT_EVAL_SEED:
        raise ValueError(f"tuning seeds {seed}..{seed + episodes - 1} overlap the evaluation seeds "
                         f"({DEFAULT_EVAL_SEED} on)")
    utility = {spec: float(np.mean([r["utility"] for r in evaluate(policy, env_kwargs, episodes, seed,
                                                                    progress=False)]))
               for spec, policy in candidates.items()}
    choice = max(utility, key=utility.__getitem__)
    return Tuned(name, choice, candidates[choice], utility, episodes, seed)


def tuned(name: str, env_kwargs: dict[str, Any], episodes: int = TUNING_EPISODES, seed: int = TUNING_SEED) -> Tuned:
    """The baseline `name` of CANDIDATES, chosen on the tuning episodes."""
    return tune(name, CANDIDATES[name](env_kwargs.get("alpha_max", 2.0)), env_kwargs, episodes, seed)


def best_fixed(env_kwargs: dict[str, Any], episodes: int = TUNING_EPISODES, seed: int = TUNING_SEED) -> Tuned:
    """The best constant multiplier of FIXED_GRID on the tuning episodes."""
    return tuned("best_fixed", env_kwargs, episodes, seed)


def ogd_tuned(env_kwargs: dict[str, Any], episodes: int = TUNING_EPISODES, seed: int = TUNING_SEED) -> Tuned:
    """OGD with the best step of ETA_GRID on the tuning episodes."""
    return tuned("ogd_tuned", env_kwargs, episodes, seed)


TUNED = tuple(CANDIDATES)
"""The baselines chosen on tuning episodes, by name (`tuned(name, ...)`)."""

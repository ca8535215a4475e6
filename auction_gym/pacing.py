"""Built-in bidding policies: OGD pacing (the paper's), PID pacing, truthful, fixed multiplier.

They live here, not in `agents/`, because the environments run them for the bidders that are not
learning (`other_bidders`), and `auction_gym` never imports `agents`; `agents` re-exports them.

Every policy answers Stable-Baselines3's `predict(observation, state=None, episode_start=None,
deterministic=True) -> (action, state)` on one observation (shape (obs_dim,)) or a batch (shape
(n, obs_dim)), so `stable_baselines3.common.evaluation.evaluate_policy` runs them like a trained
model. The action is the bid multiplier alpha, shape (1,) or (n, 1): the unit of the market and of
the environments' `other_bidders`, and of their focal bidder under `action_type="multiplier"`.
`focal_policy(policy, env)` maps a built-in's multipliers to the actions of that environment
through the inverse of its action map (`auction_gym.action`); `agents.evaluation.evaluate` scores
built-ins in multipliers instead.

Names (`make_policy`): each policy of the registry `POLICIES` (`PolicyEntry`: name, class,
parameters), plain ("ogd", "pid", "truthful") or with its parameters ("ogd:eta=<x>",
"pid:kp=<x>,ki=<y>", "fixed:<alpha>"); `policy_spec` writes them, so every list of candidates names
its pacers in the one format `make_policy` reads. `register_policy` adds one.
"""

from __future__ import annotations

import inspect
import math
from array import array
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from . import core
from ._deprecation import deprecated_aliases
from .action import clip
from .market.observation import Obs
from .registry import resolve

_PREV_MULTIPLIER, _LAST_SPEND_LOG = Obs.PREV_MULTIPLIER, Obs.LAST_SPEND_LOG
"""OGDPacer's features (`Obs` indices), read where it runs every step."""


@runtime_checkable
class Policy(Protocol):
    """Anything that maps an observation to a bid multiplier, SB3-style."""

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]: ...


_COMPILED_PACERS = None if core.compiled_module() is None else core.compiled_module().Pacers(
    Obs.BUDGET_LEFT, Obs.TIME_LEFT, Obs.LAST_SPEND_LOG, Obs.PREV_MULTIPLIER)
"""The built-in pacers compiled over the observation's features (`_core.Pacers`), where the
extension is built."""


class MultiplierPolicy:
    """Base of the built-in policies: their actions are bid multipliers, and depend on the current
    observation alone (so they batch row by row). A subclass defines `_alpha`; `predict` and
    `multipliers` both answer from it, and the environments call `multipliers` for their other
    bidders (or `predict`, if a subclass overrides it).

    A built-in constructed on the compiled core computes `multipliers` in one compiled call
    (`_core.Pacers`), bit for bit its `_alpha`, which runs wherever the compiled code declines an
    input; a subclass of it, which may redefine `_alpha`, runs its Python (docs/design.md section 8).
    """

    _COMPILED: int | None = None
    """The compiled code's number for the class's `_alpha`, given by each built-in itself."""

    def __new__(cls, *args: Any, **kwargs: Any) -> MultiplierPolicy:
        policy = super().__new__(cls)
        policy._compiled_pacing = ("_COMPILED" in cls.__dict__ and _COMPILED_PACERS is not None
                                   and core.active() == "compiled")
        return policy

    def _alpha(self, obs: list[float]) -> float:
        """The multiplier for one observation."""
        raise NotImplementedError

    def _actions(self, rows: list[list[float]]) -> np.ndarray:
        """The multipliers of observations given as lists of floats, one per row (float32)."""
        return np.array(self.multipliers(rows), dtype=np.float32)

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        obs = np.asarray(observation)
        action = self._actions(obs.reshape(-1, obs.shape[-1]).tolist()).reshape(-1, 1)
        return (action if obs.ndim == 2 else action[0]), state

    def multipliers(self, rows: list[list[float]]) -> list[float]:
        """`predict`'s multipliers, as Python floats, of observations given as lists of floats (as
        `tolist` gives a float32 array's rows): what the environments call every step, sparing
        predict's array of the observations and reshapes of the actions."""
        if self._compiled_pacing:
            compiled = _COMPILED_PACERS(self._COMPILED, self, rows)
            if compiled is not None:
                return compiled
        # Rounded to float32, the action's dtype, as `predict`'s array is.
        return array("f", [self._alpha(row) for row in rows]).tolist()


class Truthful(MultiplierPolicy):
    """Bid the true urgency: alpha = 1 always. Overspends whenever the budget binds."""

    _COMPILED = 0

    def _alpha(self, obs: list[float]) -> float:
        return 1.0

    def __repr__(self) -> str:
        return "Truthful()"


class FixedMultiplier(MultiplierPolicy):
    """Bid alpha x urgency with a constant alpha >= 0."""

    _COMPILED = 1

    def __init__(self, alpha: float) -> None:
        if not math.isfinite(alpha) or alpha < 0:
            raise ValueError(f"alpha must be finite and >= 0, got {alpha!r}")
        self.alpha = float(alpha)

    def _alpha(self, obs: list[float]) -> float:
        return self.alpha

    def __repr__(self) -> str:
        return f"FixedMultiplier({self.alpha})"


class OGDPacer(MultiplierPolicy):
    """Adaptive pacing by online gradient descent on the budget's dual (Balseiro and Gur).

        lambda_{t+1} = clip(lambda_t - eta * (1 - z_t / rho), 0, lambda_max),  alpha = 1 / (1 + lambda)

    z_t is the spend in round t, rho = B / T the target per round (docs/economic-model.md section 3).
    Stateless: z_t / rho and lambda_t are read from the observation (`last_spend_log`,
    `prev_multiplier`), so it works batched as is; lambda_0 = 0 (truthful).

    Args:
        eta: step size per round, in units of lambda per (spend / target); how 0.02 was chosen:
            docs/economic-model.md section 3.
        lambda_max: cap on lambda; the smallest multiplier is 1 / (1 + lambda_max).
        alpha_max: the environment's action bound, to decode `prev_multiplier` (scaled by it).
    """

    _COMPILED = 2

    def __init__(self, eta: float = 0.02, lambda_max: float = 20.0, alpha_max: float = 2.0) -> None:
        for name, v in (("eta", eta), ("lambda_max", lambda_max), ("alpha_max", alpha_max)):
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be finite and > 0, got {v!r}")
        self.eta, self.lambda_max, self.alpha_max = float(eta), float(lambda_max), float(alpha_max)

    def _alpha(self, obs: list[float]) -> float:
        lambda_max = self.lambda_max
        prev, least = obs[_PREV_MULTIPLIER] * self.alpha_max, 1.0 / (1.0 + lambda_max)
        lam = clip(1.0 / (least if least > prev else prev) - 1.0, 0.0, lambda_max)
        z = math.expm1(obs[_LAST_SPEND_LOG])
        lam = clip(lam - self.eta * (1.0 - z), 0.0, lambda_max)
        return 1.0 / (1.0 + lam)

    def __repr__(self) -> str:
        return f"OGDPacer(eta={self.eta}, lambda_max={self.lambda_max}, alpha_max={self.alpha_max})"


class PIDPacer(MultiplierPolicy):
    """Budget pacing by a proportional-integral controller on the log of the multiplier, the
    industrial pacer (AuctionNet's PID baseline) in the velocity form the observation supports:

        log alpha_{t+1} = log alpha_t - kp * (z_t / rho - 1) - ki * e_t,   e_t = time_left - budget_left

    z_t / rho - 1 is the last round's spend error (the change of the pace error, in rounds of
    target), e_t the pace error itself (share of the budget spent minus share of the episode
    played: positive when ahead of an even pace). In velocity form the proportional term acts on
    the change of the error and the integral term on the error, so the multiplier holds steady
    exactly when spend runs on pace. The derivative term would need the spend of two rounds back,
    which the observation does not carry, so it is left out (a PI controller). Stateless: the
    previous multiplier is `prev_multiplier`, as for OGDPacer.

    Args:
        kp: gain on the last round's spend error (log multiplier per rho), >= 0.
        ki: gain on the pace error (log multiplier per share of budget), >= 0.
        alpha_min: the smallest multiplier it plays (> 0: the controller works on log alpha).
        alpha_max: the largest multiplier, and the scale of `prev_multiplier`.
    """

    _COMPILED = 3

    def __init__(self, kp: float = 0.02, ki: float = 0.05, alpha_min: float = 1e-3, alpha_max: float = 2.0) -> None:
        for name, v in (("kp", kp), ("ki", ki)):
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be finite and >= 0, got {v!r}")
        if not (math.isfinite(alpha_min) and math.isfinite(alpha_max) and 0 < alpha_min < alpha_max):
            raise ValueError(f"need 0 < alpha_min < alpha_max, finite; got {alpha_min!r}, {alpha_max!r}")
        self.kp, self.ki = float(kp), float(ki)
        self.alpha_min, self.alpha_max = float(alpha_min), float(alpha_max)

    def _alpha(self, obs: list[float]) -> float:
        prev = clip(obs[Obs.PREV_MULTIPLIER] * self.alpha_max, self.alpha_min, self.alpha_max)
        error = math.expm1(obs[Obs.LAST_SPEND_LOG]) - 1.0
        pace = obs[Obs.TIME_LEFT] - obs[Obs.BUDGET_LEFT]
        log_alpha = math.log(prev) - self.kp * error - self.ki * pace
        return clip(math.exp(log_alpha), self.alpha_min, self.alpha_max)

    def __repr__(self) -> str:
        return f"PIDPacer(kp={self.kp}, ki={self.ki}, alpha_min={self.alpha_min}, alpha_max={self.alpha_max})"


class EnvActions:
    """A MultiplierPolicy acting in an environment's actions: each multiplier it chooses mapped by
    the inverse of the environment's action map (`env.action_for`, which holds the multiplier
    played last and the observation that "delta" and "residual" need), so the environment plays
    the multipliers the policy chose, up to rounding and the box's clip (see
    `auction_gym.action`). `agent` names the bidder in a PettingZoo environment. A batch of
    observations is mapped row by row against the one environment's state, which is right only
    for the stateless types ("normalized", "log"), as in a vectorized env of copies."""

    def __init__(self, policy: MultiplierPolicy, env: Any, agent: str | None = None) -> None:
        self.policy, self.env, self.agent = policy, env, agent
        self.action_type = env.action_map.action_type

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        alpha, state = self.policy.predict(observation, state, episode_start, deterministic)
        rows = np.asarray(observation).reshape(alpha.size, -1).tolist()
        extra = () if self.agent is None else (self.agent,)
        # float64: a float32 action near -1 would round away the low bits of a small multiplier.
        action = np.array([self.env.action_for(a, row, *extra) for a, row in zip(alpha.ravel().tolist(), rows)],
                          dtype=np.float64)
        return action.reshape(alpha.shape), state

    def __repr__(self) -> str:
        return f"EnvActions({self.policy!r}, action_type={self.action_type!r})"


def focal_policy(policy: Policy, env: Any, agent: str | None = None) -> Policy:
    """`policy` as the focal bidder of `env` (a RadixAuctionEnv, wrapped or not, or with `agent`
    the PettingZoo env): a MultiplierPolicy maps its multipliers to the env's actions (EnvActions)
    unless the env's type is "multiplier"; any other policy, such as an SB3 model, already acts in
    the environment's space and is returned as is."""
    base = getattr(env, "unwrapped", env)
    if isinstance(policy, MultiplierPolicy) and base.action_map.action_type != "multiplier":
        return EnvActions(policy, base, agent)
    return policy


@dataclass(frozen=True)
class PolicyEntry:
    """One built-in policy of the registry: `name` (what `make_policy`, `other_bidders` and the
    commands say), `target` (its MultiplierPolicy class, or "module:Class") and `parameters` (the
    constructor's arguments a name may give, in the order it gives them: "ogd:eta=0.02"; every
    one of them or none, for the class's defaults), and `summary` (one line). A class that takes
    `alpha_max` is given the environment's. `value_only`: named by its one parameter's value
    alone, and never without it ("fixed:0.5")."""

    name: str
    target: str | type[MultiplierPolicy]
    parameters: tuple[str, ...]
    summary: str
    value_only: bool = False

    def policy_class(self) -> type[MultiplierPolicy]:
        """The class (imported now if `target` is a string)."""
        return resolve(self.target)

    def forms(self) -> tuple[str, ...]:
        """How a name of it is written: "ogd" and "ogd:eta=<x>", "fixed:<alpha>"."""
        if self.value_only:
            return (f"{self.name}:<{self.parameters[0]}>",)
        given = ",".join(f"{p}=<{v}>" for p, v in zip(self.parameters, "xyzuvw"))
        return (self.name, f"{self.name}:{given}") if self.parameters else (self.name,)

    def build(self, params: dict[str, float], alpha_max: float) -> MultiplierPolicy:
        """An instance with `params` (name -> value), and `alpha_max` if its class takes it."""
        cls = self.policy_class()
        takes_bound = "alpha_max" in inspect.signature(cls).parameters
        return cls(**params, **({"alpha_max": alpha_max} if takes_bound else {}))


POLICIES: dict[str, PolicyEntry] = {}
"""The built-in policies by name, in table order: the one registry from which `make_policy`,
`is_builtin_policy`, `policy_spec`, `builtin_policy_names`, the commands' choices and the
documentation's table derive (`register_policy` adds one)."""


def register_policy(entry: PolicyEntry) -> PolicyEntry:
    """Add `entry` at the end of the table; a name already taken, or one with ":" or ",", raises
    ValueError. Also a class decorator's worth: returns the entry."""
    if entry.name in POLICIES:
        raise ValueError(f"policy name {entry.name!r} is already registered")
    if any(c in entry.name for c in ":,="):
        raise ValueError(f"a policy name may not contain ':', ',' or '=', got {entry.name!r}")
    if entry.value_only and len(entry.parameters) != 1:
        raise ValueError(f"a value_only policy names one parameter, got {entry.parameters!r}")
    POLICIES[entry.name] = entry
    return entry


for _entry in (
    PolicyEntry("ogd", OGDPacer, ("eta",), "OGD pacing on the budget's dual (the paper's pacer)"),
    PolicyEntry("pid", PIDPacer, ("kp", "ki"), "a PI controller on log alpha, toward spending on pace"),
    PolicyEntry("truthful", Truthful, (), "bid the true urgency: alpha = 1"),
    PolicyEntry("fixed", FixedMultiplier, ("alpha",), "a constant multiplier alpha >= 0", value_only=True),
):
    register_policy(_entry)


def plain_policy_names() -> tuple[str, ...]:
    """The built-in policies named without parameters (their defaults), in table order."""
    return tuple(name for name, entry in POLICIES.items() if not entry.value_only)


def builtin_policy_names() -> tuple[str, ...]:
    """Every form of a built-in policy's name, as `make_policy` takes them (the one list every
    message and docstring names): the plain names, then the names with parameters."""
    forms = [form for entry in POLICIES.values() for form in entry.forms()]
    return (*plain_policy_names(), *(form for form in forms if form not in POLICIES))


TUNED_PI = "pid:kp=0.05,ki=0.01"
"""The PI pacer with the gains `radix-auction headroom` tunes on the calibrated scenario's tuning
seeds: the default base of the "residual" action and the default reference of the paired reward."""


def policy_spec(kind: str, **params: float) -> str:
    """The name of a built-in policy with its parameters: policy_spec("pid", kp=0.05, ki=0.01) is
    "pid:kp=0.05,ki=0.01", policy_spec("fixed", alpha=0.5) is "fixed:0.5"."""
    entry = POLICIES.get(kind)
    if entry is None or tuple(params) != entry.parameters:
        raise ValueError(f"{kind!r} takes parameters {entry and entry.parameters}, got {tuple(params)}")
    if entry.value_only:
        return f"{kind}:{params[entry.parameters[0]]:g}"
    return f"{kind}:" + ",".join(f"{k}={v:g}" for k, v in params.items())


def _parse(spec: str) -> tuple[PolicyEntry, dict[str, str]] | None:
    """(entry, its parameters as written) of a built-in policy's name, or None if `spec` is not
    one; the values are checked when the policy is built."""
    kind, sep, rest = spec.partition(":")
    entry = POLICIES.get(kind)
    if entry is None or not sep:
        return None if entry is None or entry.value_only else (entry, {})
    if entry.value_only:
        return entry, {entry.parameters[0]: rest}
    pairs = [p.partition("=") for p in rest.split(",")]
    if not entry.parameters or [k for k, _, _ in pairs] != list(entry.parameters) or not all(eq for _, eq, _ in pairs):
        return None
    return entry, {k: v for k, _, v in pairs}


def is_builtin_policy(spec: str) -> bool:
    """Whether `spec` names a built-in policy (`builtin_policy_names`; any value for a parameter)."""
    return _parse(spec) is not None


def make_policy(spec: str | Policy, alpha_max: float = 2.0) -> Policy:
    """A policy from a name of `builtin_policy_names()`, or a policy object (returned as is)."""
    if not isinstance(spec, str):
        if not callable(getattr(spec, "predict", None)):
            raise ValueError(f"a policy needs a predict(observation) method, got {spec!r}")
        return spec
    parsed = _parse(spec)
    if parsed is None:
        raise ValueError(f"unknown policy {spec!r}; valid: {', '.join(builtin_policy_names())}, "
                         "or an object with predict()")
    entry, written = parsed
    try:
        return entry.build({k: float(v) for k, v in written.items()}, alpha_max)
    except ValueError as e:
        raise ValueError(f"bad policy {spec!r}: {e}") from None


def named_pacer(spec: str, alpha_max: float, what: str) -> MultiplierPolicy:
    """The built-in policy named `spec` (a name, not an object: `what` is an env argument that
    takes a name); ValueError naming `what` and the valid names otherwise."""
    if not isinstance(spec, str) or not is_builtin_policy(spec):
        raise ValueError(f"{what} must name a built-in policy ({', '.join(builtin_policy_names())}), got {spec!r}")
    return make_policy(spec, alpha_max)  # type: ignore[return-value]


__getattr__ = deprecated_aliases(__name__, {
    "BUILTIN_POLICIES": ("builtin_policy_names()", builtin_policy_names),
    "PLAIN_POLICIES": ("plain_policy_names()", plain_policy_names),
    "PACER_PARAMETERS": ("POLICIES[name].parameters",
                         lambda: {n: e.parameters for n, e in POLICIES.items() if e.parameters and not e.value_only}),
    "FIXED_PREFIX": ('"fixed:" (POLICIES["fixed"])', lambda: "fixed:"),
})

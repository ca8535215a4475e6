"""Named pacing scenarios: `RadixAuction-v0` keyword arguments that the pacing studies (`radix-auction
compare`, `radix-auction headroom`) run by name, so a table can be re-run from its scenario's name;
`V1_KWARGS`, the defaults of `RadixAuction-v1`, which is the calibrated scenario; and `V2_KWARGS`,
`RadixAuction-v2`'s, the same market with the cache-aware order of tied (unpaid) requests.

- "calibrated" (the default of `compare` and `headroom`): an economically calibrated
  market in which pacing decisions matter (docs/design.md section 6), `V2_KWARGS` itself;
  "calibrated_v1" is the same market with v1's order of unpaid requests (by request id), on which
  the pacing pages' tables were made.
  The auction prices what a request costs the others at the engine's bottleneck, the running slots
  (cost model "service"); load follows a known curve over the episode (trough at its start, peak in
  its middle) and its level differs between episodes, as days differ; budgets are sized to those
  prices and differ between bidders and episodes, so that the best multiplier differs from episode
  to episode and no single constant fits them all.
- "bursty_v0": the earlier compare scenario (bursty load every 8 s, token-priced auction, tiny
  budgets), kept so that its tables can be re-run; in it nothing can be learned (README).
"""

from __future__ import annotations

import copy
from typing import Any

V1_ACTION_TYPE = "residual"
"""`RadixAuction-v1`'s action type (`auction_gym.action`), the one constant its default derives from:
a correction of the tuned PI pacer (a = 0 plays it), the type under which PPO scored best on the
tuning episodes among "log", "delta" and "residual" (`python -m experiments.studies.action_types`;
the table is on the pacing benchmark's documentation page)."""
V1_KWARGS: dict[str, Any] = {
    "cost_model": "service",
    "horizon": 200,
    "budget_per_round": 0.15,
    "episode_draws": {"rate": [32.0, 40.0, 48.0], "budget_scale": [0.1, 1.0, 10.0]},
    "workload_kwargs": {"wave_amplitude": 0.5, "wave_period": 12.0, "wave_offset": 10.0},
    "action_type": V1_ACTION_TYPE,
    "reward": "cost",
}
"""`RadixAuction-v1`'s keyword defaults over `RadixAuctionEnv`'s (v0's): the one definition from
which its registration, its docstring's table and v2's derive. Read-only: `scenario("calibrated_v1")`
gives a copy (with v1's `tie_break` spelled out, so that it is v1's market under any id)."""

V2_KWARGS: dict[str, Any] = {**V1_KWARGS, "tie_break": "cached_prefix"}
"""`RadixAuction-v2`'s keyword defaults over `RadixAuctionEnv`'s: v1's market, with requests whose
bids tie (those of a bidder out of budget bid 0) served longest cached prefix first instead of by
request id (`MarketConfig.tie_break`, docs/design.md section 3). Its baselines, re-tuned on its
tuning seeds (`radix-auction headroom --scenario calibrated --env-kwargs '{"tie_break":
"cached_prefix"}'`, seeds 0-35), chose v1's: the PI pacer at kp 0.05, ki 0.01 (`TUNED_PI`, the
residual base and the paired reward's reference) and OGD at eta 0.2."""

SCENARIOS: dict[str, dict[str, Any]] = {
    "calibrated": V2_KWARGS,
    # v1's market under any id: the pacing pages' tables were made on it.
    "calibrated_v1": {**V1_KWARGS, "tie_break": "request_id"},
    # Every argument that v2 sets, at v0's default, so the scenario is the same market under any id.
    "bursty_v0": {
        "tie_break": "request_id",
        "cost_model": "tokens",
        "horizon": 200,
        "budget_per_round": 0.0001,
        "episode_draws": {},
        "workload_kwargs": {"burst_period": 8.0, "burst_factor": 3.0, "burst_duration": 2.0},
        "action_type": "normalized",
        "reward": "utility",
    },
}
"""Scenario name -> RadixAuction-v0 keyword arguments (a fresh copy from `scenario`)."""
DEFAULT_SCENARIO = "calibrated"


def scenario(name: str) -> dict[str, Any]:
    """A copy of the named scenario's env keyword arguments; ValueError for an unknown name."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; valid: {', '.join(SCENARIOS)}")
    return copy.deepcopy(SCENARIOS[name])

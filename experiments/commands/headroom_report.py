"""The headroom report: is there anything to learn in a pacing scenario? `radix-auction headroom` runs it
alone, and `radix-auction compare` first, before any training.

For one scenario (a name of `auction_gym.scenarios.SCENARIOS`, with `--env-kwargs` over it), the
focal bidder's utility under policies that need no learning, each chosen on tuning episodes
(seeds TUNING_SEED.., never the evaluation seeds) and scored on evaluation episodes (seeds
EVAL_SEED..), every policy on the same episodes, compared with the best constant pairwise:

{row_table}

`privileged` needs `episode_draws`; without them every episode is of one kind and it is the best
constant. Gaps are paired differences from best_fixed on the same episodes, mean ± 95% CI, and
relative to |best_fixed|'s mean. A scenario is a pacing benchmark when privileged or hindsight
beats the best constant with a CI excluding 0 (docs/design.md section 6).

Writes OUT/headroom.md, headroom.csv (one row per policy) and headroom.png (each row's gap and CI).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agents.baselines import CANDIDATES, TUNED, TUNING_SEED
from agents.evaluation import DEFAULT_EVAL_SEED, evaluate
from agents.stats import format_ci, mean_ci
from auction_gym.envs import RadixAuctionEnv
from auction_gym.market import MarketConfig
from auction_gym.pacing import OGDPacer, Policy, Truthful

from ..executor import Executor

TUNING_EPISODES = 36
"""Four per kind of episode of the calibrated scenario on average (9 kinds)."""
EVAL_EPISODES = 100
"""Evaluation episodes by default: at 20, the paired gaps' CIs were about ±4% of the utility."""
UNLIMITED = 1e12
"""The focal bidder's budget in the unlimited_budget row (money)."""
ROWS = {
    "best_fixed": "the constant multiplier of the grid with the best mean on the tuning episodes",
    "truthful": "alpha = 1 always",
    "ogd": "the paper's OGD pacing at its default step",
    "ogd_tuned": "OGD with its step chosen on the tuning episodes",
    "pid_tuned": "the PI budget pacer (`auction_gym.pacing.PIDPacer`), gains chosen on tuning episodes",
    "privileged": "a constant per kind of episode (its drawn rate and own budget scale, which the bidder does not "
                  "observe), each chosen on the tuning episodes of that kind",
    "hindsight": "the best constant of the grid for each evaluation episode, chosen on that episode (an upper "
                 "bound on constants, biased upward by choosing on the scored episode)",
    "unlimited_budget": "the focal bidder truthful with an unlimited budget (what money costs it)",
}
"""What each row of the report is: the module docstring's table and the legend under every table
that shows the rows (`legend`)."""


def legend(names: Sequence[str]) -> str:
    """The lines that say what each of `names` that is a row of the report is (ROWS), in order."""
    return "\n".join(f"- `{name}`: {ROWS[name]}" for name in dict.fromkeys(names) if name in ROWS)


@dataclass(frozen=True)
class Row:
    """One policy of the report, scored on the evaluation episodes."""

    name: str
    choice: str
    utility: np.ndarray
    """Focal utility per evaluation episode."""
    spent: np.ndarray
    """Share of its budget spent per evaluation episode."""


@dataclass(frozen=True)
class Headroom:
    """What `headroom` found for one scenario."""

    table: list[dict[str, Any]]
    """The report's rows (`gaps`)."""
    tuned: dict[str, Policy]
    """The policy each tuned baseline chose (`agents.baselines.TUNED`: best_fixed, ogd_tuned,
    pid_tuned), by name."""
    episodes: dict[str, list[dict[str, float]]]
    """The metrics per evaluation episode of each row that is one policy (best_fixed, truthful,
    ogd, the tuned ones), by row name: a caller scoring these policies on the same episodes
    reads them here instead of playing the episodes again."""
    utility: dict[str, np.ndarray]
    """The focal bidder's utility per evaluation episode of every row, by row name, the bounds
    (privileged, hindsight, unlimited_budget) included: what a caller pairs its own policies with."""


def candidates(alpha_max: float) -> dict[str, Policy]:
    """Every policy the report evaluates, by candidate name ("fixed:0.1", "ogd:eta=0.2", ...): the
    tuned baselines' families (`agents.baselines.CANDIDATES`) and truthful bidding."""
    out: dict[str, Policy] = {"truthful": Truthful()}
    for family in CANDIDATES.values():
        out.update(family(alpha_max))
    return out


def _evaluate(policy: Policy, env_kwargs: dict[str, Any], episodes: int, seed: int) -> list[dict[str, float]]:
    return evaluate(policy, env_kwargs, episodes, seed, progress=False)


def evaluations(policies: dict[str, Policy], env_kwargs: dict[str, Any], episodes: int, seed: int,
                executor: Executor = Executor()) -> dict[str, list[dict[str, float]]]:
    """Each policy's metrics (`agents.evaluation.METRICS`) per episode of `episodes` seeded
    `seed + k`, a task per policy run where `executor` says."""
    out = executor.map(_evaluate, [(policy, env_kwargs, episodes, seed) for policy in policies.values()])
    return dict(zip(policies, out))


def utilities(episodes: dict[str, list[dict[str, float]]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each policy's (focal utility, budget share spent) per episode, from its `evaluations`."""
    return {name: (np.array([r["utility"] for r in results]), np.array([r["budget_spent_frac"] for r in results]))
            for name, results in episodes.items()}


def episode_kinds(env_kwargs: dict[str, Any], seeds: Sequence[int]) -> list[tuple]:
    """The kind of each episode: its drawn rate and the focal bidder's drawn budget scale, read
    from the env's reset (`info["draws"]`, `MarketConfig.draw_episode`); (None, None) without draws."""
    env = RadixAuctionEnv(**env_kwargs)
    kinds = []
    for s in seeds:
        draws = env.reset(seed=s)[1]["draws"]
        kinds.append((draws.get("rate"), (draws.get("budget_scale") or [None] * (env.focal + 1))[env.focal]))
    return kinds


def choose(tuning: dict[str, tuple[np.ndarray, np.ndarray]], prefix: str, mask: np.ndarray | None = None) -> str:
    """The candidate starting with `prefix` of best mean tuning utility (over `mask`'s episodes)."""
    names = [n for n in tuning if n.startswith(prefix)]
    return max(names, key=lambda n: float(np.mean(tuning[n][0] if mask is None else tuning[n][0][mask])))


def report_rows(tuning: dict, scored: dict, tuning_kinds: list[tuple], eval_kinds: list[tuple],
                unlimited: tuple[np.ndarray, np.ndarray]) -> list[Row]:
    """The report's rows from every candidate's tuning and evaluation utilities (`utilities`)."""
    def row(name: str, choice: str) -> Row:
        return Row(name, choice, *scored[choice])

    rows = [row("best_fixed", choose(tuning, "fixed:")), row("truthful", "truthful"),
            row("ogd", f"ogd:eta={OGDPacer().eta:g}"), row("ogd_tuned", choose(tuning, "ogd:")),
            row("pid_tuned", choose(tuning, "pid:"))]
    picks, utility, spent = {}, [], []
    for k, kind in enumerate(eval_kinds):
        if kind not in picks:
            mask = np.array([t == kind for t in tuning_kinds])
            picks[kind] = choose(tuning, "fixed:", mask) if mask.any() else rows[0].choice
        utility.append(scored[picks[kind]][0][k])
        spent.append(scored[picks[kind]][1][k])
    rows.append(Row("privileged", f"{len(picks)} kinds", np.array(utility), np.array(spent)))
    constants = [n for n in scored if n.startswith("fixed:")]
    grid = np.array([scored[n][0] for n in constants])
    best = grid.argmax(axis=0)
    rows.append(Row("hindsight", "per episode", grid.max(axis=0),
                    np.array([scored[constants[b]][1][k] for k, b in enumerate(best)])))
    rows.append(Row("unlimited_budget", "truthful, budget 1e12", *unlimited))
    return rows


def gaps(rows: list[Row]) -> list[dict[str, Any]]:
    """Each row's mean utility and its paired gap to best_fixed (absolute and relative)."""
    base = rows[0].utility
    scale = abs(float(base.mean()))
    out = []
    for r in rows:
        mean, half = mean_ci(r.utility)
        gap, gap_half = mean_ci(r.utility - base)
        out.append({"policy": r.name, "choice": r.choice, "n": len(r.utility), "utility": mean, "utility_ci95": half,
                    "gap": gap, "gap_ci95": gap_half, "gap_pct": 100 * gap / scale, "gap_pct_ci95": 100 * gap_half / scale,
                    "budget_spent_frac": float(np.mean(r.spent))})
    return out


def headroom(env_kwargs: dict[str, Any], tuning_episodes: int = TUNING_EPISODES, eval_episodes: int = EVAL_EPISODES,
             tuning_seed: int = TUNING_SEED, eval_seed: int = DEFAULT_EVAL_SEED,
             executor: Executor = Executor()) -> Headroom:
    """The report for the scenario `env_kwargs` (see `Headroom`); the evaluations run where
    `executor` says."""
    if tuning_seed + tuning_episodes > eval_seed:
        raise ValueError(f"tuning seeds {tuning_seed}..{tuning_seed + tuning_episodes - 1} reach the evaluation "
                         f"seeds ({eval_seed} on)")
    policies = candidates(float(env_kwargs.get("alpha_max", MarketConfig.alpha_max)))
    tuning = utilities(evaluations(policies, env_kwargs, tuning_episodes, tuning_seed, executor))
    # Scored on the evaluation episodes: every constant (hindsight and privileged choose among them
    # per episode), truthful, OGD at its default step and each tuned family's choice.
    scored = [n for n in policies if n.startswith("fixed:")] + ["truthful", f"ogd:eta={OGDPacer().eta:g}"]
    scored += [choose(tuning, prefix) for prefix in ("ogd:", "pid:")]
    tasks = [(policies[n], env_kwargs, eval_episodes, eval_seed) for n in dict.fromkeys(scored)]
    played = executor.map(_evaluate, [*tasks, (Truthful(), unlimited_kwargs(env_kwargs), eval_episodes, eval_seed)])
    episodes = dict(zip(dict.fromkeys(scored), played))
    unlimited = utilities({"unlimited": played[-1]})["unlimited"]
    kinds = (episode_kinds(env_kwargs, range(tuning_seed, tuning_seed + tuning_episodes)),
             episode_kinds(env_kwargs, range(eval_seed, eval_seed + eval_episodes)))
    rows = report_rows(tuning, utilities(episodes), *kinds, unlimited)
    return Headroom(gaps(rows), {r.name: policies[r.choice] for r in rows if r.name in TUNED},
                    {r.name: episodes[r.choice] for r in rows if r.choice in episodes},
                    {r.name: r.utility for r in rows})


def unlimited_kwargs(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """`env_kwargs` with the focal bidder's budget unlimited and the others' unchanged."""
    env = RadixAuctionEnv(**env_kwargs)
    budgets = env.config.budgets()
    budgets[env.focal] = UNLIMITED
    return {**env_kwargs, "budget": budgets}


def markdown(table: list[dict[str, Any]]) -> str:
    """The report as a Markdown table, with the legend of its rows under it."""
    lines = ["| policy | choice | n | utility | gap to best_fixed | gap % | budget spent |",
             "|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['policy']} | {r['choice']} | {r['n']} | {format_ci(r['utility'], r['utility_ci95'])} | "
                     f"{format_ci(r['gap'], r['gap_ci95'])} | {format_ci(r['gap_pct'], r['gap_pct_ci95'])} | "
                     f"{r['budget_spent_frac']:.2f} |")
    return "\n".join(lines) + "\n\n" + legend([r["policy"] for r in table])


def plot(path: Path, table: list[dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, r in enumerate(table):
        ax.errorbar([i], [r["gap_pct"]], yerr=[r["gap_pct_ci95"]], fmt="o", capsize=4, color=f"C{i}")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(table)), [r["policy"] for r in table], rotation=30, fontsize=8)
    ax.set_ylabel("utility gap to best_fixed (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(out: Path, table: list[dict[str, Any]], header: str, title: str) -> None:
    """headroom.md (`header`, then the table), headroom.csv and headroom.png (titled `title`) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "headroom.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    (out / "headroom.md").write_text(f"{header}\n\n{markdown(table)}\n\n![headroom](headroom.png)\n")
    plot(out / "headroom.png", table, title)




if __doc__ is not None:  # None under python -OO
    __doc__ = __doc__.replace("{row_table}", legend(list(ROWS)))

"""The leaderboard of the default env's scenario (`RadixAuction-v2` at its defaults, the scenario
"calibrated"): what `radix-auction leaderboard` builds, prints and scores submissions against.

The board (`BOARD`, JSON; its page `PAGE` is generated from it) holds one row per baseline and
per learned algorithm, each with the focal bidder's utility on every evaluation episode, so a
submission plays only its own episodes and is paired with the stored ones. The evaluation episodes
(seeds 1000..1099, `agents.evaluation.DEFAULT_EVAL_SEED`) are ones nothing is tuned on: the tuned
baselines are chosen on seeds 0..35 (`headroom_report`), learners train on seeds below 1000.

Every statistic is paired on the same episodes, a 95% CI (`agents.stats.mean_ci`): the utility
minus each reference's (`REFERENCES`), and the normalized score (mean utility - OGD's) / (hindsight's
- OGD's): 0 is OGD at the paper's step, 1 the best constant of each episode in hindsight. A single
policy's CI is over episodes (the score's by the delta method, `normalized`); a learned algorithm's
is over its training seeds, each seed's mean one sample, as `compare` reports them.

The board records the scenario's hash and the simulator code's (`experiments.provenance`); `stale`
says when either no longer matches the running code.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agents.baselines import CANDIDATES
from agents.sb3 import ENV_ID
from agents.stats import format_ci, mean_ci
from auction_gym.market import MarketConfig
from auction_gym.scenarios import DEFAULT_SCENARIO, scenario

from ..provenance import code_hash, scenario_hash
from .headroom_report import ROWS, Headroom

BOARD = Path(__file__).resolve().parents[2] / "docs" / "leaderboard" / "leaderboard.json"
"""The committed board (in a clone of the repository; `--board` names another)."""
PAGE = BOARD.with_suffix(".md")
"""The board's documentation page, generated from it."""
SCENARIO = DEFAULT_SCENARIO
"""The board's scenario: `RadixAuction-v2`'s defaults (`auction_gym.scenarios`)."""
BASELINES = ("ogd", "best_fixed", "truthful", "ogd_tuned", "pid_tuned", "privileged", "hindsight")
"""The headroom report's rows on the board: policies that need no learning, and two bounds."""
BOUNDS = ("privileged", "hindsight")
"""Baseline rows no bidder could play: each uses what it cannot observe or the scored episode."""
ZERO, ONE = "ogd", "hindsight"
"""The rows the normalized score maps to 0 and to 1."""
REFERENCES = (ZERO, "pid_tuned", ONE)
"""What every row's utility is paired with: the paper's OGD, the tuned PI pacer, hindsight."""
STATS = ("utility", *(f"vs_{ref}" for ref in REFERENCES), "score")
"""Each row's statistics, in the table's order: mean and 95% CI half-width."""


def identity(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a board is tied to: the env id, the scenario's name and kwargs, and both hashes now."""
    return {"env_id": ENV_ID, "scenario": SCENARIO, "env_kwargs": env_kwargs,
            "scenario_hash": scenario_hash(ENV_ID, env_kwargs), "code_hash": code_hash()}


def stale(board: dict[str, Any]) -> str | None:
    """Why `board` does not describe the running code (its scenario or the simulator's code hash
    differs from now), or None when it does."""
    now = identity(scenario(SCENARIO))
    changed = [key for key in ("scenario_hash", "code_hash") if board[key] != now[key]]
    if not changed:
        return None
    verb = "does" if len(changed) == 1 else "do"
    return (f"the leaderboard's {' and '.join(changed)} ({', '.join(board[k][:12] for k in changed)}) {verb} not match "
            f"the current code's ({', '.join(now[k][:12] for k in changed)}): give --recompute to replay its "
            "baselines on this code, or rebuild it (radix-auction leaderboard --build)")


def normalized(utility: np.ndarray, zero: np.ndarray, one: np.ndarray) -> tuple[float, float]:
    """The score mean(utility - zero) / mean(one - zero) over paired episodes and its 95% CI half-width
    by the delta method: the CI of the mean of (a - S b) / mean(b), a = utility - zero, b = one - zero."""
    a, b = utility - zero, one - zero
    scale = float(b.mean())
    score = float(a.mean()) / scale
    return score, mean_ci((a - score * b) / scale)[1]


def row_stats(runs: Sequence[np.ndarray], refs: dict[str, np.ndarray]) -> dict[str, list[float | None]]:
    """`STATS` of a row from its runs' utilities per episode (one run: CIs over episodes; several,
    a learned algorithm's seeds: over seeds, a seed's mean one sample); each [mean, half-width]
    (half-width None where there is no interval: a single seed)."""
    n = len(runs[0])
    refs = {name: u[:n] for name, u in refs.items()}
    if len(runs) == 1:
        u = runs[0]
        out = {"utility": mean_ci(u), **{f"vs_{r}": mean_ci(u - refs[r]) for r in REFERENCES},
               "score": normalized(u, refs[ZERO], refs[ONE])}
    else:
        out = {"utility": mean_ci([u.mean() for u in runs]),
               **{f"vs_{r}": mean_ci([(u - refs[r]).mean() for u in runs]) for r in REFERENCES},
               "score": mean_ci([normalized(u, refs[ZERO], refs[ONE])[0] for u in runs])}
    return {k: [float(m), None if math.isnan(h) else float(h)] for k, (m, h) in out.items()}


def references(board: dict[str, Any]) -> dict[str, np.ndarray]:
    """The reference rows' utilities per episode, by name."""
    rows = {r["name"]: r for r in board["rows"]}
    return {name: np.array(rows[name]["utility"][0]) for name in REFERENCES}


def with_stats(board: dict[str, Any]) -> dict[str, Any]:
    """`board` with every row's `stats` (re)computed from the utilities it stores."""
    refs = references(board)
    for row in board["rows"]:
        row["stats"] = row_stats([np.array(u) for u in row["utility"]], refs)
    return board


def seed_range(first: int, count: int) -> list[int]:
    """[first, last] of `count` consecutive seeds."""
    return [first, first + count - 1]


def baseline_rows(report: Headroom, env_kwargs: dict[str, Any], tuning_episodes: int,
                  eval_seed: int) -> list[dict[str, Any]]:
    """The board's baseline rows (`BASELINES`) from the headroom `report` of its scenario `env_kwargs`."""
    choices = {r["policy"]: r["choice"] for r in report.table}
    tuned = {"best_fixed", "ogd_tuned", "pid_tuned", "privileged"}
    # The candidates each choice was made among: the grids of `agents.baselines`, which the code hash does not cover.
    alpha_max = float(env_kwargs.get("alpha_max", MarketConfig.alpha_max))
    constants = list(CANDIDATES["best_fixed"](alpha_max))
    among = {"best_fixed": constants, "ogd_tuned": list(CANDIDATES["ogd_tuned"](alpha_max)),
             "pid_tuned": list(CANDIDATES["pid_tuned"](alpha_max)), "privileged": constants, "hindsight": constants}
    rows = []
    for name in BASELINES:
        utility = report.utility[name]
        rows.append({"name": name, "kind": "bound" if name in BOUNDS else "baseline", "policy": choices[name],
                     "about": ROWS[name], "training_seeds": [], "training_steps": 0,
                     "tuning_seeds": seed_range(0, tuning_episodes) if name in tuned else None,
                     "eval_seeds": seed_range(eval_seed, len(utility)),
                     "settings": {"chosen_among": among[name]} if name in among else {},
                     "utility": [[float(u) for u in utility]]})
    return rows


def new_board(env_kwargs: dict[str, Any], rows: list[dict[str, Any]], made_by: str, tuning_episodes: int,
              eval_seed: int, episodes: int) -> dict[str, Any]:
    """A board of `rows` for the scenario `env_kwargs`, with the running code's hashes and its stats."""
    return with_stats({**identity(env_kwargs), "code_hash_covers": CODE_HASH_COVERS,
                       "tuning_seeds": seed_range(0, tuning_episodes),
                       "eval_seeds": seed_range(eval_seed, episodes), "score": SCORE, "made_by": made_by, "made": "",
                       "rows": rows})


CODE_HASH_COVERS = ("sha256 over every file under auction_gym/ (not __pycache__ nor the built compiled core, whose "
                    "results are the Python core's bit for bit), in path order, each its path and its content's sha256 "
                    "(experiments.provenance.code_hash)")
SCORE = "(mean utility - ogd's) / (hindsight's - ogd's) on the same episodes: 0 = ogd, 1 = hindsight"


def save(board: dict[str, Any], path: Path) -> None:
    """Write `board` as JSON to `path` (rows' utilities in full precision: the re-scoring test
    compares them exactly) and its Markdown page beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(board, indent=1) + "\n")
    path.with_suffix(".md").write_text(page(board))


def load(path: Path) -> dict[str, Any]:
    """The board at `path`; ValueError when there is none or it is not a board."""
    try:
        board = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"no leaderboard at {path}; give --board PATH or build one (--build)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not a leaderboard (not JSON: {e})") from None
    if not isinstance(board, dict) or not {"rows", "code_hash", "scenario_hash", "env_kwargs"} <= set(board):
        raise ValueError(f"{path} is not a leaderboard (no rows, hashes or env_kwargs)")
    return board


def compare_header(compare_md: str) -> dict[str, Any]:
    """What a compare's compare.md says of its run (`compare.header`): the command, the env kwargs,
    the steps each algorithm trained, the evaluation seeds and where its models are."""
    found = {key: re.search(pattern, compare_md, re.S) for key, pattern in (
        ("command", r"\A`([^`]+)`"), ("env_kwargs", r"\(env kwargs\): `(\{.*?\})`;"),
        ("trained", r"each run trained (.*?); \d+ evaluation episodes"), ("root", r"TensorBoard events in `([^`]+)`"))}
    missing = [key for key, match in found.items() if match is None]
    if missing:
        raise ValueError(f"compare.md does not say its {', '.join(missing)}: not a compare's report")
    trained = {algo: trained_steps(text) for algo, text in
               (part.partition(" ")[::2] for part in found["trained"].group(1).split("; "))}
    return {"command": found["command"].group(1), "env_kwargs": json.loads(found["env_kwargs"].group(1)),
            "trained": trained, "root": Path(found["root"].group(1))}


def trained_steps(text: str) -> int | str:
    """The steps an algorithm's runs trained, from `compare_report.steps_text` ("61,440 steps (60,000
    asked: ...)"): a number, or "low-high" when its seeds trained different counts."""
    match = re.match(r"([\d,]+)(?:-([\d,]+))? steps", text)
    if match is None:
        raise ValueError(f"compare.md: cannot read the steps trained from {text!r}")
    low, high = (int(g.replace(",", "")) for g in match.groups(match.group(1)))
    return low if low == high else f"{low}-{high}"


def compare_utilities(path: Path) -> tuple[dict[str, list[float]], int]:
    """Each policy's utility per episode in a compare's episodes.csv, and its first seed."""
    utility: dict[str, list[float]] = {}
    seeds = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            utility.setdefault(r["policy"], []).append(float(r["utility"]))
            seeds.append(int(r["seed"]))
    return utility, min(seeds)


def learned_rows(board: dict[str, Any], compare_out: Path) -> list[dict[str, Any]]:
    """A row per algorithm a compare trained (its output folder `compare_out`: compare.md,
    episodes.csv, and its runs' config.json where compare.md says its models are), after checking
    that it ran on the board's scenario and evaluation episodes, and that its baselines scored what
    the board's did (the same code)."""
    head = compare_header((compare_out / "compare.md").read_text())
    utility, first = compare_utilities(compare_out / "episodes.csv")
    if scenario_hash(ENV_ID, head["env_kwargs"]) != board["scenario_hash"]:
        raise ValueError(f"{compare_out} ran another scenario than the leaderboard's: {head['env_kwargs']}")
    if seed_range(first, len(utility["ogd"])) != board["eval_seeds"]:
        raise ValueError(f"{compare_out} was evaluated on other episodes than the leaderboard's {board['eval_seeds']}")
    for row in board["rows"]:
        if row["name"] in utility and not np.allclose(utility[row["name"]], row["utility"][0], rtol=1e-9, atol=0):
            raise ValueError(f"{compare_out}'s {row['name']} scored other utilities than the leaderboard's: "
                             "they were made by different code")
    rows = []
    for algo, steps in head["trained"].items():
        seeds = sorted(int(m.group(1)) for name in utility if (m := re.fullmatch(rf"{re.escape(algo)}_s(\d+)", name)))
        config = json.loads((head["root"] / f"{algo}_s{seeds[0]}" / "config.json").read_text())
        rows.append({"name": algo, "kind": "learned", "policy": f"{algo} ({len(seeds)} seeds)",
                     "about": f"learned by `{algo}` at its tuned settings ({config['hyperparams_file'] or f'agents/hyperparams/{algo}.yml'})",
                     "training_seeds": seeds, "training_steps": steps, "tuning_seeds": None,
                     "eval_seeds": board["eval_seeds"],
                     "settings": {"hyperparams": config["hyperparams"], "n_envs": config["n_envs"],
                                  "timesteps_asked": config["timesteps"], "command": head["command"]},
                     "utility": [utility[f"{algo}_s{s}"] for s in seeds]})
    return rows


COLUMNS = ("rank", "row", "kind", "policy", "training seeds", "training steps", "utility", "vs ogd",
           "vs pid_tuned", "vs hindsight", "score")


def ranked(rows: list[dict[str, Any]], rank: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """The rows by score, best first, each with its rank; bounds are unranked ("-"), and so is
    every row without `rank` (a submission scored on part of the episodes)."""
    place, out = 0, []
    for row in sorted(rows, key=lambda r: -r["stats"]["score"][0]):
        if row["kind"] != "bound":
            place += 1
        out.append(("-" if row["kind"] == "bound" or not rank else str(place), row))
    return out


def table(rows: list[dict[str, Any]], rank: bool = True) -> str:
    """A Markdown table of `rows` (`COLUMNS`), by score (ranked unless `rank` is false)."""
    def cell(stat: list[float | None]) -> str:
        return format_ci(stat[0], math.nan if stat[1] is None else stat[1])

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for place, r in ranked(rows, rank):
        seeds, steps = ",".join(map(str, r["training_seeds"])) or "-", r["training_steps"]
        steps = f"{steps:,}" if isinstance(steps, int) and steps else str(steps or "-")
        lines.append(f"| {place} | {r['name']} | {r['kind']} | {r['policy']} | {seeds} | {steps} | "
                     + " | ".join(cell(r["stats"][s]) for s in STATS) + " |")
    return "\n".join(lines)


def legend(rows: list[dict[str, Any]]) -> str:
    """What each row is and how to read the columns."""
    lines = [f"- `{r['name']}`: {r['about']}" for r in rows]
    lines += ["- `vs X`: the row's utility minus X's on the same evaluation episodes (paired), mean ± 95% CI;",
              f"- `score`: {SCORE}; a baseline's CI is over the evaluation episodes (delta method), a learned "
              "row's over its training seeds (each seed's mean one sample);",
              "- `kind`: a baseline needs no learning; a bound uses what no bidder could (the episode's kind, "
              "or the scored episode itself) and is not ranked; a learned row was trained by `compare`."]
    return "\n".join(lines)


def page(board: dict[str, Any]) -> str:
    """The board's Markdown page."""
    first, last = board["eval_seeds"]
    return (f"# Leaderboard: `{board['env_id']}` at its defaults\n\n"
            f"Generated from [leaderboard.json](leaderboard.json) by `{board['made_by']}` ({board['made']}). Scenario "
            f"`{board['scenario']}`: `{json.dumps(board['env_kwargs'])}`, scenario sha256 `{board['scenario_hash']}`; "
            f"simulator code sha256 `{board['code_hash']}` ({board['code_hash_covers']}). Tuned baselines were "
            f"chosen on seeds {board['tuning_seeds'][0]}..{board['tuning_seeds'][1]}; every row is scored on the "
            f"evaluation episodes, seeds {first}..{last}, which nothing is tuned or trained on.\n\n"
            f"{table(board['rows'])}\n\n{legend(board['rows'])}\n\n"
            "To score a policy of your own on the same episodes, see "
            "[How to submit](../pacing/pacing.md#how-to-submit).\n")


def verdict(row: dict[str, Any], full: bool) -> str:
    """A submitted row in words: its score and its paired differences, with 95% CIs over episodes."""
    def ci(stat: list[float | None]) -> str:
        return format_ci(stat[0], math.nan if stat[1] is None else stat[1])

    stats = row["stats"]
    pairs = "; ".join(f"{ref} {ci(stats[f'vs_{ref}'])}" for ref in REFERENCES)
    scope = "" if full else " (on part of the evaluation episodes: not comparable with the board's rows)"
    return (f"{row['name']}: score {ci(stats['score'])} (0 = {ZERO}, 1 = {ONE}); utility minus, on the same "
            f"episodes: {pairs} (95% CIs over episodes){scope}")

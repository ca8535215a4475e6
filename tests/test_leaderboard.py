"""The leaderboard (docs/leaderboard/leaderboard.json): its baseline rows re-scored on the running
code, its statistics from its stored utilities, the hashes it is tied to, and `radix-auction
leaderboard --submit` on a built-in policy and on a `module:Class`."""

from __future__ import annotations

import copy
import json
from importlib.machinery import EXTENSION_SUFFIXES

import numpy as np
import pytest

from agents.baselines import fixed_candidates
from agents.evaluation import evaluate
from agents.stats import format_ci, mean_ci
from auction_gym.pacing import make_policy
from auction_gym.scenarios import scenario
from experiments.cli import main
from experiments.commands import leaderboard_report as lb
from experiments.provenance import code_hash, scenario_hash

RESCORED = 2
"""Evaluation episodes the re-scoring test replays (each baseline's, and every constant's for the bounds)."""
REBUILD = "the board no longer matches the code: rebuild it (radix-auction leaderboard --build --learned COMPARE_OUT)"


@pytest.fixture(scope="module")
def board():
    return lb.load(lb.BOARD)


def utilities(policy, episodes: int, env_kwargs) -> np.ndarray:
    return np.array([r["utility"] for r in evaluate(policy, env_kwargs, episodes, progress=False)])


def test_the_baseline_rows_rescore(board):
    rows = {r["name"]: r for r in board["rows"]}
    kwargs = board["env_kwargs"]
    for name in ("ogd", "best_fixed", "truthful", "ogd_tuned", "pid_tuned"):
        played = utilities(make_policy(rows[name]["policy"]), RESCORED, kwargs)
        np.testing.assert_allclose(played, rows[name]["utility"][0][:RESCORED], rtol=1e-9, err_msg=REBUILD)
    grid = rows["hindsight"]["settings"]["chosen_among"]
    assert grid == list(fixed_candidates()) == rows["privileged"]["settings"]["chosen_among"]
    constants = np.array([utilities(make_policy(spec), RESCORED, kwargs) for spec in grid])
    np.testing.assert_allclose(constants.max(axis=0), rows["hindsight"]["utility"][0][:RESCORED], rtol=1e-9,
                               err_msg=REBUILD)
    for k, stored in enumerate(rows["privileged"]["utility"][0][:RESCORED]):
        assert np.isclose(constants[:, k], stored, rtol=1e-9).any(), REBUILD  # one of the constants


def test_the_board_covers_every_row_on_untuned_episodes(board):
    assert board["scenario"] == lb.SCENARIO and board["env_kwargs"] == scenario(lb.SCENARIO)
    assert [r["name"] for r in board["rows"] if r["kind"] != "learned"] == list(lb.BASELINES)
    assert board["eval_seeds"] == [1000, 1099] and board["tuning_seeds"] == [0, 35]
    for row in board["rows"]:
        assert row["eval_seeds"] == board["eval_seeds"]
        assert {"training_seeds", "training_steps", "settings", "policy"} <= set(row)
        assert all(len(u) == 100 for u in row["utility"])
        if row["kind"] == "learned":
            assert max(row["training_seeds"]) < board["eval_seeds"][0] and row["settings"]["hyperparams"]


def test_the_stored_statistics_follow_from_the_stored_utilities(board):
    recomputed = lb.with_stats(copy.deepcopy(board))
    for stored, again in zip(board["rows"], recomputed["rows"]):
        for stat in lb.STATS:
            np.testing.assert_allclose(np.array(stored["stats"][stat], dtype=float),
                                       np.array(again["stats"][stat], dtype=float), rtol=1e-12)
    score = {r["name"]: r["stats"]["score"] for r in board["rows"]}
    assert score[lb.ZERO] == [0.0, 0.0] and score[lb.ONE] == [1.0, 0.0]


def test_the_score_is_a_paired_ratio_with_a_delta_method_interval():
    zero, one = np.array([0.0, 1.0, 2.0, 3.0]), np.array([2.0, 3.0, 4.0, 5.0])
    assert lb.normalized(zero + 1.0, zero, one) == (0.5, 0.0)  # the same gain on every episode: no spread
    score, half = lb.normalized(np.array([1.0, 1.0, 3.0, 4.0]), zero, one)
    assert score == pytest.approx(0.375) and half > 0


def test_the_scenario_hash_changes_with_the_scenario_and_not_with_key_order():
    v2 = scenario("calibrated")
    assert scenario_hash("RadixAuction-v2", v2) == scenario_hash("RadixAuction-v2", dict(reversed(list(v2.items()))))
    assert scenario_hash("RadixAuction-v2", v2) != scenario_hash("RadixAuction-v2", scenario("calibrated_v1"))
    assert scenario_hash("RadixAuction-v2", v2) != scenario_hash("RadixAuction-v2", {**v2, "horizon": 201})
    assert scenario_hash("RadixAuction-v2", v2) != scenario_hash("RadixAuction-v1", v2)


def test_the_code_hash_changes_with_any_file_but_not_with_compiled_ones(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "b.jsonl").write_text("{}\n")
    before = code_hash(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "pkg" / f"_core{EXTENSION_SUFFIXES[0]}").write_bytes(b"\0")
    assert code_hash(tmp_path) == before
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert code_hash(tmp_path) != before
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "a.py").rename(tmp_path / "pkg" / "c.py")
    assert code_hash(tmp_path) != before


@pytest.fixture
def small_board(board, tmp_path):
    """The committed board cut to its first 4 episodes, with the running code's hashes (what the
    submit tests check is the command, not whether the board is current)."""
    small = {**copy.deepcopy(board), **lb.identity(board["env_kwargs"]), "eval_seeds": [1000, 1003]}
    for row in small["rows"]:
        row["utility"] = [u[:4] for u in row["utility"]]
    path = tmp_path / "leaderboard.json"
    lb.save(lb.with_stats(small), path)
    return path, small


def test_submit_scores_a_builtin_policy_paired_with_the_stored_rows(small_board, capsys):
    path, small = small_board
    main(["leaderboard", "--board", str(path), "--submit", "fixed:0.5"])
    out = capsys.readouterr().out
    expected = lb.row_stats([utilities(make_policy("fixed:0.5"), 4, small["env_kwargs"])], lb.references(small))
    row = next(line for line in out.splitlines() if line.startswith("| ") and "| fixed_0.5 | submitted |" in line)
    assert lb.table([{"name": "fixed_0.5", "kind": "submitted", "policy": "fixed:0.5", "training_seeds": [],
                      "training_steps": 0, "stats": expected}]).splitlines()[-1].split("|")[2:] == row.split("|")[2:]
    assert f"fixed_0.5: score {format_ci(*expected['score'])} (0 = ogd, 1 = hindsight)" in out
    assert len([line for line in out.splitlines() if line.startswith("| ")]) == len(small["rows"]) + 2


def test_submit_takes_an_importable_class(small_board, capsys):
    # a = 0 in the board's "residual" action plays the tuned PI pacer: paired with it, exactly 0.
    main(["leaderboard", "--board", str(small_board[0]), "--submit", "toy_extension:HoldThePIPacer",
          "--episodes", "2"])
    out = capsys.readouterr().out
    assert "action_type 'residual'" in out and "pid_tuned 0 ±" in out
    assert "(on part of the evaluation episodes: not comparable with the board's rows)" in out


@pytest.mark.parametrize("argv, message", [
    (["--submit", "fixed:0.5"], "code_hash"),
    (["--submit", "fixed:0.5", "--env-kwargs", '{"horizon": 10}'], "may set only"),
    (["--submit", "no_such_module:Pacer"], "cannot import"),
])
def test_submit_refuses_in_one_line(small_board, capsys, argv, message):
    path, small = small_board
    if message == "code_hash":
        path.write_text(json.dumps({**small, "code_hash": "0" * 64}))
    with pytest.raises(SystemExit) as exit_:
        main(["leaderboard", "--board", str(path), *argv])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert message != "code_hash" or out == ""  # a stale board is refused before anything is printed


def test_recompute_replays_a_stale_boards_baselines_on_this_code(board, tmp_path, capsys):
    small = {**copy.deepcopy(board), "code_hash": "0" * 64, "eval_seeds": [1000, 1001], "tuning_seeds": [0, 0]}
    for row in small["rows"]:
        row["utility"] = [u[:2] for u in row["utility"]]
    path = tmp_path / "leaderboard.json"
    path.write_text(json.dumps(small))
    main(["leaderboard", "--board", str(path), "--submit", "fixed:0.5", "--recompute", "--jobs", "1"])
    out = capsys.readouterr().out
    assert "STALE" in out and "replaying the baselines: tuning seeds 0..0, evaluation seeds 1000..1001" in out
    replayed = {line.split("|")[2].strip(): line.split("|")[7].strip() for line in out.splitlines()
                if line.startswith("| ") and "rank" not in line}
    # The same code replays the same utilities on these episodes: the ogd row's mean is the stored one.
    assert replayed["ogd"] == format_ci(*mean_ci(small["rows"][0]["utility"][0]))
    assert "fixed_0.5" in replayed and json.loads(path.read_text())["code_hash"] == "0" * 64  # the file is left as is

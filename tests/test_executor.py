"""`experiments.executor`: the tasks of reproduce, incentives and compare give the same results in
this process, in a process pool and on a local Ray; a task's error reaches the command as one line."""

from __future__ import annotations

import argparse
import csv
import os
import sys
import threading
import time

import numpy as np
import pytest

from experiments import executor as executor_module
from experiments.cli import main
from experiments.commands import incentives, reproduce, reproduce_trace
from experiments.commands.reproduce import Sweep, policies, run_sweep
from experiments.errors import TaskFailed
from experiments.executor import Executor
from experiments.sweeps import SweepGrid, load_sweep

AGENTIC = {**load_sweep("agentic").quick.kwargs, "duration": 5.0}
TINY = Sweep({"agentic": SweepGrid((15_000,), (1.0,), AGENTIC),
              "shared_prefix": SweepGrid((40_000,), (1.0,), {"num_groups": 8, "prompts_per_group": 8})})
FAILING = Sweep({"agentic": SweepGrid((15_000, 100), (1.0,), AGENTIC)})
"""The second task's KV capacity (100 tokens) is below every request: it fails."""
COMPARE_TINY = ["--algos", "ppo", "--timesteps", "64", "--seeds", "2", "--episodes", "2", "--tuning-episodes", "2",
                "--eval-freq", "64", "--no-progress", "--hyperparams", "n_steps=32", "batch_size=32", "n_epochs=1",
                "--env-kwargs", '{"horizon": 30}']


def _square(x: int) -> int:
    time.sleep(0.05 * (6 - x))  # later tasks finish first
    return x * x


def _fails_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"task {x} cannot run")
    return x


@pytest.mark.parametrize("jobs", [1, 2])
def test_results_come_in_task_order_and_each_is_reported_once(jobs):
    seen = []
    results = Executor(jobs).map(_square, [(x,) for x in range(6)], lambda i, r: seen.append((i, r)))
    assert results == [x * x for x in range(6)]
    assert sorted(seen) == [(x, x * x) for x in range(6)]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_tasks_error_is_raised_as_the_task_raised_it(jobs):
    with pytest.raises(ValueError, match="^task 3 cannot run$"):
        Executor(jobs).map(_fails_on_three, [(x,) for x in range(5)])


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_tasks_error_is_raised_as_the_task_raised_it_in_a_session(jobs):
    with Executor(jobs).session() as session, pytest.raises(ValueError, match="^task 3 cannot run$"):
        session.map(_fails_on_three, [(x,) for x in range(5)])


_MARKED: list[int] = []
"""Appended to in the test's process after this module was imported: a forked worker sees it, a
spawned one (which imports the module afresh) does not."""


def _pid_and_marks(_: int) -> tuple[int, int]:
    time.sleep(0.05)  # long enough that both workers take a task
    return os.getpid(), len(_MARKED)


@pytest.mark.parametrize("fork", [False, True])
def test_a_sessions_maps_share_its_workers_which_fork_only_when_asked(fork, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "_MARKED", [1])
    # Safe to fork, as in a command's process; an earlier test may have left a thread (a progress bar's) here.
    monkeypatch.setattr(executor_module, "_forks", lambda: True)
    with Executor(2).session(fork=fork) as session:
        first, second = (session.map(_pid_and_marks, [(k,) for k in range(4)]) for _ in range(2))
    pids = {pid for pid, _ in first}
    assert len(pids) == 2 and {pid for pid, _ in second} == pids and os.getpid() not in pids
    assert {marks for _, marks in first + second} == {1 if fork else 0}


def test_a_session_spawns_its_workers_while_another_thread_runs():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        _MARKED.append(1)
        with Executor(2).session(fork=True) as session:
            assert {marks for _, marks in session.map(_pid_and_marks, [(0,), (1,)])} == {0}
    finally:
        _MARKED.clear()
        stop.set()
        other.join()


def test_a_session_in_this_process_or_on_ray_is_the_executor_itself():
    for executor in (Executor(1), Executor(2, "local")):
        with executor.session(fork=True) as session:
            assert session is executor


def test_where_says_how_the_tasks_run():
    assert Executor(1).where() == "this process" and Executor(1).inline
    assert Executor(2).where() == "2 processes" and not Executor(2).inline
    assert Executor(2, "local").where() == "a local Ray with 2 CPUs" and not Executor(1, "local").inline
    assert Executor(2, "auto").where() == "the Ray cluster at auto"


def _reproduce_refused(address, monkeypatch, tmp_path, capsys) -> str:
    """The error of `reproduce --quick --address address` on a tiny sweep, which must exit with
    status 2 before the sweep's progress bar shows."""
    monkeypatch.setattr(reproduce, "sweep_of", lambda size: TINY)
    monkeypatch.setattr(reproduce_trace, "DEFAULT_TRACES", (tmp_path / "none.jsonl",))
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "--quick", "--address", address, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "%|" not in err, err
    return err


def test_address_without_ray_is_a_usage_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as when it is not installed
    assert 'error: --address needs Ray, the "rllib" extra' in _reproduce_refused("local", monkeypatch, tmp_path, capsys)


def test_an_address_ray_cannot_reach_is_refused_before_any_progress_bar(monkeypatch, tmp_path, capsys):
    pytest.importorskip("ray")
    from agents import ray_session

    def unreachable(address, num_cpus):  # Ray's refusal, whether or not this process holds a Ray session already
        raise ValueError(f"Invalid address format: {address}")

    monkeypatch.setattr(ray_session, "init_ray", unreachable)
    err = _reproduce_refused("nope", monkeypatch, tmp_path, capsys)
    assert "error: --address nope: cannot start or reach Ray" in err


def test_compare_budgets_and_explicit_sizes_win():
    from experiments.commands.compare import BUDGETS, SIZES, with_sizes  # here: a pool's workers import this module

    def sizes(budget="default", **given):
        args = argparse.Namespace(quick=given.pop("quick", False), budget=budget, **{k: given.get(k) for k in SIZES})
        return {k: getattr(with_sizes(args), k) for k in SIZES}

    assert sizes() == BUDGETS["default"] and sizes(quick=True) == BUDGETS["quick"]
    assert sizes("full") == BUDGETS["full"] and sizes("full", quick=True) == BUDGETS["quick"]
    assert sizes(quick=True, seeds=3) == {**BUDGETS["quick"], "seeds": 3}
    # Fewer evaluation episodes than the budget's curve takes: the curve takes them all.
    assert sizes(episodes=2)["curve_episodes"] == 2 and sizes(episodes=2, curve_episodes=1)["curve_episodes"] == 1
    assert all(BUDGETS["quick"][k] < BUDGETS["default"][k] for k in SIZES)
    assert all(BUDGETS["default"][k] <= BUDGETS["full"][k] for k in SIZES)


# ---------------------------------------------------------------- on a local Ray

@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    from agents.ray_session import init_ray

    started = not ray.is_initialized()
    init_ray(None, 2)
    yield Executor(2, "local")
    if started:
        ray.shutdown()


def _csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_reproduce_and_incentives_give_the_same_rows_on_ray(local_ray):
    rows = [run_sweep(TINY, 1, None, "tokens", progress=False, executor=e) for e in (Executor(2), local_ray)]
    assert len(rows[0]) == 2 * len(policies("tokens"))
    assert [repr(sorted(r.items())) for r in rows[0]] == [repr(sorted(r.items())) for r in rows[1]]
    todo = [("radix_vcg", "tokens", "off", 1.0), ("radix_vcg", "tokens", "on", incentives.OGD)]
    pool, ray = (incentives.measure(todo, [0, 1], 10, e) for e in (Executor(2), local_ray))
    assert all(np.array_equal(pool[t], ray[t]) for t in todo)


@pytest.mark.slow
def test_compare_gives_the_same_rows_on_ray(local_ray, tmp_path, capsys):
    for where, extra in (("pool", ["--jobs", "2"]), ("ray", ["--jobs", "2", "--address", "local"])):
        main(["compare", *COMPARE_TINY, *extra, "--logdir", str(tmp_path / where), "--out", str(tmp_path / where)])
    assert "training 2 runs of 64 steps asked on a local Ray with 2 CPUs" in capsys.readouterr().out
    for name in ("compare.csv", "episodes.csv", "headroom.csv"):
        assert _csv(tmp_path / "pool" / name) == _csv(tmp_path / "ray" / name)


@pytest.mark.slow
def test_a_failed_task_on_ray_is_one_line_and_keeps_the_finished_rows(local_ray, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reproduce, "sweep_of", lambda size: FAILING)
    monkeypatch.setattr(reproduce_trace, "DEFAULT_TRACES", (tmp_path / "none.jsonl",))
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "--quick", "--address", "local", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "ray::" not in err and "Traceback" not in err  # not Ray's remote traceback
    error = err.strip().splitlines()[-1]  # after the progress bar
    assert error.startswith("radix-auction reproduce: error: the agentic workload at 100 KV tokens (seed 0): ")
    assert {r["kv_capacity"] for r in _csv(tmp_path / "reproduce.csv")} == {"15000"}


@pytest.mark.slow
def test_a_task_ray_cannot_load_is_task_failed_naming_the_task(local_ray):
    """Ray's workers cannot import this test module (pytest put it on this process's path only), as
    a cluster's node without the project installed cannot import the commands' modules."""
    with pytest.raises(TaskFailed, match=r"^task _square\(7,\) could not be loaded on a local Ray with 2 CPUs "
                       r"\(ModuleNotFoundError: No module named 'test_executor'\): every node needs the project"):
        local_ray.map(_square, [(7,)])

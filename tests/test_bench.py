"""`radix-auction bench`: its choices are the registry's, every benchmark module is registered, and
`--quick` writes a page with where it came from, a table per section, and the hand-kept part."""

from __future__ import annotations

import multiprocessing
import os
import pkgutil
import re
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import experiments.bench
from auction_gym import core
from experiments.bench import BENCHES, Bench, Table, bench_names, get_bench, shards
from experiments.bench.env import uniform_plays
from experiments.cli import build_parser, main
from experiments.commands import bench as bench_command
from experiments.commands.bench_page import Page
from experiments.provenance import machine

ROOT = Path(__file__).resolve().parents[1]


def test_every_benchmark_module_is_registered_once_with_its_table_function():
    modules = {m.name for m in pkgutil.iter_modules(experiments.bench.__path__)}
    assert set(bench_names()) == modules and len(bench_names()) == len(BENCHES)
    for bench in BENCHES:
        assert bench.target == f"experiments.bench.{bench.name}:table"
        if not bench.missing():
            assert callable(bench.table_function())


def test_the_command_offers_the_registry_and_refuses_other_names(capsys):
    parser = build_parser("bench")
    sub = next(a for a in parser._actions if a.dest == "command").choices["bench"]
    help_text = next(a.help for a in sub._actions if a.dest == "benches")
    assert re.search(r"of (\S+) \(default", help_text).group(1).split(",") == list(bench_names())
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--quick", "--benches", "mechanism,nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown bench(es) nope; valid: env," in err
    with pytest.raises(ValueError, match="unknown bench 'nope'"):
        get_bench("nope")
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--quick", "--benches", "cores", "--commands", "markets,nope"])
    assert exit_.value.code == 2
    assert "--commands: unknown command(s) nope; valid: reproduce, markets, compare, tests" in capsys.readouterr().err


def test_quick_writes_the_page_with_its_provenance_tables_and_the_hand_kept_part(tmp_path, capsys):
    out = tmp_path / "docs" / "benchmarks.md"
    main(["bench", "--quick", "--benches", "mechanism,waiting", "--out", str(out)])
    page = out.read_text()
    assert f"Made by `radix-auction bench --benches mechanism,waiting --quick --out {out}` on " in page
    assert f"UTC, on {machine()}." in page
    sections = re.findall(r"^## (.+)$", page, re.MULTILINE)
    assert sections == [get_bench("mechanism").title, get_bench("waiting").title, "Measured by hand"]
    assert re.search(r"^\| 300 \| unit \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", page, re.MULTILINE)
    assert "Re-run this section: `radix-auction bench --benches waiting --quick`" in page
    assert bench_command.BY_HAND.read_text().strip() in page
    assert f"wrote {out}" in capsys.readouterr().out


def test_a_bench_whose_dependency_is_missing_is_a_line_saying_so():
    absent = Bench("absent", "Absent", "Nothing.", "experiments.bench.absent:table", requires=("no_such_module_here",))
    text = bench_command.section(absent, quick=True)
    assert "Skipped: needs `no_such_module_here`, which is not installed." in text and "|" not in text


def test_a_table_is_markdown_with_its_notes_under_it():
    text = Table(("a", "b"), [("1", "2")], ["a note"]).markdown()
    assert text == "| a | b |\n|---|---|\n| 1 | 2 |\n\n- a note"


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_the_busy_process_ends_with_the_benchmark():
    """bench.threads' busy process stops when the process that started it is gone (a benchmark
    killed mid-run must leave no spinning orphan)."""
    starter = ("import subprocess, sys\nfrom experiments.bench.threads import busy_loop\n"
               "print(subprocess.Popen([sys.executable, '-c', busy_loop()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)")
    pid = int(subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, check=True,
                             cwd=ROOT).stdout)
    deadline = time.monotonic() + 30
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid)


def test_the_queue_bench_reads_the_queues_of_the_episodes_one_env_plays():
    """The batch's and the runs' mean queues per quarter are those of the same episodes played by
    one env after another, so the three ways' times are of the same work; the quarters are the
    first and last, and a run stops at a quarter's end."""
    from experiments.bench import queue

    n, rounds, rate = 2, 8, 40.0
    first, last = queue.measure(n, rounds, rate, repeats=1, run=3)
    assert (first.rounds, last.rounds) == (range(0, 2), range(6, 8))
    assert min(first.one_env, first.batch, first.in_runs, last.one_env, last.batch, last.in_runs) > 0
    plays, env, waited = queue.random_plays(n, rounds, rate), queue.make_env(rate), np.zeros(4)
    for i in range(n):
        env.reset(seed=i)
        for t in range(rounds):
            waited[t // 2] += len(env.unwrapped.market.engine.waiting)
            env.step(plays[t, i])
    assert (first.queue, last.queue) == (waited[0] / (2 * n), waited[3] / (2 * n))
    assert last.queue > 0
    for run in (1, 3, 8):
        assert queue.in_runs(n, rounds, rate, plays, run)[1].tolist() == waited.tolist()


def test_the_misses_bench_plays_the_same_episodes_both_ways_and_reads_callgrinds_totals_per_env_step():
    """Both ways end every market at the same round, clock and queue (the same work, in another
    order); the counts are a callgrind output's totals over the env steps, refused without the
    cache simulation's events."""
    from experiments.bench import misses

    one, batch = (misses._play(way, 3, 2, 4, 40.0) for way in misses.WAYS)
    assert one == batch and len(one) == 3
    assert all(r > 0 and now > 0 for r, now, _ in one)
    output = "version: 1\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\nfl=x\n0 1\ntotals: 1000 9 9 9 30 10 9 6 2\n"
    assert misses.per_env_step(output, 4) == misses.Counts(250.0, 10.0, 2.0)
    with pytest.raises(RuntimeError, match="not the cache simulation's misses"):
        misses.per_env_step("events: Ir\ntotals: 1000\n", 4)
    for wrong in (["--warm", "190", "--rounds", "20"], ["--envs", "0"], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as stop:
            misses.main(wrong)
        assert stop.value.code == 2


@pytest.fixture
def fake_tables(monkeypatch):
    """Every bench's table made at once, naming its bench and the run's label (`runs[-1]`), each
    run counted in `runs`: the page's bookkeeping without the benches' minutes."""
    runs = ["first"]

    def table_function(bench):
        def table(quick, **more):
            runs.append(runs[-1])
            return Table(("bench", "run"), [(bench.name, runs[-1])])
        return table

    monkeypatch.setattr(Bench, "table_function", table_function)
    return runs


def sections_of(page: str) -> dict[str, str]:
    return {part.splitlines()[0]: part for part in re.split(r"^(?=## )", page, flags=re.MULTILINE)[1:]}


def test_update_replaces_the_sections_run_keeps_the_others_and_names_what_it_regenerated(tmp_path, fake_tables):
    out = tmp_path / "benchmarks.md"
    main(["bench", "--benches", "env,waiting,mechanism", "--out", str(out)])
    before = out.read_text()
    assert Page.read(before).with_sections({}, [b.title for b in BENCHES], "", bench_command.hand_kept()) == before
    fake_tables.append("second")
    main(["bench", "--benches", "waiting", "--update", "--out", str(out)])
    after = out.read_text()
    old, new = sections_of(before), sections_of(after)
    assert list(new) == list(old)  # the same sections in the same order, the hand-kept part last
    waiting = f"## {get_bench('waiting').title}"
    assert [h for h in new if new[h] != old[h]] == [waiting]
    assert "| waiting | second |" in new[waiting] and "| waiting | first |" in old[waiting]
    made = re.search(r"^Made by `radix-auction bench --benches env,waiting,mechanism --out .*$", after, re.MULTILINE)
    assert made and made.group(0) in before  # the page's own line is kept
    listed = re.findall(r'^- "(.+)": regenerated alone\. Made by `(.+?)` on ', after, re.MULTILINE)
    assert listed == [(get_bench("waiting").title, f"radix-auction bench --benches waiting --out {out} --update")]
    assert after.index("Sections regenerated alone since:") < after.index(bench_command.INTRO)
    # Again, and another: one line per section regenerated, in the page's order.
    fake_tables.append("third")
    main(["bench", "--benches", "mechanism,waiting", "--update", "--out", str(out)])
    again = out.read_text()
    listed = re.findall(r'^- "(.+)": regenerated alone\. ', again, re.MULTILINE)
    assert listed == [get_bench("waiting").title, get_bench("mechanism").title]
    assert again.count("Sections regenerated alone since:") == 1 and again.count("\n\n\n") == 0
    assert sections_of(again)[f"## {get_bench('env').title}"] == old[f"## {get_bench('env').title}"]


def test_a_page_that_a_run_would_shorten_is_refused_before_any_bench_runs(tmp_path, fake_tables, capsys):
    out = tmp_path / "benchmarks.md"
    main(["bench", "--benches", "env,waiting", "--out", str(out)])
    before, runs = out.read_text(), len(fake_tables)
    for argv, message in [
        (["--benches", "waiting", "--out", str(out)], "holds the sections of env, which this run would drop"),
        (["--benches", "waiting", "--update", "--quick", "--out", str(out)],
         "was made without --quick; regenerate the whole page"),
        (["--benches", "waiting", "--update", "--out", str(tmp_path / "none.md")], "--update needs --out"),
        (["--benches", "waiting", "--update"], "--update needs --out"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main(["bench", *argv])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert out.read_text() == before and len(fake_tables) == runs
    main(["bench", "--benches", "env,waiting", "--out", str(out)])  # the same sections: a whole new page


@pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core is not built")
def test_the_sharded_batch_plays_each_slice_of_the_one_batchs_episodes(monkeypatch):
    """A batch of envs lo..lo+n-1 with their actions plays what those envs play inside the whole
    batch, so the two ways time the same episodes; a process that played others is refused."""
    plays = uniform_plays(gym.make(shards.TARGET_ENV).action_space, 6, 4, 0)
    _, whole = shards.play_batch(0, 4, plays, [(0, 2), (2, 4)])
    assert whole == [shards.play_batch(lo, 2, plays, [(0, 2)])[1][0] for lo in (0, 2)]
    assert whole[0] != whole[1]
    assert shards.sharded(4, 2, plays)[1] == whole
    got = shards.measure(4, 2, 6, 1)
    assert set(got) == {"python", "one", "spread"} and all(v > 0 for v in got.values())
    monkeypatch.setattr(shards, "sharded", lambda n, processes, plays: (1.0, ["other", "episodes"]))
    with pytest.raises(ValueError, match="the processes played other episodes than the one batch"):
        shards.measure(4, 2, 6, 1)
    with pytest.raises(ValueError, match="5 envs do not split evenly over 2 processes"):
        shards.measure(5, 2, 6, 1)


@pytest.mark.skipif(core.compiled_module() is None or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="the compiled core is not built, or processes are not forked here")
def test_a_sharded_process_that_fails_stops_the_bench_at_once(monkeypatch):
    """A process whose batch raises breaks the barrier and says so: the bench raises, not waits."""
    def broken(*args, **kwargs):
        raise RuntimeError("a broken batch")
    monkeypatch.setattr(shards, "play_batch", broken)  # the forked processes inherit it
    monkeypatch.setattr(shards, "WAIT", 60)
    plays = uniform_plays(gym.make(shards.TARGET_ENV).action_space, 2, 4, 0)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="a process of the sharded batch failed or took over 60 s"):
        shards.sharded(4, 2, plays)
    assert time.perf_counter() - start < 30

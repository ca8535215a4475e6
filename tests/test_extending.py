"""A newcomer's mechanisms, workload and router: their own file (`toy_extension.py`) and one
registry entry each, nothing else, and they run through the env (the auction charged, the
workload's arguments honoured), through `reproduce --quick`'s code path and through `radix-auction
cluster`. The entries are removed after each test."""

from __future__ import annotations

import csv
import math
import re
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import toy_extension

import auction_gym  # noqa: F401  (registers RadixAuction-v0)
from auction_gym import registry
from auction_gym.cluster import routers
from auction_gym.registry import MechanismEntry, register_mechanism
from auction_gym.workload import WorkloadEntry, register_workload, workload_names
from auction_gym.workload import registry as workload_registry
from experiments import sweeps
from experiments.cli import main
from experiments.commands import cluster, reproduce_trace

# With 128-token replies, 200 requests/s saturates the engine (LPM serves about 55/s).
TOY_SWEEP = sweeps.LoadSweep(200.0, quick=sweeps.SweepGrid((20_000,), (0.5, 2.0), {"duration": 4.0, "output_len": 128}),
                             full=sweeps.SweepGrid((20_000,), (0.5, 1.0, 2.0), {"duration": 20.0, "output_len": 128}))


@pytest.fixture
def toys(monkeypatch):
    """The toy entries, on copies of the mechanism, workload and sweep registries that the test's
    end puts back, and the toy router, which it removes."""
    monkeypatch.setattr(registry, "_ENTRIES", dict(registry._ENTRIES))
    monkeypatch.setattr(workload_registry, "_ENTRIES", dict(workload_registry._ENTRIES))
    monkeypatch.setattr(sweeps, "_ENTRIES", dict(sweeps._ENTRIES))
    register_mechanism(MechanismEntry("toy_lcfs", "toy_extension:LastComeFirstServed", "last come, first served"))
    register_mechanism(MechanismEntry("toy_auction", "toy_extension:ToyAuction", "strict priority; VCG payments"))
    register_workload(WorkloadEntry("toy_chat", "toy_extension:toy_chat", "chat requests behind per-bidder prompts",
                                    open_ended=True))
    sweeps.register_sweeps(sweeps.WorkloadSweeps("toy_chat", TOY_SWEEP,
                                                 sweeps.ReplicaScale(20.0, "num_requests", kwargs={"output_len": 16})))
    routers.register_router(toy_extension.BidderAffinity)  # into the one dict every module imported
    yield
    del routers.ROUTERS[toy_extension.BidderAffinity.name]


def _episode(steps: int = 60, **env_kwargs) -> dict[str, float]:
    """Revenue, requests admitted and their mean hit rate over `steps` rounds of one episode."""
    env = gym.make("RadixAuction-v0", horizon=steps, **env_kwargs)
    env.reset(seed=0)
    revenue = admitted = hits = 0.0
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(np.zeros(1, dtype=np.float32))
        revenue += info["revenue"]
        admitted += info["admitted"]
        hits += info["hit_rate"] * info["admitted"]
        if terminated or truncated:
            break
    env.close()
    return {"revenue": revenue, "admitted": admitted, "hit_rate": hits / admitted}


def test_the_toy_mechanisms_run_in_the_env_and_only_the_auction_charges(toys):
    assert "toy_lcfs" in auction_gym.scheduler_names()
    assert set(registry.auction_names()) == {"strict_vcg", "radix_vcg", "toy_auction"}
    assert _episode(mechanism="toy_lcfs")["revenue"] == 0.0
    assert _episode(mechanism="toy_auction")["revenue"] > 0.0  # charged with no other edit: an AuctionMechanism


def test_the_toy_auction_decides_each_round_and_the_market_charges_from_it(toys):
    """The engine asks the toy auction to `decide` with the market's multipliers and hands the
    round back on the report; the charges come from that round."""
    from auction_gym.market import Market, MarketConfig

    market = Market(MarketConfig(mechanism="toy_auction", horizon=40))
    market.reset(seed=0)
    multipliers, rounds = [0.5, 1.0, 1.5, 2.0], 0
    while not market.done:
        report = market.step(multipliers)
        decided = report.decision
        assert isinstance(decided.pricing, toy_extension.ToyAuction)
        assert decided.bids == [multipliers[r.bidder] * r.urgency for r in decided.requests]
        assert set(report.admitted) <= {r.id for r in decided.requests}
        rounds += report.payments.any()
    assert rounds > 0


def test_the_toy_workload_runs_in_the_env_with_its_arguments(toys):
    shared = _episode(workload="toy_chat", workload_kwargs={"rate": 20.0})
    alone = _episode(workload="toy_chat", workload_kwargs={"rate": 20.0, "prefix_len": 0})
    assert shared["admitted"] >= 60 and alone["admitted"] >= 60  # a round ends when a request is admitted
    # 512 of each prompt's 544 tokens are its bidder's prompt, cached after the first request; with
    # no shared prompt nothing is (32 random tokens).
    assert shared["hit_rate"] > 0.8 and alone["hit_rate"] < 0.05


def test_unknown_names_and_arguments_list_the_registered_ones(toys):
    with pytest.raises(ValueError, match="valid: fcfs, .*toy_lcfs, toy_auction"):
        gym.make("RadixAuction-v0", mechanism="toy_missing")
    with pytest.raises(ValueError, match="valid: agentic, shared_prefix, mooncake, toy_chat"):
        gym.make("RadixAuction-v0", workload="toy_missing")
    with pytest.raises(ValueError, match=r"unknown workload_kwargs \['prefix'\] .*known: .*'prefix_len'"):
        gym.make("RadixAuction-v0", workload="toy_chat", workload_kwargs={"prefix": 8})


def test_the_toys_run_through_reproduce_quick(toys, tmp_path, monkeypatch, capsys):
    # Only the toy workload, so the sweep is small: its quick grid is 1 KV size x 2 loads.
    monkeypatch.setattr(workload_registry, "_ENTRIES", {"toy_chat": workload_registry._ENTRIES["toy_chat"]})
    monkeypatch.setattr(reproduce_trace, "DEFAULT_TRACES", (tmp_path / "none.jsonl",))
    main(["reproduce", "--quick", "--every-mechanism", "--seeds", "1", "--jobs", "1", "--out", str(tmp_path)])
    with (tmp_path / "reproduce.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {(r["workload"], r["kv_capacity"], r["load"]) for r in rows} == {("toy_chat", "20000", "0.5"),
                                                                           ("toy_chat", "20000", "2.0")}
    by = {(r["policy"], r["load"]): r for r in rows}
    assert {"toy_lcfs", "toy_auction"} <= {policy for policy, _ in by}
    for load in ("0.5", "2.0"):
        # The toy auction is strict priority under another name: every figure is strict_vcg's.
        same = {k: v for k, v in by["strict_vcg", load].items() if k != "policy"}
        assert {k: v for k, v in by["toy_auction", load].items() if k != "policy"} == same
    # Overloaded (twice what LPM sustains), the newest-first order makes other requests wait than FCFS.
    assert by["toy_lcfs", "2.0"]["mean_latency"] != by["fcfs", "2.0"]["mean_latency"]
    assert all(math.isfinite(float(r["mean_latency"])) and float(r["hit_rate"]) > 0.5 for r in rows)
    assert "toy_chat" in (tmp_path / "reproduce.md").read_text()


def test_the_toys_run_through_demo(toys, capsys):
    main(["demo", "--workload", "toy_chat", "--rate", "20", "--duration", "3", "--workload-kwargs",
          '{"prefix_len": 64}', "--schedulers", "fcfs,toy_lcfs"])
    out = capsys.readouterr().out
    # The demo passes the options the workload takes (rate, duration), then --workload-kwargs.
    assert "toy_chat workload: " in out and "rate=20.0, duration=3.0, prefix_len=64" in out
    loaded = int(out.split("requests: ")[1].split()[0])
    assert 40 <= loaded <= 80  # about 20/s for 3 s
    assert {line.split()[0] for line in out.splitlines()[-2:]} == {"fcfs", "toy_lcfs"}


def test_the_toys_run_through_the_cluster_command(toys, tmp_path, capsys):
    main(["cluster", "--workloads", "toy_chat", "--routers", "round_robin,toy_affinity", "--policies", "lpm",
          "--replicas", "4", "--loads", "1", "--size", "40", "--out", str(tmp_path)])
    with (tmp_path / "cluster.csv").open() as f:
        rows = {r["router"]: r for r in csv.DictReader(f) if r["workload"] == "toy_chat"}
    assert set(rows) == {"round_robin", "toy_affinity"}
    assert all(int(r["requests"]) == 4 * 40 for r in rows.values())  # the size argument, scaled by replicas
    # Each bidder's 512-token prompt computed on one replica instead of on all four.
    assert float(rows["toy_affinity"]["hit_rate"]) > float(rows["round_robin"]["hit_rate"])
    assert "toy_affinity" in capsys.readouterr().out
    with pytest.raises(ValueError, match="valid: .*toy_chat"):
        cluster.scenario("toy_missing", "lpm", "round_robin", 2, 1.0, 10, tmp_path)


def test_a_router_without_route_or_under_a_taken_name_fails_at_registration(toys):
    with pytest.raises(ValueError, match="already registered"):
        routers.register_router(toy_extension.BidderAffinity)
    with pytest.raises(ValueError, match="no route"):
        routers.register_router(type("NoRoute", (), {"name": "toy_none"}))
    assert "toy_none" not in routers.ROUTERS


def test_an_entry_naming_an_argument_its_stream_lacks_fails_at_registration(toys):
    with pytest.raises(ValueError, match="already registered"):
        register_workload(WorkloadEntry("toy_chat", "toy_extension:toy_chat", "again"))
    with pytest.raises(ValueError, match=r"does not take \['prefix'\]"):
        register_workload(WorkloadEntry("toy_typo", "toy_extension:toy_chat", "typo", defaults={"prefix": 8}))
    with pytest.raises(ValueError, match=r"does not take \['time_scale'\]"):
        register_workload(WorkloadEntry("toy_level", "toy_extension:toy_chat", "no such intensity",
                                        intensity="time_scale"))
    assert "toy_typo" not in workload_names() and "toy_level" not in workload_names()


def test_sweeps_naming_an_argument_the_workload_lacks_fail_at_registration(toys):
    with pytest.raises(ValueError, match="already has sweeps"):
        sweeps.register_sweeps(sweeps.WorkloadSweeps("toy_chat", TOY_SWEEP))
    with pytest.raises(ValueError, match="unknown workload 'toy_missing'"):
        sweeps.register_sweeps(sweeps.WorkloadSweeps("toy_missing", TOY_SWEEP))
    register_workload(WorkloadEntry("toy_bare", "toy_extension:toy_chat", "no sweeps", open_ended=True))
    with pytest.raises(ValueError, match=r"name \['groups'\], which it does not take"):
        sweeps.register_sweeps(sweeps.WorkloadSweeps("toy_bare", replicas=sweeps.ReplicaScale(1.0, "groups")))
    assert sweeps.load_sweep("toy_bare") is None and "toy_bare" not in sweeps.replica_scaled()


def test_the_toys_leave_no_entry_behind():
    assert "toy_chat" not in workload_names() and "toy_lcfs" not in registry.mechanism_names()
    assert "toy_affinity" not in routers.ROUTERS


def _page_examples() -> list[str]:
    page = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    return re.findall(r"^```python\n(.*?)^```$", page, re.MULTILINE | re.DOTALL)


def test_the_extending_page_has_an_example_per_extension_point_but_the_feature():
    assert len(_page_examples()) == 6


def test_the_feature_checklist_names_every_table_of_the_features_in_the_market():
    """A new feature goes in every tuple of `Obs` members the market package writes by position."""
    root = Path(__file__).resolve().parents[1]
    section = (root / "docs" / "extending.md").read_text().split("### 7.7")[1]
    tables = {m for path in (root / "auction_gym" / "market").glob("*.py")
              for m in re.findall(r"^(\w+)(?:: [^=]+)? = \(Obs\.", path.read_text(), re.MULTILINE)}
    assert "_ROW" in tables
    assert [name for name in sorted(tables) if f"`{name}`" not in section] == []


@pytest.mark.parametrize("index", range(6))
def test_every_example_of_the_extending_page_runs(index, monkeypatch):
    """Each checklist's example, as written, on copies of the registries it adds to."""
    from agents import learners
    from auction_gym import pacing
    from auction_gym.engine import rules

    monkeypatch.setattr(registry, "_ENTRIES", dict(registry._ENTRIES))
    monkeypatch.setattr(workload_registry, "_ENTRIES", dict(workload_registry._ENTRIES))
    in_place = [pacing.POLICIES, learners.LEARNERS, routers.ROUTERS, rules.RULES]  # modules hold these dicts by name
    before = [dict(table) for table in in_place]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # gymnasium's checker on a 5-round episode
            exec(compile(_page_examples()[index], f"extending.md example {index + 1}", "exec"), {})
    finally:
        for table, saved in zip(in_place, before):
            table.clear()
            table.update(saved)

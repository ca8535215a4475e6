"""One way to register: one "module:attr" resolver, the built-in policies from one registry, the
`train` command's options from `TrainConfig`'s fields, old names that warn once, and the commands'
choices read from the live registries (an entry registered at run time is accepted)."""

from __future__ import annotations

import dataclasses
import importlib
import re
import warnings
from pathlib import Path

import pytest

from agents.learners import LEARNERS, Learner, register_learner
from agents.sb3 import ALGOS, check_algo
from agents.training import TrainConfig
from auction_gym import pacing, registry
from auction_gym._deprecation import deprecated_aliases
from auction_gym.engine.rules import RULES, OracleRules
from auction_gym.market import MECHANISMS, WORKLOADS
from auction_gym.pacing import POLICIES, PolicyEntry, builtin_policy_names, make_policy, policy_spec, register_policy
from auction_gym.registry import MechanismEntry, register_mechanism, resolve
from auction_gym.workload import WorkloadEntry, register_workload
from auction_gym.workload import registry as workload_registry
from experiments import sweeps
from experiments.cli import build_parser, main
from experiments.commands import cluster, incentives, markets  # noqa: F401  (imported before any late entry)
from experiments.commands.train import config_of

REPO = Path(__file__).resolve().parents[1]


def test_one_resolver_of_module_attr_targets():
    """No module but the registry imports a "module:attr" string by hand."""
    def by_hand(text: str) -> bool:
        return "import_module(" in text and ('partition(":")' in text or 'split(":")' in text)

    copies = [str(p.relative_to(REPO)) for top in ("auction_gym", "agents", "experiments", "gpu_backend")
              for p in (REPO / top).rglob("*.py") if by_hand(p.read_text())]
    assert copies == ["auction_gym/registry.py"]
    assert resolve("auction_gym.pacing:OGDPacer") is pacing.OGDPacer
    assert resolve(pacing.OGDPacer) is pacing.OGDPacer


def test_a_target_is_imported_once(monkeypatch):
    """`make_scheduler` resolves its entry's class on every call: the import runs on the first only."""
    imported = []
    import_module = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name: imported.append(name) or import_module(name))
    first = resolve("colorsys:rgb_to_yiq")
    assert resolve("colorsys:rgb_to_yiq") is first and first.__name__ == "rgb_to_yiq"
    assert imported == ["colorsys"]


def test_every_builtin_name_builds_its_registered_class():
    for name, entry in POLICIES.items():
        for form in entry.forms():
            spec = form.replace("<x>", "0.1").replace("<y>", "0.2").replace("<alpha>", "0.5")
            assert isinstance(make_policy(spec), entry.policy_class()), spec
    assert builtin_policy_names()[:3] == ("ogd", "pid", "truthful")
    assert policy_spec("fixed", alpha=0.5) == "fixed:0.5"
    for bad in ("fixed", "truthful:1", "ogd:", "ogd:eta=1,eta=2", "pid:kp=1"):
        with pytest.raises(ValueError, match="unknown policy"):
            make_policy(bad)


def test_a_registered_pacer_is_named_everywhere_a_builtin_is(monkeypatch):
    monkeypatch.setattr(pacing, "POLICIES", dict(POLICIES))
    register_policy(PolicyEntry("half", "auction_gym.pacing:FixedMultiplier", ("alpha",), "alpha, given"))
    assert "half" in builtin_policy_names() and "half:alpha=<x>" in builtin_policy_names()
    assert make_policy("half:alpha=0.3").alpha == 0.3
    with pytest.raises(TypeError):  # the plain name takes the class's defaults, and alpha has none
        make_policy("half")
    for bad in (PolicyEntry("half", pacing.Truthful, (), "taken"), PolicyEntry("a:b", pacing.Truthful, (), "colon")):
        with pytest.raises(ValueError):
            register_policy(bad)


def test_a_deprecated_alias_warns_on_its_first_read_only():
    module_getattr = deprecated_aliases("somewhere", {"OLD": ("NEW", lambda: 42)})
    with pytest.warns(DeprecationWarning, match="somewhere.OLD is deprecated; use NEW"):
        assert module_getattr("OLD") == 42
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert module_getattr("OLD") == 42
    with pytest.raises(AttributeError, match="no attribute 'NEW'"):
        module_getattr("NEW")


@pytest.mark.parametrize("module, old, new", [
    (pacing, "BUILTIN_POLICIES", lambda: builtin_policy_names()),
    (pacing, "PLAIN_POLICIES", lambda: pacing.plain_policy_names()),
    (pacing, "PACER_PARAMETERS", lambda: {"ogd": ("eta",), "pid": ("kp", "ki")}),
    (pacing, "FIXED_PREFIX", lambda: "fixed:"),
    ("agents.learners", "load_object", lambda: resolve),
])
def test_an_old_name_keeps_working_and_warns_once(module, old, new):
    if isinstance(module, str):
        module = __import__(module, fromlist=["_"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = getattr(module, old), getattr(module, old)
    assert first == new() and second == new()
    # At most once: an earlier test may have read it first.
    assert len([w for w in caught if issubclass(w.category, DeprecationWarning)]) <= 1
    with pytest.raises(AttributeError):
        module.NO_SUCH_NAME  # noqa: B018


def test_the_train_command_has_an_option_per_config_field():
    parser = build_parser("train")
    options = {a.dest for a in parser._subparsers._group_actions[0].choices["train"]._actions}
    assert {f.name for f in dataclasses.fields(TrainConfig)} <= options  # env_kwargs: --scenario, --env-kwargs
    config = config_of(parser.parse_args(["train"]))
    assert config == TrainConfig()  # the command's defaults are the config's
    given = config_of(parser.parse_args(["train", "--algo", "sac", "--no-progress", "--overwrite",
                                         "--hyperparams", "gamma=0.9", "--eval-episodes", "2"]))
    assert (given.algo, given.progress, given.overwrite, given.hyperparams, given.eval_episodes) == \
        ("sac", False, True, {"gamma": 0.9}, 2)


ENV_KEYWORDS = {
    "num_bidders", "mechanism", "cost_model", "request_overhead", "tie_break", "workload", "trace_path",
    "workload_kwargs", "backend", "engine_kwargs", "backend_kwargs", "replicas", "router", "router_kwargs", "budget",
    "budget_per_round", "horizon", "episode_draws", "other_bidders", "focal_bidder", "alpha_max", "reward_scale",
    "render_mode", "action_type", "reward", "delta_bound", "delta_start", "residual_base", "residual_scale",
    "reference_policy"}
"""The keywords RadixAuction-v0, -v1 and -v2 take: fixed per version."""


def test_the_env_takes_its_keywords_grouped_and_its_docstring_lists_them():
    from auction_gym import RadixAuctionEnv
    from auction_gym.envs.common import valid_keywords

    assert set(valid_keywords(RadixAuctionEnv)) == ENV_KEYWORDS
    doc = RadixAuctionEnv.__doc__ or ""
    table = doc.split("## Arguments")[1].split("\n\n")[1]
    assert set(re.findall(r"^\s*\| (\w+)\s+\|", table, re.MULTILINE)) - {"argument"} == ENV_KEYWORDS
    with pytest.raises(TypeError, match="did you mean 'reward_scale'"):
        RadixAuctionEnv(reward_scal=1.0)


def test_the_parallel_env_takes_the_action_and_every_market_argument():
    from auction_gym import MarketConfig, RadixAuctionParallelEnv
    from auction_gym.envs.common import valid_keywords

    market = [f.name for f in dataclasses.fields(MarketConfig)]
    assert valid_keywords(RadixAuctionParallelEnv) == [
        "reward_scale", "render_mode", "action_type", "delta_bound", "delta_start", "residual_base", "residual_scale",
        *market]
    env = RadixAuctionParallelEnv(action_type="log", warmup=1.0, router_kwargs=None, horizon=5)
    assert env.action_type == "log" and env.config.warmup == 1.0 and env.config.tie_break == "request_id"


class _Swept(Exception):
    """Raised by a stubbed sweep: the command got past its checks."""


def test_a_mechanism_registered_at_run_time_is_a_choice_of_every_command(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "_ENTRIES", dict(registry._ENTRIES))
    monkeypatch.setattr(workload_registry, "_ENTRIES", dict(workload_registry._ENTRIES))
    monkeypatch.setattr(sweeps, "_ENTRIES", dict(sweeps._ENTRIES))
    register_mechanism(MechanismEntry("late_fcfs", "auction_gym.scheduler.fcfs:FCFS", "FCFS, registered late"))
    register_mechanism(MechanismEntry("late_vcg", "auction_gym.mechanism.strict_priority:StrictPriorityAuction",
                                      "strict priority, registered late; VCG payments"))
    register_workload(WorkloadEntry("late_chat", "toy_extension:toy_chat", "chat, registered late", open_ended=True))
    sweeps.register_sweeps(sweeps.WorkloadSweeps("late_chat", None, sweeps.ReplicaScale(20.0, "num_requests")))
    assert MECHANISMS[-2:] == ("late_fcfs", "late_vcg") and "late_chat" in WORKLOADS
    args = build_parser("cluster").parse_args(["cluster", "--quick", "--policies", "late_fcfs,late_vcg"])
    assert cluster._grid(args)["policies"] == ["late_fcfs", "late_vcg"]
    swept = {}

    def sweep(grid, designs, executor):
        swept.update(grid, designs=designs)
        raise _Swept

    monkeypatch.setattr(markets, "sweep", sweep)
    with pytest.raises(_Swept):
        main(["markets", "--designs", "late_fcfs,lpm", "--workloads", "late_chat", "--out", str(tmp_path)])
    assert swept["designs"] == ["late_fcfs", "lpm"] and swept["workloads"] == ["late_chat"]
    args = build_parser("incentives").parse_args(["incentives", "--mechanisms", "late_vcg"])
    assert args.mechanisms == ["late_vcg"]
    with pytest.raises(SystemExit):  # an auction's name only: the late FCFS charges nothing
        build_parser("incentives").parse_args(["incentives", "--mechanisms", "late_fcfs"])


def test_a_learner_registered_at_run_time_is_a_valid_algo():
    saved = dict(LEARNERS)  # held by name in several modules: changed in place, put back after
    try:
        register_learner(Learner("ppo_late", "sb3", "stable_baselines3:PPO", "PPO, registered late"))
        register_learner(Learner("cmaes_late", "search", "agents.policy_search:SearchPolicy", "CMA-ES, late"))
        assert check_algo("ppo_late") is ALGOS["ppo"] and "ppo_late" in list(ALGOS)
        assert "cmaes_late" not in ALGOS and len(ALGOS) == sum(e.family == "sb3" for e in LEARNERS.values())
        assert build_parser("train").parse_args(["train", "--algo", "ppo_late"]).algo == "ppo_late"
        for bad in (Learner("ppo", "sb3", "stable_baselines3:PPO", "taken"),
                    Learner("a,b", "sb3", "stable_baselines3:PPO", "comma"),
                    Learner("evo", "evolution", "agents.policy_search:SearchPolicy", "no trainer")):
            with pytest.raises(ValueError):
                register_learner(bad)
    finally:
        LEARNERS.clear()
        LEARNERS.update(saved)


def test_fidelity_reservations_are_the_engine_rules_registered():
    parser = build_parser("fidelity")
    sub = parser._subparsers._group_actions[0].choices["fidelity"]
    assert next(a for a in sub._actions if a.dest == "reservation").choices.keys() == RULES.keys()
    RULES["late_oracle"] = OracleRules
    try:
        assert parser.parse_args(["fidelity", "--reservation", "late_oracle"]).reservation == "late_oracle"
    finally:
        del RULES["late_oracle"]

"""One way to register: one "module:attr" resolver, the built-in policies from one registry, the
`train` command's options from `TrainConfig`'s fields, and old names that warn once."""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path

import pytest

from agents.training import TrainConfig
from auction_gym import pacing
from auction_gym._deprecation import deprecated_aliases
from auction_gym.pacing import POLICIES, PolicyEntry, builtin_policy_names, make_policy, policy_spec, register_policy
from auction_gym.registry import resolve
from experiments.cli import build_parser
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

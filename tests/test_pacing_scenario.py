"""The calibrated pacing scenario (RadixAuction-v1's defaults): its load curve, per-episode draws, the "service" cost
model, the log action, the PI pacer, the "cost" reward, and the headroom report's estimators."""

from __future__ import annotations

import math
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

import auction_gym  # noqa: F401  (registers RadixAuction-v0)
from agents.evaluation import rollout
from auction_gym.action import LOG_ALPHA_MIN, log_to_action, log_to_multiplier, parse_action
from auction_gym.envs import RadixAuctionEnv
from auction_gym.market import Market, MarketConfig, Obs
from auction_gym.pacing import PIDPacer, Truthful, focal_policy
from auction_gym.scenarios import SCENARIOS, scenario
from auction_gym.workload import AgenticConfig, iter_agentic
from auction_gym.workload.agentic import wave_shape
from experiments.commands.headroom_report import Row, episode_kinds, gaps, report_rows

CALIBRATED = scenario("calibrated")
CALIBRATED_MARKET = RadixAuctionEnv(**CALIBRATED).config


def test_wave_shape_is_the_documented_curve_with_mean_one():
    cfg = AgenticConfig(wave_amplitude=0.5, wave_period=12.0, wave_offset=10.0)
    assert wave_shape(10.0, cfg) == pytest.approx(0.5)  # the trough at the offset
    assert wave_shape(16.0, cfg) == pytest.approx(1.5)  # the peak half a period later
    t = np.linspace(0, 12, 1200, endpoint=False)
    assert wave_shape(t, cfg).mean() == pytest.approx(1.0)


def test_wave_moves_arrivals_to_the_peak():
    # Single-call episodes, so arrivals are episode starts (a session's later turns follow think times).
    cfg = AgenticConfig(num_bidders=4, rate=30.0, duration=240.0, wave_amplitude=0.6, wave_period=24.0,
                        shape_mix={"urgent": 1.0})
    arrivals = np.array([r.arrival for r in iter_agentic(cfg, seed=3)])
    phase = np.mod(arrivals, 24.0)
    peak = np.sum((phase > 6) & (phase < 18))  # the half around the peak at 12 s
    assert peak / (len(arrivals) - peak) > 2.0  # expected ratio (1 + 2A/pi) / (1 - 2A/pi) = 2.2


@pytest.mark.parametrize("bad", [{"wave_amplitude": 1.0}, {"wave_amplitude": -0.1}, {"wave_period": 0.0}])
def test_bad_wave_settings_are_refused(bad):
    with pytest.raises(ValueError, match="wave_"):
        AgenticConfig(**bad).validate()


def test_no_wave_draws_the_same_workload():
    plain = [(r.arrival, r.tokens.tobytes()) for r in iter_agentic(AgenticConfig(duration=20.0), seed=5)]
    zero = [(r.arrival, r.tokens.tobytes()) for r in iter_agentic(AgenticConfig(duration=20.0, wave_amplitude=0.0,
                                                                                wave_period=7.0), seed=5)]
    assert plain == zero


def test_service_cost_model_prices_a_running_slot():
    config = MarketConfig(cost_model="service")
    expected = 1.0 / config.served_rate() / 3.25e-5
    assert config.service_overhead() == pytest.approx(expected)
    auction = config.make_scheduler()
    assert auction.cost_model == "tokens" and auction.request_overhead == pytest.approx(expected)
    with pytest.raises(ValueError, match="cost_model"):
        MarketConfig(cost_model="slots")


def test_episode_draws_are_seeded_and_scale_budgets():
    config = CALIBRATED_MARKET
    draws = [config.draw_episode(s) for s in range(40)]
    assert draws[3] == config.draw_episode(3)
    assert {d["rate"] for d in draws} == {32.0, 40.0, 48.0}
    assert all(len(d["budget_scale"]) == 4 and set(d["budget_scale"]) <= {0.1, 1.0, 10.0} for d in draws)
    market = Market(config)
    market.reset(7)
    expected = [0.15 * 200 * s for s in config.draw_episode(7)["budget_scale"]]
    assert market.budget.tolist() == pytest.approx(expected)
    assert market.rho.tolist() == pytest.approx([b / 200 for b in expected])


@pytest.mark.parametrize("bad,match", [({"episode_draws": {"load": [1.0]}}, "unknown episode_draws"),
                                       ({"episode_draws": {"rate": []}}, "non-empty"),
                                       ({"episode_draws": {"budget_scale": [1.0, -2.0]}}, "> 0"),
                                       ({"episode_draws": {"rate": [10.0]}, "workload": "shared_prefix"}, "agentic")])
def test_bad_episode_draws_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        MarketConfig(**bad)


def test_headroom_kinds_are_the_env_draws():
    env = gym.make("RadixAuction-v0", **{**CALIBRATED, "focal_bidder": 2})
    kinds = episode_kinds({**CALIBRATED, "focal_bidder": 2}, range(12))
    for seed, kind in zip(range(12), kinds):
        _, info = env.reset(seed=seed)
        assert kind == (info["draws"]["rate"], info["draws"]["budget_scale"][2])  # the focal bidder's scale
    assert all(rate in (32.0, 40.0, 48.0) and scale in (0.1, 1.0, 10.0) for rate, scale in kinds)
    assert len(set(kinds)) > 1


@pytest.mark.parametrize("a", [-1.0, -0.6, -0.2, 0.0, 0.3, 1.0])
def test_log_action_round_trips(a):
    alpha = log_to_multiplier(a, 2.0)
    assert log_to_action(alpha, 2.0) == pytest.approx(a)
    assert parse_action(np.array([a], dtype=np.float32), "log", 2.0) == pytest.approx(alpha, rel=1e-6)


def test_log_action_ends_and_truthful():
    assert log_to_multiplier(-1.0, 2.0) == pytest.approx(LOG_ALPHA_MIN)
    assert log_to_multiplier(0.0, 2.0) == 1.0
    assert log_to_multiplier(1.0, 2.0) == pytest.approx(2.0)
    assert log_to_multiplier(-5.0, 2.0) == pytest.approx(LOG_ALPHA_MIN)  # clipped to the box
    # Equal steps of the action are equal ratios of the multiplier.
    assert log_to_multiplier(-0.5, 2.0) / log_to_multiplier(-0.25, 2.0) == pytest.approx(
        log_to_multiplier(-0.25, 2.0) / log_to_multiplier(0.0, 2.0))


def test_built_in_policies_play_their_multipliers_in_a_log_env():
    env = gym.make("RadixAuction-v0", **{**CALIBRATED, "action_type": "log", "reward": "utility"})
    obs, _ = env.reset(seed=0)
    mapped = focal_policy(PIDPacer(), env)
    for _ in range(5):
        action, _ = mapped.predict(obs)
        alpha, _ = PIDPacer().predict(obs)
        obs, _, _, _, info = env.step(action)
        assert info["multiplier"] == pytest.approx(float(alpha[0]), rel=1e-5)


def _obs(budget_left: float, time_left: float, spend_over_rho: float, prev_alpha: float) -> np.ndarray:
    obs = np.zeros(Obs.SIZE, dtype=np.float32)
    obs[Obs.BUDGET_LEFT], obs[Obs.TIME_LEFT] = budget_left, time_left
    obs[Obs.LAST_SPEND_LOG] = math.log1p(spend_over_rho)
    obs[Obs.PREV_MULTIPLIER] = prev_alpha / 2.0
    return obs


def test_pid_pacer_holds_on_pace_and_shades_when_ahead():
    pacer = PIDPacer(kp=0.05, ki=0.5)
    on_pace = float(pacer.predict(_obs(0.5, 0.5, 1.0, 0.4))[0][0])
    assert on_pace == pytest.approx(0.4, rel=1e-5)
    ahead = float(pacer.predict(_obs(0.3, 0.5, 3.0, 0.4))[0][0])
    assert ahead == pytest.approx(0.4 * math.exp(-0.05 * 2.0 - 0.5 * 0.2), rel=1e-5)
    behind = float(pacer.predict(_obs(0.8, 0.5, 0.0, 0.4))[0][0])
    assert behind > 0.4


def test_in_system_is_every_held_unfinished_request_once():
    market = Market(CALIBRATED_MARKET)
    market.reset(2)
    for _ in range(60):
        market.step([1.0] * 4)
        ids = [r.id for r in market.engine.in_system()]
        assert len(ids) == len(set(ids))
        now = market.engine.now
        live = {rid for rid, rec in market.engine.records.items()
                if rec.arrival <= now and not rec.finished and rec.rejected is None}
        # Only requests that arrived during the step's last iteration are not in the engine yet.
        assert set(ids) <= live
        assert all(market.engine.records[rid].arrival > now - 0.5 for rid in live - set(ids))


def test_cost_reward_accrues_each_requests_latency_cost():
    kwargs = {**CALIBRATED, "horizon": 80, "action_type": "log"}  # a = 0 is truthful bidding under "log"
    steps = rollout(Truthful(), kwargs, seed=4)
    env = gym.make("RadixAuction-v0", **kwargs)
    env.reset(seed=4)
    market = env.unwrapped.market
    start = market.engine.now  # the episode starts where the warm-up stopped
    for _ in range(80):
        env.step(np.array([0.0], dtype=np.float32))
    end = market.engine.now
    accrued = sum(info["latency_cost"] for _, info in steps)
    # Truthful's log action is 0, so the replay above is the same episode.
    held = {r.id for r in market.engine.in_system()}
    expected = 0.0
    for rid, rec in market.engine.records.items():
        if rec.bidder == 0 and (rid in held or start < rec.finish <= end):
            stop = rec.finish if rec.finished else end
            expected += rec.urgency * (stop - max(start, rec.arrival))
    assert accrued == pytest.approx(expected, rel=1e-9)


def test_money_is_not_negligible_in_the_calibrated_market():
    """Truthful bidders with unlimited budgets at the busiest drawn rate pay a share of the value
    they are served that matters (it was 2e-5 in the bursty_v0 scenario)."""
    config = replace(CALIBRATED_MARKET, budget=1e12, episode_draws={"rate": [48.0]})
    market = Market(config)
    market.reset(0)
    paid = value = 0.0
    while not market.done:
        report = market.step([1.0] * 4)
        paid += report.revenue
        value += sum(market.engine.records[r].value for r in report.finished)
    assert paid / value > 0.03


def _matrix(values: dict[str, list[float]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {k: (np.array(v, dtype=float), np.zeros(len(v))) for k, v in values.items()}


def test_headroom_estimators_on_a_toy_market_with_a_known_answer():
    # Two kinds of episode: a low constant is right for kind A, a high one for kind B.
    tuning = _matrix({"fixed:0.1": [10, 10, 0, 0], "fixed:1": [0, 0, 8, 8], "truthful": [0, 0, 8, 8],
                      "ogd:eta=0.02": [5, 5, 5, 5], "pid:kp=0,ki=0.01": [6, 6, 6, 6]})
    scored = _matrix({"fixed:0.1": [9, 11, 1, 0], "fixed:1": [1, 0, 7, 9], "truthful": [1, 0, 7, 9],
                      "ogd:eta=0.02": [4, 6, 5, 5], "pid:kp=0,ki=0.01": [6, 7, 6, 5]})
    kinds_t, kinds_e = [("A",), ("A",), ("B",), ("B",)], [("A",), ("A",), ("B",), ("B",)]
    rows = report_rows(tuning, scored, kinds_t, kinds_e, (np.array([20.0] * 4), np.zeros(4)))
    by = {r.name: r for r in rows}
    assert by["best_fixed"].choice == "fixed:0.1"  # mean 5 on tuning against 4
    assert by["privileged"].utility.tolist() == [9, 11, 7, 9]
    assert by["hindsight"].utility.tolist() == [9, 11, 7, 9]
    table = {r["policy"]: r for r in gaps(rows)}
    assert table["privileged"]["gap"] == pytest.approx((9 + 11 + 7 + 9 - 21) / 4)
    assert table["privileged"]["gap_pct"] == pytest.approx(100 * (36 - 21) / 21)
    assert table["unlimited_budget"]["gap"] == pytest.approx(20 - 21 / 4)


def test_headroom_rows_are_paired_on_episodes():
    rows = [Row("best_fixed", "c", np.array([1.0, 100.0]), np.zeros(2)),
            Row("other", "d", np.array([2.0, 101.0]), np.zeros(2))]
    other = gaps(rows)[1]
    assert other["gap"] == pytest.approx(1.0) and other["gap_ci95"] == pytest.approx(0.0)


def test_scenarios_are_valid_env_arguments():
    for name in SCENARIOS:
        gym.make("RadixAuction-v0", **scenario(name)).reset(seed=0)
    with pytest.raises(ValueError, match="unknown scenario"):
        scenario("nope")


def test_headroom_command_writes_its_report(tmp_path, capsys):
    from experiments.cli import main as cli_main

    cli_main(["headroom", "--env-kwargs", '{"horizon": 8}', "--tuning-episodes", "2", "--episodes", "2",
              "--jobs", "1", "--out", str(tmp_path)])
    assert {p.name for p in tmp_path.iterdir()} == {"headroom.md", "headroom.csv", "headroom.png"}
    printed = capsys.readouterr().out
    for row in ("best_fixed", "ogd_tuned", "pid_tuned", "privileged", "hindsight", "unlimited_budget"):
        assert f"| {row} |" in printed
    assert "--scenario calibrated" in (tmp_path / "headroom.md").read_text()

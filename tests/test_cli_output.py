"""What the command line prints: a user error is one line with a hint to --help (no usage text),
`train` defaults to PPO and reports its final evaluation, and numbers carry no float noise."""

from __future__ import annotations

import math

import pytest

from agents.stats import format_ci, mean_ci, summary_lines
from experiments.cli import build_parser, main


@pytest.mark.parametrize("argv, option", [
    (["train", "--algo", "ppo", "--timesteps", "-5"], "--timesteps"),
    (["train", "--env-kwargs", "{bad json"], "--env-kwargs"),
    (["compare", "--seeds", "0"], "--seeds"),
    (["demo", "--schedulers", "sjf"], "--schedulers"),
    (["demo", "--no-such-option"], "--no-such-option"),
])
def test_a_user_error_is_one_line_with_a_hint(argv, option, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.count("\n") == 1, err
    assert err.startswith(f"radix-auction {argv[0]}: error: ") and option in err
    assert f"radix-auction {argv[0]} --help" in err and "usage:" not in err


def test_an_unknown_command_is_one_line_too(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "radix-auction --help" in err


def test_train_defaults_to_ppo():
    assert build_parser("train").parse_args(["train"]).algo == "ppo"


def test_train_prints_its_final_evaluation(tmp_path, capsys):
    main(["train", "--timesteps", "64", "--hyperparams", "n_steps=64", "batch_size=32", "n_epochs=1", "n_envs=1",
          "--env-kwargs", '{"horizon": 16}', "--eval-episodes", "2", "--logdir", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert "final evaluation at step 64: 2 episodes, seeds 1000..1001" in out
    assert "  utility " in out and "(95% CI)" in out and "cache_hit_rate" in out


def test_identical_values_have_a_zero_interval():
    mean, half = mean_ci([0.05] * 20)  # summing twenty 0.05s leaves a std of ~1e-17
    assert mean == pytest.approx(0.05) and half == 0.0
    assert format_ci(mean, half) == "0.05 ± 0"


def test_cancelling_values_have_a_zero_mean():
    mean, _ = mean_ci([0.1, 0.2, -0.3])  # the float sum is 5.6e-17, not 0
    assert mean == 0.0
    assert format_ci(*mean_ci([0.1, 0.2, -0.3])).startswith("0 ± ")


def test_one_value_prints_no_interval():
    mean, half = mean_ci([3.25])
    assert mean == 3.25 and math.isnan(half)
    assert format_ci(mean, half) == "3.25"
    assert summary_lines([{"utility": 3.25}], ["utility"]) == ["  utility            3.25"]
    assert summary_lines([{"utility": 1.0}, {"utility": 3.0}], ["utility"])[0].endswith("(95% CI)")

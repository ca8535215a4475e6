"""What a researcher trips on in a first day, each fixed: `headroom --quick`, the steps `compare`
reports, `demo --workload mooncake` without a trace and its aligned table, figures whose lines stay
apart, and a legend under every table of the headroom report's rows."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex

from experiments.cli import build_parser, main
from experiments.commands import compare, compare_report, headroom, markets_report
from experiments.commands.headroom_report import ROWS, markdown
from experiments.commands.policy_figure import Trace, draw_policies
from experiments.plotting import COLOURS, line_styles

REPO = Path(__file__).resolve().parents[1]


def parse(*argv: str):
    return build_parser(argv[0]).parse_args(list(argv))


def test_headroom_quick_takes_compare_quicks_episodes_and_explicit_sizes_win():
    quick = headroom.with_sizes(parse("headroom", "--quick"))
    assert (quick.tuning_episodes, quick.episodes) == (compare.BUDGETS["quick"]["tuning_episodes"],
                                                       compare.BUDGETS["quick"]["episodes"])
    assert headroom.with_sizes(parse("headroom", "--quick", "--episodes", "7")).episodes == 7
    full = headroom.with_sizes(parse("headroom"))
    assert (full.tuning_episodes, full.episodes) == (headroom.TUNING_EPISODES, headroom.EVAL_EPISODES)


def test_the_steps_compare_reports_are_the_ones_trained():
    assert compare_report.steps_text(2_048, [2_048, 2_048]) == "2,048 steps"
    text = compare_report.steps_text(2_048, [4_096, 4_096])
    assert text.startswith("4,096 steps (2,048 asked") and "rollout" in text
    assert compare_report.steps_text(40, [48, 56]).startswith("48-56 steps (40 asked")


def test_demo_replays_the_shipped_sample_for_mooncake_in_an_aligned_table(capsys):
    main(["demo", "--workload", "mooncake", "--limit", "30", "--schedulers", "fcfs,sglang_priority"])
    out = capsys.readouterr().out
    assert "conversation_slice.jsonl: 30 requests" in out
    table = out[out.index("scheduler"):].strip().splitlines()
    head, rows = table[0], [line for line in table[2:] if line]
    assert {len(line) for line in (head, *rows)} == {len(head)}
    ends = [[m.end() for m in re.finditer(r"\S+", line)] for line in rows]
    assert ends[0][1:] == ends[1][1:]  # sglang_priority's numbers sit where fcfs's do
    assert all(end in [m.end() for m in re.finditer(r"\S+", head)] for end in ends[0][1:])


def test_line_styles_stay_distinct_beyond_the_colours():
    styles = line_styles(3 * len(COLOURS))
    assert len({(s["color"], s["marker"], s["linestyle"]) for s in styles}) == len(styles)
    assert styles[0]["color"] == styles[len(COLOURS)]["color"]  # a colour repeats, its dash does not
    assert styles[0]["linestyle"] != styles[len(COLOURS)]["linestyle"]


def test_the_markets_figures_give_every_design_its_own_style(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    designs = [f"design_{k}" for k in range(15)]
    rows = [{"workload": "agentic", "load": 1.4, "level": level, "design": d, "seed": 0,
             **{c: float(k) for c in markets_report.COLUMNS}}
            for k, d in enumerate(designs) for level in ("unlimited", "0.3")]
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)
    markets_report.figures(rows, tmp_path)
    for fig in drawn:
        lines = fig.axes[0].get_lines()
        assert len({(to_hex(ln.get_color()), ln.get_marker(), ln.get_linestyle()) for ln in lines}) == 15
        fig.clf()


def _trace() -> Trace:
    n = 50
    return Trace(time=list(np.linspace(0, 10, n)), multiplier=[0.5] * n, waiting=list(range(n)),
                 time_left=list(np.linspace(1, 0, n)), episode=[0] * n)


def test_a_policy_line_does_not_hide_one_that_plays_the_same():
    import matplotlib.pyplot as plt

    fig = draw_policies({"pid_tuned": _trace(), "cmaes_s0": _trace()}, {})
    try:
        under, over = fig.axes[0].get_lines()
        assert over.get_zorder() > under.get_zorder() and over.get_linewidth() < under.get_linewidth()
    finally:
        plt.close(fig)


def test_the_headroom_table_has_a_legend_for_its_rows():
    table = [{"policy": name, "choice": "-", "n": 2, "utility": 1.0, "utility_ci95": 0.1, "gap": 0.0, "gap_ci95": 0.0,
              "gap_pct": 0.0, "gap_pct_ci95": 0.0, "budget_spent_frac": 0.5} for name in ROWS]
    text = markdown(table)
    for name in ROWS:
        assert f"- `{name}`: {ROWS[name]}" in text


@pytest.mark.parametrize("page", sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("headroom.md")))
def test_every_committed_headroom_page_says_what_its_rows_are(page):
    text = (REPO / page).read_text()
    shown = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")]
    for name in (n for n in shown if n in ROWS):
        assert f"- `{name}`: {ROWS[name]}" in text, (page, name)

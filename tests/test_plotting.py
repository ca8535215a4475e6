"""The figures' helpers: panels placed with the margins and gaps asked, in inches; error bars only
where there are intervals."""

import math

import pytest

from experiments.plotting import line_with_intervals, margins_in_inches

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 4), (2, 3)])
def test_margins_in_inches_place_every_panel_where_asked(rows, cols):
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    margins_in_inches(fig, rows, cols, left=0.7, right=0.2, bottom=0.5, top=0.3, between=(0.9, 1.1))
    width, height = fig.get_size_inches()
    boxes = [[ax.get_position() for ax in row] for row in axes]  # figure fractions
    plt.close(fig)
    assert boxes[0][0].x0 * width == pytest.approx(0.7)
    assert (1 - boxes[0][-1].x1) * width == pytest.approx(0.2)
    assert (1 - boxes[0][0].y1) * height == pytest.approx(0.3)
    assert boxes[-1][0].y0 * height == pytest.approx(0.5)
    for row in boxes:
        for a, b in zip(row, row[1:]):
            assert (b.x0 - a.x1) * width == pytest.approx(0.9)
    for upper, lower in zip(boxes, boxes[1:]):
        assert (upper[0].y0 - lower[0].y1) * height == pytest.approx(1.1)


@pytest.mark.parametrize("halves,bars", [((math.nan, math.nan, math.nan), False), ((math.nan, 0.5, 0.2), True)])
def test_line_with_intervals_draws_error_bars_only_where_there_are_intervals(halves, bars):
    fig, ax = plt.subplots()
    line_with_intervals(ax, [1.0, 2.0, 3.0], list(zip([4.0, 5.0, 6.0], halves)), label="radix_vcg", color="C0")
    line = ax.get_lines()[0]  # the means' line, drawn first (error bars add their caps after it)
    drawn = list(line.get_xdata()), list(line.get_ydata())
    labels = ax.get_legend_handles_labels()[1]
    containers = len(ax.containers)
    plt.close(fig)
    assert drawn == ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert labels == ["radix_vcg"]
    assert containers == (1 if bars else 0)

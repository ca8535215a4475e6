"""The figures' layout helper: panels placed with the margins and gaps asked, in inches."""

import pytest

from experiments.plotting import margins_in_inches

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

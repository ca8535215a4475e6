"""Line styles for the figures the commands write: every line stays distinguishable however many
there are, and none hides another where they coincide.

Matplotlib's default cycle has ten colours, so an eleventh line repeats the first's colour.
`line_styles` gives each line a colour and,
from the eleventh on, a marker and a dash pattern of its own pass through the colours, so no two
lines share all three. `layered=True`, for lines that may coincide (two pacers playing the same
multipliers), also draws each line thinner than the ones before it and above them: a line on top
of another leaves the wider one's edges showing.

`margins_in_inches` lays a grid of panels out with margins fixed in inches, where `tight_layout`
would measure every label by drawing the figure once more (a third of a small figure's time).
`line_with_intervals` draws error bars only where there are intervals: one seed's line is a plain
line, not an error bar's artists drawn empty.
"""

from __future__ import annotations

import math
from typing import Any

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
"""Matplotlib's tab10, its default colour cycle."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
WIDEST, NARROWEST = 3.2, 1.0
"""The line widths of the first and last of `layered` lines."""


def line_styles(n: int, layered: bool = False) -> list[dict[str, Any]]:
    """Keyword arguments of `Axes.plot` for `n` lines: colour, marker and line style, the three
    distinct for every pair of lines up to len(COLOURS) x len(LINESTYLES) lines; with `layered`,
    widths from WIDEST down to NARROWEST in drawing order and rising zorder (see the module
    docstring)."""
    styles = []
    for k in range(n):
        passes = k // len(COLOURS)
        style: dict[str, Any] = {"color": COLOURS[k % len(COLOURS)], "marker": MARKERS[passes % len(MARKERS)],
                                 "linestyle": LINESTYLES[passes % len(LINESTYLES)]}
        if layered:
            style["linewidth"] = WIDEST - (WIDEST - NARROWEST) * k / max(n - 1, 1)
            style["zorder"] = 2 + k
        styles.append(style)
    return styles


def margins_in_inches(fig: Any, rows: int, cols: int, *, left: float = 0.8, right: float = 0.15,
                      bottom: float = 0.6, top: float = 0.4, between: tuple[float, float] = (0.85, 1.0)) -> None:
    """Place `fig`'s `rows` x `cols` panels with these margins, in inches: room for a y label and
    its tick labels on the left of each panel, an x label below, a title above; `between`, the gaps
    between columns and between rows."""
    width, height = fig.get_size_inches()
    panel_w = (width - left - right - (cols - 1) * between[0]) / cols
    panel_h = (height - bottom - top - (rows - 1) * between[1]) / rows
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        wspace=between[0] / panel_w, hspace=between[1] / panel_h)


def line_with_intervals(ax: Any, x: list[float], means_and_halves: list[tuple[float, float]], **style: Any) -> None:
    """A line through the means at `x`, with error bars of the half-widths where any is known (one
    seed has none: a plain line then, whose legend entry shows no error bar either)."""
    means, halves = [m for m, _ in means_and_halves], [h for _, h in means_and_halves]
    if all(math.isnan(h) for h in halves):
        ax.plot(x, means, **style)
    else:
        ax.errorbar(x, means, yerr=halves, capsize=3, **style)

"""How each run label or grid row looks in every figure of a report: colour, marker, line
style and hatch.

A report's figures (plot.py, plot_lengths.py) draw the same label the same way, so a
reader can follow one condition from figure to figure.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from matplotlib import colormaps

from qmkar.grid import series
from qmkar.runs import Run

LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3)), (0, (3, 1, 1, 1, 1, 1)))
# A label's look: the palette's colour, a marker cycling through 7 shapes, and for each
# further round through the palette's 10 colours another line style (lines) and hatch
# (bars); so two of the first 70 labels that share a colour differ in marker, line style
# and hatch.
PALETTE = "tab10"
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
HATCHES = ("", "///", "...", "xxx", "\\\\\\", "+++", "ooo")


class Style(NamedTuple):
    """How one run label or grid row is drawn, the same in every figure of a report."""

    color: tuple
    marker: str
    linestyle: Any
    hatch: str

    def bar(self) -> dict[str, Any]:
        """Keyword arguments for a bar of this style (its hatch drawn in white)."""
        return {"color": self.color, "hatch": self.hatch or None, "hatchcolor": "white", "linewidth": 0}


GREY = Style((0.3, 0.3, 0.3, 1.0), "o", "-", "")


def styles(runs: list[Run]) -> dict[str, Style]:
    """One style per run label and grid row (in the order first seen), the same in every figure."""
    labels = list(dict.fromkeys([*(label for _, label, _ in series(runs)), *(run.label for run in runs)]))
    palette = colormaps[PALETTE]
    colors = [tuple(c) for c in palette(np.arange(palette.N))]
    made = {}
    for i, label in enumerate(labels):
        turn = i // len(colors)
        made[label] = Style(colors[i % len(colors)], MARKERS[i % len(MARKERS)],
                            LINE_STYLES[turn % len(LINE_STYLES)], HATCHES[turn % len(HATCHES)])
    return made

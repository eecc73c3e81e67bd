"""Figures along the length axis: depth x length heatmaps, their differences, effective lengths.

The data comes from lengths.py; plot.figures adds these to the other figures (and so to
the HTML report). Matplotlib's object API only, as in plot.py.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from qmkar import lengths
from qmkar.lengths import DEFAULT_VIEW, Heatmap, View
from qmkar.plot_style import GREY, Style
from qmkar.runs import Run

DPI = 150
PANELS_PER_ROW = 3


def _grid(count: int, width: float, height: float) -> tuple[Figure, list]:
    columns = min(count, PANELS_PER_ROW)
    rows = -(-count // columns)
    size = (max(6.5, width * columns + 1.2), height * rows + 0.8)
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel().tolist()
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def _panel(ax, values: np.ndarray, columns: list[str], rows: list[str], cmap: str, low: float, high: float,
           text: list[list[str]]):
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=low, vmax=high, aspect="auto")
    ax.set_xticks(np.arange(len(columns)), columns)
    ax.set_yticks(np.arange(len(rows)), rows)
    ax.set_facecolor("#dddddd")  # cells without targets
    for (row, column), shown in np.ndenumerate(np.array(text, dtype=object)):
        if shown:
            ax.text(column, row, shown, ha="center", va="center", fontsize=8)
    return image


def heatmap_figure(maps: list[Heatmap]) -> Figure:
    """Recall by target depth (rows) and length (columns), one panel per series."""
    fig, axes = _grid(len(maps), 4.2, 3.4)
    image = None
    for ax, m in zip(axes, maps, strict=True):
        recall = np.array([[np.nan if r is None else r for r in
                            (m.recall(d, c) for c in range(len(m.lengths)))]
                           for d in range(len(m.depths))])
        text = [["" if np.isnan(v) else f"{100 * v:.0f}" for v in row] for row in recall]
        columns = [lengths.shown(x, m.unit) for x in m.lengths]
        image = _panel(ax, recall, columns, m.depths, "RdYlGn", 0, 1, text)
        ax.set_title(m.model, fontsize=9)
        ax.set_xlabel(m.unit)
    axes[0].set_ylabel("depth of the target pair")
    assert image is not None
    fig.colorbar(image, ax=axes, label="recall (share of target values found)", shrink=0.8)
    fig.suptitle(f"{maps[0].task}: recall by target depth and context length (grey: no target there)")
    return fig


def difference_figure(pairs: list[tuple[Heatmap, Heatmap]]) -> Figure:
    """Recall of B minus recall of A, per depth and shared length, one panel per pair."""
    fig, axes = _grid(len(pairs), 4.2, 3.4)
    image = None
    for ax, (a, b) in zip(axes, pairs, strict=True):
        shared, grid = lengths.difference(a, b)
        values = np.array([[np.nan if v is None else v for v in row] for row in grid])
        text = [["" if np.isnan(v) else f"{100 * v:+.0f}" for v in row] for row in values]
        image = _panel(ax, values, [lengths.shown(x, a.unit) for x in shared], a.depths, "RdBu", -1, 1, text)
        ax.set_title(f"{b.model}\nminus {a.model}", fontsize=9)
        ax.set_xlabel(a.unit)
    axes[0].set_ylabel("depth of the target pair")
    assert image is not None
    fig.colorbar(image, ax=axes, label="recall difference (B - A)", shrink=0.8)
    fig.suptitle(f"{pairs[0][0].task}: recall difference by depth and context length")
    return fig


def effective_figure(found: list[lengths.Effective], colors: dict[str, Style]) -> Figure:
    """Accuracy against length per series, the pass line, and each effective length's bracket."""
    fig = Figure(figsize=(9.0, 5.2), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    every = sorted({p.length for f in found for p in f.points})
    for f in found:
        style = colors.get(f.model, GREY)
        color = style.color
        xs = [p.length for p in f.points]
        ax.plot(xs, [np.nan if p.accuracy is None else p.accuracy for p in f.points], color=color,
                linestyle=style.linestyle, marker=style.marker,
                label=f"{f.model}: {lengths.effective_text(f)}")
        ax.fill_between(xs, [p.accuracy_ci[0] for p in f.points], [p.accuracy_ci[1] for p in f.points],
                        color=color, alpha=0.12, linewidth=0)
        shared = len({g.line for g in found}) == 1
        ax.axhline(f.line, color="#555" if shared else color, linestyle=":", linewidth=1)
        low, high = f.bracket
        if low is not None:
            ax.axvline(low, color=color, linestyle="--", linewidth=1)
            if high is not None:
                ax.axvspan(low, high, color=color, alpha=0.10, linewidth=0)
    if every[-1] / max(every[0], 1) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(every, [lengths.shown(x, found[0].unit) for x in every])
    ax.minorticks_off()
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}%")
    ax.set_xlabel(found[0].unit)
    ax.set_ylabel("accuracy (exactly right)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left", title="effective length")
    fig.suptitle(f"{found[0].task}: effective context length ({found[0].rule})\ndotted: the pass line; "
                 "dashed: the effective length; band: 95% interval; span: its bracket", fontsize=10)
    return fig


def figures(runs: list[Run], colors: dict[str, Style],
            view: View = DEFAULT_VIEW) -> list[tuple[str, str, Figure]]:
    """(file name, title, figure) for every task whose series span two lengths or more."""
    made: list[tuple[str, str, Figure]] = []
    series_lines = lengths.lines(runs, view.by)
    maps = lengths.heatmaps(series_lines)
    found = lengths.effective_lengths(series_lines, view)
    for task in dict.fromkeys(run.task for run in runs):
        mine = [m for m in maps if m.task == task]
        if mine:
            made.append((f"heatmap-{task}", f"{task}: recall by depth and length", heatmap_figure(mine)))
        pairs = [(a, b) for a, b in lengths.differences(maps) if a.task == task]
        if pairs:
            made.append((f"heatmap-difference-{task}", f"{task}: recall difference by depth and length",
                         difference_figure(pairs)))
        effective = [f for f in found if f.task == task]
        for index, unit in enumerate(dict.fromkeys(f.unit for f in effective)):
            made.append((f"effective-length-{task}" + (f"-{index + 1}" if index else ""),
                         f"{task}: effective context length",
                         effective_figure([f for f in effective if f.unit == unit], colors)))
    return made

"""Figures from runs: accuracy against context size, FN by position, FP kinds, counting errors.

Built on matplotlib's object API (Figure, no pyplot), so nothing needs a display and
no global figure state leaks between calls. Each function returns a Figure or None
when the runs hold nothing it can draw; `write_all` saves them as PNG files. They read
each run's tally (its distinct scores with their counts), never its records: `qmkar plot`
reads runs without them (runs.count_runs).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from qmkar import plot_lengths
from qmkar.errors import OutputError
from qmkar.grid import grid, size_unit
from qmkar.lengths import DEFAULT_VIEW, View
from qmkar.outputs import make_folder, probe, replacing
from qmkar.plot_style import LINE_STYLES, Style, styles
from qmkar.runs import Run
from qmkar.score import DEPTH_BUCKETS, FP_KINDS, Score
from qmkar.tasks import family

DPI = 150
LEGEND_ROWS = 18  # legend entries per column before another column starts
FP_KIND_NAMES = {"near": "near key", "other_key": "other key", "invented": "invented"}


class NamedFigure(NamedTuple):
    name: str  # file name without extension, e.g. "accuracy-qmkar"
    title: str
    figure: Figure


def _legend(fig: Figure, handles: list, names: list[str], **options: Any) -> None:
    """The figure's legend at its right, in as many columns as keep it within the figure."""
    fig.legend(handles, names, loc="outside right center", fontsize=9, ncols=_columns(len(names)), **options)


def _columns(entries: int) -> int:
    return max(1, math.ceil(entries / LEGEND_ROWS))


def _height(rows: int) -> float:
    """Inches for a chart with one horizontal bar per run."""
    return max(4.2, 0.42 * rows + 1.9)


def _short(label: str, width: int = 22) -> str:
    """Wrap a run label for a tick, breaking after '/', ':' or a space before mid-word."""
    lines, line = [], ""
    for piece in re.split(r"(?<=[/:@ ])", label):
        while len(piece) > width:  # a piece too long for any line is cut
            lines.extend([line, piece[:width]])
            piece, line = piece[width:], ""
        if len(line) + len(piece) > width and line:
            lines.append(line)
            line = ""
        line += piece
    lines.append(line)
    return "\n".join(part.strip() for part in lines if part.strip())


def _graded(runs: list[Run], task: str) -> list[Run]:
    return [run for run in runs if run.task == task and run.tally.graded]


def accuracy_by_size(runs: list[Run], task: str, colors: dict[str, Style]) -> Figure | None:
    """Accuracy against the number of pairs, one line per run (and per targets value)."""
    cells = [c for c in grid([r for r in runs if r.task == task]) if c.n > 0]
    if not cells:
        return None
    unit = {"pairs": "key-value pairs in the context", "values": "values in the list",
            "symbols": "symbols in the context",
            "tokens": "prompt tokens (target)"}[cells[0].unit or size_unit(task)]
    sizes = sorted({c.size for c in cells})
    widths = sorted({c.width for c in cells if c.width is not None})
    labels = list(dict.fromkeys(c.model for c in cells))
    if len(sizes) > 1 or len(widths) > 1 or len({c.placement for c in cells}) > 1:
        return _accuracy_lines(cells, task, unit, sizes, widths, labels, colors)
    # One grid point: a line would be a dot, so show each run as a bar with its interval,
    # one row per run (the figure grows down, not across, and labels read horizontally).
    fig = Figure(figsize=(9.0, _height(len(labels))), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(labels))
    accuracy = [next(c for c in cells if c.model == label) for label in labels]
    values = np.array([c.accuracy for c in accuracy])
    # Clipped: at 0% or 100% the Wilson bound can miss the point by a rounding error.
    low = np.clip(values - np.array([c.accuracy_ci[0] for c in accuracy]), 0, None)
    high = np.clip(np.array([c.accuracy_ci[1] for c in accuracy]) - values, 0, None)
    for yi, label, value in zip(y, labels, values, strict=True):
        ax.barh(yi, value, 0.6, **colors[label].bar(), label=_short(label, 32))
    ax.errorbar(values, y, xerr=[low, high], fmt="none", ecolor="black", capsize=4, linewidth=1)
    ax.set_yticks(y, [_short(label, 32) for label in labels])
    ax.invert_yaxis()  # the first run on top
    for yi, c in zip(y, accuracy, strict=True):
        ax.annotate(f"{100 * (c.accuracy or 0):.0f}%  n={c.n}", (c.accuracy_ci[1], yi),
                    textcoords="offset points", xytext=(5, 0), va="center", fontsize=9)
    ax.set_title(f"{task}: accuracy at {sizes[0]} {unit.split(' in ')[0]} (95% Wilson interval)")
    ax.set_xlabel("accuracy (exactly right)")
    ax.set_xlim(0, 1.18)
    ax.set_xticks(np.linspace(0, 1, 6))
    ax.xaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}%")
    ax.grid(axis="x", alpha=0.3)
    return fig


def _accuracy_lines(cells, task, unit, sizes, widths, labels, colors) -> Figure:
    """One panel per targets (or queries) value, one line and 95% band per run."""
    panels = widths or [None]
    legend = 2.6 * _columns(len(labels) * len({c.placement for c in cells}))
    fig = Figure(figsize=(4.6 * len(panels) + legend, 5.2), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    # Placements (when a sweep varied them) share a run's colour and differ by line style.
    placements = list(dict.fromkeys(c.placement for c in cells))
    for ax, width in zip(axes, panels, strict=True):
        for label in labels:
            for index, placement in enumerate(placements):
                style = colors[label]
                if len(placements) > 1:
                    style = style._replace(linestyle=LINE_STYLES[index % len(LINE_STYLES)])
                line = sorted((c for c in cells if c.model == label and c.width == width
                               and c.placement == placement), key=lambda c: c.size)
                if not line:
                    continue
                name = label if len(placements) == 1 else f"{label}, {placement or 'random'}"
                _accuracy_line(ax, line, style, _short(name, 32))
        if sizes[-1] / max(sizes[0], 1) >= 8:
            ax.set_xscale("log")
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        if width is not None and family(task).width_name:
            ax.set_title(f"{family(task).width_name} = {width}")
    axes[0].set_ylabel("accuracy (exactly right)")
    axes[0].yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}%")
    fig.supxlabel(unit if unit.startswith("prompt") else f"number of {unit}")
    handles, names = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            if name not in names:
                handles.append(handle)
                names.append(name)
    _legend(fig, handles, names)
    counts = sorted({c.n for c in cells})
    each = f"n={counts[0]}" if len(counts) == 1 else f"n={counts[0]}-{counts[-1]}"
    title = f"{task}: accuracy against context size ({each} per point; bands: 95% Wilson interval)"
    fig.suptitle(title if len(panels) > 1 else title.replace(" (", "\n(", 1))
    return fig


def _accuracy_line(ax, line, style: Style, name: str) -> None:
    xs = [c.size for c in line]
    if len(line) == 1:
        # A band needs two points; a single point gets an error bar instead.
        c = line[0]
        ax.errorbar(xs, [c.accuracy], yerr=[[max(c.accuracy - c.accuracy_ci[0], 0)],
                    [max(c.accuracy_ci[1] - c.accuracy, 0)]], color=style.color, capsize=5)
    ax.plot(xs, [c.accuracy for c in line], linestyle=style.linestyle, marker=style.marker, color=style.color,
            label=name, clip_on=False)
    ax.fill_between(xs, [c.accuracy_ci[0] for c in line], [c.accuracy_ci[1] for c in line],
                    color=style.color, alpha=0.12, linewidth=0)


def fn_by_position(runs: list[Run], task: str, colors: dict[str, Style]) -> Figure | None:
    """Share of questions whose value at target position i was missed, per run."""
    chosen = _graded(runs, task)
    if not chosen or not family(task).width_name:
        return None
    scored = [run.tally.scores() for run in chosen]  # each merges the run's points: once a run
    widths = sorted({len(score.fn_by_position) for found in scored for score, _ in found})
    # Each panel wide enough for a readable bar per run at every position.
    panel = max(4.4, 0.1 * len(chosen) * max(widths) + 1.0)
    fig = Figure(figsize=(panel * len(widths) + 2.6 * _columns(len(chosen)), 5.0), dpi=DPI,
                 layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(widths), sharey=True, squeeze=False)[0])
    for ax, width in zip(axes, widths, strict=True):
        bar_width = 0.8 / len(chosen)
        counts: set[int] = set()
        for index, (run, found) in enumerate(zip(chosen, scored, strict=True)):
            scores = [(score, count) for score, count in found if len(score.fn_by_position) == width]
            if not scores:
                continue
            answers = sum(count for _, count in scores)
            weights = np.array([[count] for _, count in scores])
            missed = (np.array([s.fn_by_position for s, _ in scores]) * weights).sum(axis=0)
            rate = missed / answers
            x = np.arange(width) + (index - (len(chosen) - 1) / 2) * bar_width
            ax.bar(x, rate, bar_width, **colors[run.label].bar(), label=_short(run.label, 32))
            counts.add(answers)
        if not any(bar.get_height() for bar in ax.patches if isinstance(bar, Rectangle)):
            # Zero-height bars are invisible; say so rather than show an empty panel.
            ax.text(0.5, 0.5, "no value missed", transform=ax.transAxes, ha="center", color="#555")
        ax.set_xticks(np.arange(width), [f"Pos{i}" for i in range(width)])
        each = f"n={min(counts)}" if len(counts) == 1 else f"n={min(counts)}-{max(counts)}"
        ax.set_title(f"{family(task).width_name} = {width} ({each} per run)")
        ax.grid(axis="y", alpha=0.3)
    fig.supxlabel(family(task).position_label)
    axes[0].set_ylabel("share of questions missing that value")
    axes[0].yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}%")
    top = max(ax.get_ylim()[1] for ax in axes)
    axes[0].set_ylim(0, max(top * 1.1, 0.1))
    _legend(fig, *axes[0].get_legend_handles_labels())
    fig.suptitle(f"{task}: false negatives by target position")
    return fig


def fn_by_depth(runs: list[Run], task: str, colors: dict[str, Style]) -> Figure | None:
    """Share of target values missed by how deep their pair sits in the context, per run."""
    scored = [(run, run.tally.scores()) for run in _graded(runs, task)]  # once a run: each merges its points
    deep = [(run, found) for run, found in scored if any(score.depth_buckets for score, _ in found)]
    if not deep:
        return None
    chosen = [run for run, _ in deep]
    wide = max(6.4, 0.1 * len(chosen) * DEPTH_BUCKETS + 1.0) + 2.6 * _columns(len(chosen))
    fig = Figure(figsize=(wide, 5.0), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    step = 100 // DEPTH_BUCKETS
    bar_width = 0.8 / len(chosen)
    any_empty = False
    for index, (run, found) in enumerate(deep):
        targets, missed = np.zeros(DEPTH_BUCKETS), np.zeros(DEPTH_BUCKETS)
        for score, count in found:
            for bucket, miss in zip(score.depth_buckets, score.fn_by_position, strict=False):
                targets[bucket] += count
                missed[bucket] += miss * count
        rate = np.divide(missed, targets, out=np.zeros(DEPTH_BUCKETS), where=targets > 0)
        x = np.arange(DEPTH_BUCKETS) + (index - (len(chosen) - 1) / 2) * bar_width
        ax.bar(x, rate, bar_width, **colors[run.label].bar(),
               label=_short(f"{run.label} ({int(targets.sum())} targets)", 36))
        # An empty bucket (placement put no target there) is not "none missed": mark it.
        empty = targets == 0
        ax.plot(x[empty], np.zeros(empty.sum()), "x", color=colors[run.label].color, clip_on=False,
                label="_no targets")
        any_empty = any_empty or bool(empty.any())
    ax.set_xticks(np.arange(DEPTH_BUCKETS), [f"{i * step}-{(i + 1) * step}%" for i in range(DEPTH_BUCKETS)])
    ax.set_xlabel("depth of the target pair in the context (0% = first pair)"
                  + ("; x: no target at that depth" if any_empty else ""))
    ax.set_ylabel("share of targets missed")
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}%")
    ax.set_ylim(0, max(ax.get_ylim()[1] * 1.1, 0.1))
    if not any(bar.get_height() for bar in ax.patches if isinstance(bar, Rectangle)):
        ax.text(0.5, 0.5, "no value missed", transform=ax.transAxes, ha="center", color="#555")
    ax.grid(axis="y", alpha=0.3)
    _legend(fig, *ax.get_legend_handles_labels())
    fig.suptitle(f"{task}: false negatives by depth")
    return fig


def fp_kinds(runs: list[Run], task: str, colors: dict[str, Style]) -> Figure | None:
    """False positives per question, split by kind, one stacked horizontal bar per run (the
    figure grows down, one row per run, and keeps its width)."""
    chosen = _graded(runs, task)
    if not chosen or not family(task).width_name:
        return None
    scored = [run.tally.scores() for run in chosen]
    fig = Figure(figsize=(9.0, _height(len(chosen))), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(chosen))
    bottom = np.zeros(len(chosen))
    shades = {"near": "#d62728", "other_key": "#ff9f40", "invented": "#7f7f7f"}
    for kind in FP_KINDS:
        per_question = np.array([
            sum(score.fp_kinds.get(kind, 0) * count for score, count in scores) / run.tally.graded
            for run, scores in zip(chosen, scored, strict=True)])
        ax.barh(y, per_question, 0.6, left=bottom, color=shades[kind], label=FP_KIND_NAMES[kind])
        bottom += per_question
    totals = [sum(score.fp * count for score, count in scores) for scores in scored]
    for yi, length, total, run in zip(y, bottom, totals, chosen, strict=True):
        ax.annotate(f"{total} FP / {run.tally.graded} q", (length, yi), textcoords="offset points",
                    xytext=(4, 0), va="center", fontsize=9)
    ax.set_yticks(y, [_short(run.label, 32) for run in chosen])
    ax.invert_yaxis()  # the first run on top
    ax.set_xlabel("false positives per question")
    ax.set_xlim(0, max(bottom.max() * 1.25, 0.1))
    ax.legend(title="value belongs to", fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"{task}: kinds of false positives")
    return fig


def signed_errors(scores: list[tuple[Score, int]]) -> list[int]:
    """Each parsed count's signed error (given - true), from its score alone: score.score_count
    writes the outcome "fp" for a count over the true one and "fn" for one under it."""
    return [-score.abs_error if score.outcome == "fn" else score.abs_error for score, count in scores
            if score.predicted_count is not None and score.abs_error is not None for _ in range(count)]


def counting_errors(runs: list[Run], task: str, colors: dict[str, Style]) -> Figure | None:
    """Counting: shares of exact / over / under / unparsed, and the signed errors."""
    chosen = _graded(runs, task)
    if not chosen:
        return None
    scored = [run.tally.scores() for run in chosen]
    fig = Figure(figsize=(max(10.0, 2.6 * len(chosen) + 4), 5.0), dpi=DPI, layout="constrained")
    share_ax, error_ax = fig.subplots(1, 2, width_ratios=[1, 1.3])
    x = np.arange(len(chosen))
    classes = {"exact": "#2ca02c", "over": "#d62728", "under": "#1f77b4", "unparsed": "#7f7f7f"}
    bottom = np.zeros(len(chosen))
    signed = [signed_errors(scores) for scores in scored]
    for name, color in classes.items():
        share = []
        for run, scores in zip(chosen, scored, strict=True):
            parsed = [(s, count) for s, count in scores if s.abs_error is not None]
            found = {"exact": sum(count for s, count in scores if s.correct),
                     "over": sum(count for s, count in parsed if s.outcome == "fp"),
                     "under": sum(count for s, count in parsed if s.outcome == "fn"),
                     "unparsed": run.tally.graded - sum(count for _, count in parsed)}[name]
            share.append(found / run.tally.graded)
        share_ax.bar(x, share, 0.6, bottom=bottom, color=color, label=name)
        bottom += np.array(share)
    share_ax.set_xticks(x, [_short(run.label, 16) for run in chosen])
    share_ax.set_ylim(0, 1.0)
    share_ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}%")
    share_ax.set_ylabel("share of questions")
    share_ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    share_ax.set_title("answers")
    shown = [(run, errors) for run, errors in zip(chosen, signed, strict=True) if errors]
    if shown:
        parts = error_ax.boxplot([errors for _, errors in shown], patch_artist=True, widths=0.5,
                                medianprops={"color": "black", "linewidth": 1.5})
        for patch, (run, _) in zip(parts["boxes"], shown, strict=True):
            patch.set_facecolor(colors[run.label].color)
            patch.set_hatch(colors[run.label].hatch or None)
            patch.set_alpha(0.6)
        error_ax.set_xticks(np.arange(1, len(shown) + 1), [_short(run.label, 16) for run, _ in shown])
    error_ax.axhline(0, color="black", linewidth=0.8)
    error_ax.set_ylabel("given count - true count")
    error_ax.set_title("signed error of parsed counts")
    error_ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{task}: errors")
    return fig


def figures(runs: list[Run], view: View = DEFAULT_VIEW) -> list[NamedFigure]:
    """Every figure the runs support, in a fixed order; the length figures (plot_lengths.py)
    show the length axis as `view` says."""
    colors = styles(runs)
    result: list[NamedFigure] = []
    for task in dict.fromkeys(run.task for run in runs):
        made = [
            (f"accuracy-{task}", f"{task}: accuracy", accuracy_by_size(runs, task, colors)),
            (f"fn-by-position-{task}", f"{task}: FN by target position", fn_by_position(runs, task, colors)),
            (f"fn-by-depth-{task}", f"{task}: FN by depth", fn_by_depth(runs, task, colors)),
            (f"fp-kinds-{task}", f"{task}: FP kinds", fp_kinds(runs, task, colors)),
        ]
        if family(task).report == "counting":
            made.append((f"{task}-errors", f"{task}: errors", counting_errors(runs, task, colors)))
        result.extend(NamedFigure(name, title, fig) for name, title, fig in made if fig is not None)
    result.extend(NamedFigure(*made) for made in plot_lengths.figures(runs, colors, view))
    return result


def check_folder(folder: Path) -> None:
    """Refuse, before anything is read, a folder that is a file (or cannot be made)."""
    if probe(folder) == "file":
        raise OutputError(f"plot -o takes a folder to write PNG files into, and {folder} is a file; "
                          "choose a folder name")
    make_folder(folder)


def write_all(runs: list[Run], folder: Path, view: View = DEFAULT_VIEW) -> list[Path]:
    """Save every figure as FOLDER/<name>.png, each whole or not at all; return the paths written."""
    check_folder(folder)
    written = []
    for named in figures(runs, view):
        path = folder / f"{named.name}.png"
        with replacing(path) as handle:
            named.figure.savefig(handle, dpi=DPI, format="png")
        written.append(path)
    return written

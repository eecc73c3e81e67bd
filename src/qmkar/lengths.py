"""Context length as an axis: accuracy per length, the depth x length heatmap, the effective length.

A record's length is its token target when it was sized in tokens (--context-tokens), else
its context's size (pairs, values, symbols). With `by="tokens"` it is the real prompt tokens
instead (what the provider reported, else what qmkar counted), binned in powers of two: bin
4k holds prompts of 2,049 to 4,096 tokens. The grid rows of grid.series are the series.

Effective length: a length *passes* when the 95% Wilson interval of its accuracy lies at or
above the pass line (lower bound >= line), *fails* when it lies below (upper bound < line),
and is *undecided* otherwise. The effective length is the longest length up to which every
length passes, reported with its bracket (it, and the first length that does not pass). The
pass line is absolute (RULER's rule: `--pass 0.85`) or a share of the shortest length's
accuracy (NoLiMa's: `--pass-relative 0.85`). Returns data and Tables; tables.py prints.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import NamedTuple

from pydantic import Field

from qmkar.deferred import DeferredModel
from qmkar.grid import series
from qmkar.runs import Run
from qmkar.score import DEPTH_BUCKETS, Score, wilson_interval
from qmkar.tables import Cell, Pct, Shown, Table
from qmkar.tally import Tally
from qmkar.tasks import family
from qmkar.tokens import show_size

BY = ("target", "tokens")


class PassRule(NamedTuple):
    """The pass line: `line` itself, or (relative) `line` x the shortest length's accuracy."""

    line: float = 0.85
    relative: bool = False

    def describe(self) -> str:
        if self.relative:
            return f"95% lower bound >= {self.line:g} x the shortest length's accuracy"
        return f"95% lower bound >= {100 * self.line:g}%"


class View(NamedTuple):
    """How the length axis is shown: the pass rule; `by` target (the token target, else the
    context's size) or tokens (real prompt tokens, binned); `explicit`: the user gave a pass
    line, so effective lengths are shown in pairs (values, symbols) too, not only in tokens."""

    rule: PassRule = PassRule()
    by: str = "target"
    explicit: bool = False


DEFAULT_VIEW = View()


def unit_of(tally: Tally, by: str = "target") -> str:
    if by == "tokens":
        return "prompt tokens (binned)"
    return "tokens" if tally.target is not None else family(tally.task).size_unit


def shown(length: int, unit: str) -> str:
    return show_size(length) if "tokens" in unit else str(length)


class Line(NamedTuple):
    """One series along the length axis: each distinct score with its count at each length, in
    increasing length."""

    task: str
    label: str
    unit: str
    by_length: dict[int, list[tuple[Score, int]]]
    unbinned: int  # answers left out: no token count to bin (by="tokens")


def lines(runs: list[Run], by: str = "target") -> list[Line]:
    """Every series (grid row) of the runs, its answers counted by length (tally.Tally.at)."""
    found = []
    for task, label, tally in series(runs):
        by_length, unbinned = tally.at(by)
        found.append(Line(task, label, unit_of(tally, by), by_length, unbinned))
    return found


# --- effective length ---------------------------------------------------------------------


class Point(DeferredModel):
    """Accuracy at one length, and how it stands against the pass line."""

    length: int = Field(description="The length (tokens, or pairs/values/symbols).")
    n: int = Field(description="Answers counted.")
    correct: int = Field(description="Answers exactly right.")
    accuracy: float | None = Field(description="correct / n.")
    accuracy_ci: tuple[float, float] = Field(description="95% Wilson interval.")
    verdict: str = Field(description="pass (lower bound >= line), fail (upper bound < line) or undecided.")


def verdict(correct: int, n: int, line: float) -> str:
    low, high = wilson_interval(correct, n)
    return "pass" if n and low >= line else "fail" if n and high < line else "undecided"


def point(length: int, correct: int, n: int, line: float) -> Point:
    return Point(length=length, n=n, correct=correct, accuracy=correct / n if n else None,
                 accuracy_ci=wilson_interval(correct, n), verdict=verdict(correct, n, line))


class Effective(DeferredModel):
    """The effective length of one series."""

    task: str = Field(description="Task family.")
    model: str = Field(description="Series label (model and condition).")
    unit: str = Field(description="What lengths count: tokens, pairs, values, symbols, binned prompt tokens.")
    rule: str = Field(description="The pass rule, in words.")
    line: float = Field(description="The pass line the lower bound is held to (after the relative rule).")
    effective: int | None = Field(description="Longest length up to which every length passes; null "
                                  "when the shortest does not.")
    bracket: tuple[int | None, int | None] = Field(
        description="(effective, first length that does not pass); null ends: below the shortest "
        "or beyond the longest length asked.")
    points: list[Point] = Field(description="Every length asked, shortest first.")
    note: str = Field(default="", description="Why the answer is less sure than it looks, when it is.")


def effective_length(task: str, label: str, unit: str, tallies: list[tuple[int, int, int]],
                     rule: PassRule) -> Effective:
    """The effective length from (length, correct, n) per length. Under the relative rule the
    shortest length is the base the others are held to; it passes by definition."""
    tallies = sorted(tallies)
    line = rule.line
    if rule.relative:
        _, correct, n = tallies[0]
        line = rule.line * (correct / n if n else 0.0)
    points = [point(length, correct, n, line) for length, correct, n in tallies]
    if rule.relative:
        points[0] = points[0].model_copy(update={"verdict": "pass"})
    effective, first_not = None, None
    for p in points:
        if p.verdict != "pass":
            first_not = p.length
            break
        effective = p.length
    notes = []
    if first_not is not None:
        stuck = next(p for p in points if p.length == first_not)
        if stuck.verdict == "undecided":
            notes.append(f"{shown(first_not, unit)} is undecided: more questions there would settle it")
        later = [p.length for p in points if p.length > first_not and p.verdict == "pass"]
        if later:
            notes.append(f"passes again at {', '.join(shown(length, unit) for length in later)}")
    hopeless = sorted({p.n for p in points
                       if p.verdict == "undecided" and wilson_interval(p.n, p.n)[0] < line})
    if hopeless:
        notes.append(f"with {hopeless[0]} answers even all right has a lower bound under "
                     f"{100 * line:.0f}%: ask more questions (-n) to pass")
    return Effective(task=task, model=label, unit=unit, rule=rule.describe(), line=round(line, 4),
                     effective=effective, bracket=(effective, first_not), points=points,
                     note="; ".join(notes))


def effective_lengths(series_lines: list[Line], view: View = DEFAULT_VIEW) -> list[Effective]:
    """The effective length of every series (lines(runs, view.by)) that spans two lengths or
    more, in tokens (or in any unit when a pass line was given)."""
    found = []
    for line in series_lines:
        if len(line.by_length) > 1 and (view.explicit or "tokens" in line.unit):
            tallies = [(length, sum(count for score, count in scores if score.correct),
                        sum(count for _, count in scores)) for length, scores in line.by_length.items()]
            found.append(effective_length(line.task, line.label, line.unit, tallies, view.rule))
    return found


def effective_text(found: Effective) -> str:
    low, high = found.bracket
    if low is None and found.points and found.points[0].verdict == "undecided":
        # Too few answers at the shortest length to say: not a failure there.
        return f"? ({shown(high or 0, found.unit)} undecided)"
    if low is None:
        return f"< {shown(high or 0, found.unit)}"
    if high is None:
        return f">= {shown(low, found.unit)}"
    return shown(low, found.unit)


def bracket_text(found: Effective) -> str:
    low, high = found.bracket
    ends = ["?" if end is None else shown(end, found.unit) for end in (low, high)]
    return "-".join(ends)


def effective_tables(found: list[Effective]) -> list[Table]:
    """One table per task and unit: a row per series, a column per length."""
    result = []
    for task, unit in dict.fromkeys((f.task, f.unit) for f in found):
        group = [f for f in found if (f.task, f.unit) == (task, unit)]
        lengths = sorted({p.length for f in group for p in f.points})
        header = ["model", "effective", "bracket", "pass line"] + [shown(length, unit) for length in lengths]
        body: list[list[Cell]] = []
        for f in group:
            at = {p.length: p for p in f.points}
            row: list[Cell] = [f.model, Shown(f.effective, effective_text(f)), bracket_text(f), Pct(f.line)]
            row += [_point_text(at[length]) if length in at else None for length in lengths]
            body.append(row)
        result.append(Table(f"{task}: effective context length in {unit} ({group[0].rule})", header, body))
    return result


def _point_text(p: Point) -> Shown:
    """Accuracy, [the lower 95% bound the rule holds to the line], and the verdict (the
    accuracy underneath, for CSV)."""
    return Shown(p.accuracy, f"{100 * (p.accuracy or 0):.0f}% [{100 * p.accuracy_ci[0]:.0f}] {p.verdict}")


# --- depth x length ------------------------------------------------------------------------


class Heatmap(DeferredModel):
    """Target values found and missed by depth bucket and length, for one series."""

    task: str = Field(description="Task family.")
    model: str = Field(description="Series label.")
    unit: str = Field(description="What lengths count.")
    lengths: list[int] = Field(description="Columns: the lengths, shortest first.")
    depths: list[str] = Field(description="Rows: depth buckets of the target's pair (0% = first pair).")
    targets: list[list[int]] = Field(description="Target values per [depth][length].")
    missed: list[list[int]] = Field(description="Target values missed (FN) per [depth][length].")

    def recall(self, depth: int, column: int) -> float | None:
        total = self.targets[depth][column]
        return None if not total else 1 - self.missed[depth][column] / total


DEPTH_LABELS = [f"{i * 100 // DEPTH_BUCKETS}-{(i + 1) * 100 // DEPTH_BUCKETS}%" for i in range(DEPTH_BUCKETS)]


def heatmaps(series_lines: list[Line]) -> list[Heatmap]:
    """A heatmap per series (lines(runs, by)) of a recall task with depths, at two lengths or more."""
    found = []
    for line in series_lines:
        if len(line.by_length) < 2 or family(line.task).report != "recall":
            continue
        lengths = list(line.by_length)
        targets = [[0] * len(lengths) for _ in range(DEPTH_BUCKETS)]
        missed = [[0] * len(lengths) for _ in range(DEPTH_BUCKETS)]
        for column, length in enumerate(lengths):
            for score, count in line.by_length[length]:
                for bucket, miss in zip(score.depth_buckets, score.fn_by_position, strict=False):
                    targets[bucket][column] += count
                    missed[bucket][column] += miss * count
        if any(sum(row) for row in targets):
            found.append(Heatmap(task=line.task, model=line.label, unit=line.unit, lengths=lengths,
                                 depths=DEPTH_LABELS, targets=targets, missed=missed))
    return found


def differences(maps: list[Heatmap]) -> list[tuple[Heatmap, Heatmap]]:
    """The pairs a difference heatmap is drawn for: each later series of a task against its
    first (B minus A), over the lengths both have; at most three per task."""
    pairs = []
    for task, unit in dict.fromkeys((m.task, m.unit) for m in maps):
        group = [m for m in maps if (m.task, m.unit) == (task, unit)]
        pairs += [(group[0], other) for other in group[1:4] if set(group[0].lengths) & set(other.lengths)]
    return pairs


def difference(a: Heatmap, b: Heatmap) -> tuple[list[int], list[list[float | None]]]:
    """(shared lengths, recall of B minus recall of A per [depth][length]; None where either has
    no target)."""
    shared = [length for length in a.lengths if length in b.lengths]
    grid: list[list[float | None]] = []
    for depth in range(len(a.depths)):
        row: list[float | None] = []
        for length in shared:
            ra, rb = a.recall(depth, a.lengths.index(length)), b.recall(depth, b.lengths.index(length))
            row.append(None if ra is None or rb is None else rb - ra)
        grid.append(row)
    return shared, grid


def heatmap_tables(maps: list[Heatmap]) -> list[Table]:
    """The compact terminal form, one table per task and unit: for each series, recall per depth
    bucket (rows) and length (columns) and over all depths; then the differences (B minus A)."""
    result = []
    for task, unit in dict.fromkeys((m.task, m.unit) for m in maps):
        group = [m for m in maps if (m.task, m.unit) == (task, unit)]
        every = sorted({length for m in group for length in m.lengths})
        body: list[list[Cell]] = []
        for m in group:
            for depth, label in enumerate(m.depths):
                body.append([m.model, label] + [
                    _recall_text(m.recall(depth, m.lengths.index(length))) if length in m.lengths else None
                    for length in every])
            totals = [sum(column) for column in zip(*m.targets, strict=True)]
            missed = [sum(column) for column in zip(*m.missed, strict=True)]
            body.append([m.model, "all"] + [
                _recall_text(1 - missed[m.lengths.index(length)] / totals[m.lengths.index(length)])
                if length in m.lengths and totals[m.lengths.index(length)] else None for length in every])
        header = ["model", "depth"] + [shown(length, unit) for length in every]
        result.append(Table(f"{task}: recall by depth and {unit}", header, body, keys=2))
        pairs = [(a, b) for a, b in differences(group)]
        if pairs:
            body = []
            for a, b in pairs:
                shared, grid = difference(a, b)
                for label, row in zip(a.depths, grid, strict=True):
                    at = dict(zip(shared, row, strict=True))
                    body.append([f"{b.model} - {a.model}", label]
                                + [_points_text(at, length) for length in every])
            title, header = f"{task}: recall difference by depth and {unit} (points)", ["model", "depth"]
            result.append(Table(title, header + [shown(length, unit) for length in every], body, keys=2))
    return result


def _points_text(at: dict[int, float | None], length: int) -> Shown | None:
    """A difference in percentage points; '-' where a side had no target, empty where not asked."""
    if length not in at:
        return None
    value = at[length]
    return Shown(value, "-" if value is None else f"{100 * value:+.0f}")


def _recall_text(value: float | None) -> Shown:
    """A recall as a whole percent on screen, the fraction in CSV."""
    return Shown(value, "-" if value is None else f"{100 * value:.0f}%")


def tables(runs: list[Run], view: View = DEFAULT_VIEW) -> list[Table]:
    """The runs' heatmaps and effective lengths as tables; none when no series spans two lengths."""
    found = lines(runs, view.by)
    return [*heatmap_tables(heatmaps(found)), *effective_tables(effective_lengths(found, view))]


HEATMAP_NOTE = ("recall by depth: the share of target values found, of those whose pair sits at that "
                "depth of the context (0% = first pair); difference tables: percentage points.")


def notes(shown_tables: Iterable[Table], runs: list[Run], view: View = DEFAULT_VIEW) -> list[str]:
    """What the length tables shown mean, and what they left out."""
    titles = [t.title for t in shown_tables]
    said = []
    if any(": recall by depth" in title for title in titles):
        said.append(HEATMAP_NOTE)
    if any(": effective context length" in title for title in titles):
        said.append(f"effective length: the longest length up to which every length passes "
                    f"({view.rule.describe()}); bracket: it and the first length that does not pass; "
                    "cells: accuracy [lower 95% bound] and the verdict.")
        said += [f"  {f.model}: {f.note}" for f in effective_lengths(lines(runs, view.by), view) if f.note]
    if view.by == "tokens":
        left = sum(line.unbinned for line in lines(runs, view.by))
        if left:
            said.append(f"{left} answers have no prompt token count (not reported, not sized) and are "
                        "left out")
    return said


def with_json(text: str, runs: list[Run], view: View = DEFAULT_VIEW) -> str:
    """compare's JSON with the heatmaps and effective lengths added (keys `heatmaps`,
    `effective_lengths`; empty lists when no series spans two lengths)."""
    data = json.loads(text)
    found = lines(runs, view.by)
    data["heatmaps"] = [m.model_dump(mode="json") for m in heatmaps(found)]
    data["effective_lengths"] = [f.model_dump(mode="json") for f in effective_lengths(found, view)]
    return json.dumps(data, indent=2)

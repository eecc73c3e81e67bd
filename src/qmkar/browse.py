"""What transcripts hold, question by question (`qmkar show`) and run by run (`qmkar runs`).

Returns data: a QuestionView per answer record (what was asked, what was expected and
where, what came back and how it was read and scored, or why there is no answer), and a
Table of runs, one row per invocation and condition. tables.py prints them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from qmkar import pricing
from qmkar.errors import UsageError
from qmkar.readprogress import ReadProgress, begin
from qmkar.score import FP_KINDS
from qmkar.slim import SlimReading, SlimRecord
from qmkar.tables import Cell, Pct, Shown, Table
from qmkar.tally import Tally
from qmkar.tasks import family
from qmkar.transcript import Record, files, latest, whole_records

ANSWER_SHOWN = 600  # characters of a raw answer shown; the transcript keeps it whole


class QuestionView(NamedTuple):
    """One answer record, for a person: a title and (field, text) lines."""

    title: str
    verdict: str  # right, wrong, truncated, error, refused
    lines: list[tuple[str, str]]


class Filter(NamedTuple):
    """Which answer records `show` lists: only wrong ones, only errors, a model, an id."""

    wrong: bool = False
    errors: bool = False
    models: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()

    def keeps(self, record: Record | SlimRecord) -> bool:
        if self.wrong and not (record.answered and not record.correct):
            return False
        if self.errors and record.error is None:
            return False
        if self.models and record.model not in self.models and record.label not in self.models:
            return False
        return not self.ids or any(record.item_id.startswith(prefix) for prefix in self.ids)


def verdict(record: Record) -> str:
    if record.error is not None:
        return "error"
    if record.correct:
        return "right"
    if record.truncated:
        return "truncated"
    if record.parsed is not None and record.parsed.refused:
        return "refused"
    return "wrong"


def _values(values: Iterable[int]) -> str:
    return ", ".join(str(v) for v in values) or "none"


def view(record: Record) -> QuestionView:
    """What one answer record says, field by field."""
    item, condition = record.item, record.condition
    chosen = family(item.task)
    depths = item.target_depths()
    where = ", ".join(f"{position} ({depth:.0%})" for position, depth in zip(item.target_positions, depths,
                                                                             strict=False))
    lines = [("condition", f"{condition.key()}  {record.model}"
                           + (f" ({record.label})" if record.label else "")
                           + (f"  sample {record.sample}" if record.sample else "")),
             ("question", f"{item.task}, {item.size} {chosen.size_unit}"
                          + (f", query {_values(item.query)}" if item.query else "")),
             ("expected", _values(item.expected)),
             ("at", where or "-")]
    if record.error is not None:
        again = "asked again by the next run" if not record.error.permanent else "not asked again"
        lines.append(("error", f"{record.error.kind}: {record.error.message} ({again})"))
        lines.append(("attempts", str(len(record.attempts))))
        return QuestionView(item.id, "error", lines)
    answer = record.answer or ""
    shown = answer if len(answer) <= ANSWER_SHOWN else answer[:ANSWER_SHOWN] + f" ... ({len(answer):,} chars)"
    lines.append(("answer", shown or "(empty)"))
    if record.reasoning:
        lines.append(("reasoning", f"{len(record.reasoning):,} characters, kept apart, never parsed"))
    if record.truncated:
        lines.append(("truncated", "the answer stopped at the output limit"))
    timing = f"{record.seconds:.2f} s, {len(record.attempts)} attempt(s)"
    lines.append(("time", timing + (f", {record.waited:.2f} s of it waiting for the rate limiter"
                                    if record.waited >= 0.005 else "")))
    if record.parsed is not None:
        lines.append(("read as", _values(record.parsed.values) + ("  (a refusal)" if record.parsed.refused
                                                                     else "")))
    score = record.score
    if score is not None:
        kinds = ", ".join(f"{kind} {score.fp_kinds[kind]}" for kind in FP_KINDS if score.fp_kinds.get(kind))
        lines.append(("score", f"TP {score.tp}  FP {score.fp}  FN {score.fn}  outcome {score.outcome}"
                               + (f"  (FP: {kinds})" if kinds else "")))
        missed = [str(i) for i, miss in enumerate(score.fn_by_position) if miss]
        if missed:
            lines.append(("missed", "target positions " + ", ".join(missed)))
    return QuestionView(item.id, verdict(record), lines)


def questions(paths: Iterable[Path], keep: Filter,
              progress: ReadProgress | None = None) -> list[QuestionView]:
    """The latest answer record of every question in the transcripts that `keep` keeps.

    A slim reading (slim.py) picks them; then only those are read whole, with their items'
    contexts, so `show --wrong` on a large transcript holds the wrong answers, not every
    record. `progress` is told the bytes of the slim reading."""
    found: list[QuestionView] = []
    listed = files(paths)
    begin(progress, listed)
    for path in listed:
        slim = latest(SlimReading(path, progress=progress))
        keys = [key for key, record in slim.items() if keep.keeps(record)]
        whole = whole_records(path, set(keys))
        found.extend(view(whole[key]) for key in keys)
    return found


def runs(paths: Iterable[Path], prices: dict[str, pricing.Price],
         progress: ReadProgress | None = None) -> Table:
    """One row per run (an invocation of eval or sweep) and condition: when, which model
    and task, how many answers, accuracy, errors, and the cost estimate (`progress`: as for
    questions)."""
    header = ["date", "file", "run", "model", "task", "condition", "n", "accuracy", "errors", "cost"]
    rows: list[list[Cell]] = []
    paths = list(paths)
    listed = files(paths)
    begin(progress, listed)
    for path in listed:
        reading = SlimReading(path, progress=progress)
        groups: dict[tuple[str, str], Tally] = {}
        for record in reading:  # every record counts, not only the latest: a run is what it asked
            key = (record.run_id or "-", record.condition_id)
            tally = groups.get(key)
            if tally is None:
                tally = groups[key] = Tally(record.item.task, record, per_question=False)
            tally.add(record)
        for (run_id, _), tally in groups.items():
            assert tally.condition is not None  # a tally of at least one record
            price = pricing.price_for(tally.condition.model, prices)
            spent = None if price is None else pricing.tally_cost(tally, price)
            correct = sum(count for score, count in tally.scores() if score.correct)
            rows.append([reading.started[run_id].strftime("%Y-%m-%d %H:%M"), path.name, run_id,
                         tally.label or tally.model, tally.task, tally.condition_id, tally.answered,
                         Pct(correct / tally.answered if tally.answered else None),
                         tally.records - tally.answered,
                         Shown(spent, pricing.format_cost(spent) if spent is not None else "-")])
    if not rows:  # as report and export say: an empty table would look like a bug
        raise UsageError("no transcript records in " + ", ".join(map(str, paths)))
    rows.sort(key=lambda row: str(row[0]))
    return Table("runs", header, rows)


def question_count(views: list[QuestionView]) -> dict[str, int]:
    """How many questions of each verdict a `show` listed."""
    counts: dict[str, int] = {}
    for shown in views:
        counts[shown.verdict] = counts.get(shown.verdict, 0) + 1
    return counts


"""Answers counted per (task, condition) (tally.py) -> summaries -> the blog's tables, as data.

`summaries` counts the latest of some records first; eval hands over the tallies it counted
as its answers came (`tally_summaries`). Each task family says which report it gets: recall
(a questions table, a values table with FN by order and FP kinds, and FN by depth),
counting, lengths (accuracy per context length), or plain accuracy. This module returns
Tables and JSON; tables.py prints them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from qmkar.condition import labels as condition_labels
from qmkar.score import (
    DEPTH_BUCKETS,
    FP_KINDS,
    Summary,
    clustered_interval,
    summarize_counts,
    wilson_interval,
)
from qmkar.slim import SlimRecord, slim_of
from qmkar.tables import Cell, Count, Interval, Pct, Shown, Table, text
from qmkar.tally import Tally, tallies
from qmkar.tasks import family
from qmkar.transcript import Record, latest


def summarize_records(task: str, label: str, records: Iterable[SlimRecord]) -> Summary:
    """The summary of one condition's latest records on one task, shown as `label`."""
    found = tallies(records)
    return summarize_tally(found[0] if found else Tally(task, None), label)


def summarize_tally(tally: Tally, label: str) -> Summary:
    """The summary of one condition's answers on one task (tally.py), shown as `label`."""
    failures = tally.failures()
    kinds: dict[str, int] = {}
    for error, count in failures:
        kinds[error.kind] = kinds.get(error.kind, 0) + count
    summary = summarize_counts(tally.task, tally.model, tally.scores(), kinds, refused=tally.refused,
                               counting=family(tally.task).report == "counting")
    reasons: dict[str, int] = {}
    for error, count in failures:
        reasons[error.message] = reasons.get(error.message, 0) + count
    per_question = tally.questions()
    interval = (clustered_interval(per_question) if per_question is not None
                else wilson_interval(summary.correct, summary.n))
    samples = tally.samples
    summary = summary.model_copy(update={
        "label": label,
        "condition_id": tally.condition_id or None,
        "condition": None if tally.condition is None else tally.condition.model_dump(mode="json"),
        "accuracy_ci": interval,
        "questions": len(per_question) if per_question is not None else tally.graded,
        "samples": samples,
        "by_sample": [tuple(tally.by_sample.get(sample, (0, 0))) for sample in range(samples)]
        if samples > 1 else [],
        "truncated": tally.truncated,
        "errors_permanent": sum(count for error, count in failures if error.permanent),
        "errors_retryable": sum(count for error, count in failures if not error.permanent),
        "error_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:MAX_REASONS]),
    })
    if summary.unparsed is None:
        summary.unparsed = tally.unparsed
    return summary


MAX_REASONS = 5  # error messages kept per summary, most frequent first


def summaries(records: Iterable[Record | SlimRecord], labels: dict[str, str] | None = None) -> list[Summary]:
    """One summary per (task, condition), the last record per question and sample counting.

    Rows are labelled by `labels` (condition id -> name) when given, else by
    condition.labels over the conditions shown."""
    return tally_summaries(tallies(latest(slim_of(r) for r in records).values()), labels)


def tally_summaries(found: list[Tally], labels: dict[str, str] | None = None) -> list[Summary]:
    """One summary per tally, labelled as `summaries` labels them."""
    names = labels or label_tallies(found)
    return [summarize_tally(tally, names[tally.condition_id]) for tally in found]


def label_tallies(found: list[Tally]) -> dict[str, str]:
    """A display name per condition id: the --label given, else the model name plus what
    differs from the other conditions of the same model name and task."""
    names: dict[str, str] = {}
    for task in dict.fromkeys(tally.task for tally in found):
        group = [tally for tally in found if tally.task == task]
        rows = [(tally.model, tally.condition, tally.label) for tally in group if tally.condition is not None]
        names.update(zip((tally.condition_id for tally in group), condition_labels(rows), strict=True))
    return names


def _num(value: float | None, digits: int = 2) -> Shown:
    return Shown(value, "-" if value is None else f"{value:.{digits}f}")


def recall_tables(task: str, group: list[Summary]) -> list[Table]:
    """The blog's two tables (questions, values), and FN by depth when scores have depths."""
    header = ["model", "n", "correct", "accuracy", "95% CI", "True", "F+FN", "F+FP", "F+both",
              "truncated", "refused", "unparsed", "errors"]
    questions = Table(f"{task}: questions", header, [
        [s.label, s.n, s.correct, Pct(s.accuracy), Interval(*s.accuracy_ci),
         s.outcomes["true"], s.outcomes["fn"], s.outcomes["fp"],
         s.outcomes["both"], s.truncated, s.refused, s.unparsed or 0, s.errors]
        for s in group])
    width = max(len(s.fn_by_position) for s in group)
    header = (["model", "TP", "FP", "FN"] + [f"FN-Pos{i}" for i in range(width)]
              + ["FP-near", "FP-other", "FP-invented"])
    body: list[list[Cell]] = []
    for s in group:
        misses = s.fn_by_position + [0] * (width - len(s.fn_by_position))
        body.append([s.label, s.tp, s.fp, s.fn, *misses, *(s.fp_kinds[k] for k in FP_KINDS)])
    values = Table(f"{task}: values", header, body)
    return [questions, values, *depth_tables(task, group)]


def depth_tables(task: str, group: list[Summary]) -> list[Table]:
    """FN by depth bucket as "missed/targets" per bucket; none when no score has depths
    (transcripts scored before depths existed: `qmkar rescore` adds them)."""
    if not any(sum(s.targets_by_depth) for s in group):
        return []
    step = 100 // DEPTH_BUCKETS
    header = ["model"] + [f"FN-D{i * step}-{(i + 1) * step}%" for i in range(DEPTH_BUCKETS)]
    body: list[list[Cell]] = []
    for s in group:
        targets = s.targets_by_depth or [0] * DEPTH_BUCKETS
        missed = s.fn_by_depth or [0] * DEPTH_BUCKETS
        body.append([s.label] + [Count(m, t) for m, t in zip(missed, targets, strict=True)])
    return [Table(f"{task}: FN by depth", header, body)]


def counting_tables(task: str, group: list[Summary]) -> list[Table]:
    header = ["model", "n", "exact", "accuracy", "95% CI", "MAE", "over", "under", "unparsed", "truncated",
              "errors"]
    return [Table(task, header, [
        [s.label, s.n, s.exact, Pct(s.accuracy), Interval(*s.accuracy_ci), _num(s.mae),
         s.over, s.under, s.unparsed, s.truncated, s.errors] for s in group])]


def length_tables(task: str, group: list[Summary]) -> list[Table]:
    """Accuracy overall and per context length (L32, L64...); token accuracy where scored."""
    lengths = sorted({length for s in group for length in s.by_length})
    tokens = any(s.token_accuracy is not None for s in group)
    header = ["model", "n", "correct", "accuracy", "95% CI"] + (["token acc"] if tokens else [])
    header += ["unparsed", "truncated", "errors"] + [f"L{length}" for length in lengths]
    body = []
    for s in group:
        row: list[Cell] = [s.label, s.n, s.correct, Pct(s.accuracy), Interval(*s.accuracy_ci)]
        if tokens:
            row.append(Pct(s.token_accuracy))
        row += [s.unparsed or 0, s.truncated, s.errors]
        for length in lengths:
            correct, n = s.by_length.get(length, (0, 0))
            row.append(Pct(correct / n if n else None))
        body.append(row)
    return [Table(task, header, body)]


def accuracy_tables(task: str, group: list[Summary]) -> list[Table]:
    """The table every task gets when its family asks for nothing more."""
    header = ["model", "n", "correct", "accuracy", "95% CI", "truncated", "unparsed", "errors"]
    return [Table(task, header, [[s.label, s.n, s.correct, Pct(s.accuracy), Interval(*s.accuracy_ci),
                                  s.truncated, s.unparsed or 0, s.errors] for s in group])]


BUILDERS = {"recall": recall_tables, "counting": counting_tables, "lengths": length_tables,
            "accuracy": accuracy_tables}


def tables(summary_list: list[Summary]) -> list[Table]:
    """The tables of every task present, in the order tasks first appear."""
    result: list[Table] = []
    for task in dict.fromkeys(s.task for s in summary_list):
        group = [s for s in summary_list if s.task == task]
        result.extend(BUILDERS[family(task).report](task, group))
    return result


def rows(summary_list: list[Summary]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """The same tables as (header, rows of text as shown) keyed by title."""
    return {t.title: (t.header, [[text(cell) for cell in row] for row in t.rows])
            for t in tables(summary_list)}


def to_json(summary_list: list[Summary]) -> str:
    """The stable JSON of `report --format json`: one object per summary (README lists the keys)."""
    return json.dumps([s.model_dump(mode="json") for s in summary_list], indent=2)


# (a column that needs explaining, its explanation); only those of shown tables print.
LEGEND = [
    ("F+FN", "F+FN / F+FP / F+both: wrong with missed values / with extra values / with both."),
    ("FN-Pos0", "FN-PosI: misses at the I-th target position (Pos0 first in the context)."),
    ("FP-near", "FP-near: the value of a key within 2 of the queried key or one digit apart."),
    ("FN-D0-20%", "FN-Dx-y%: misses/targets whose pair sits x-y% into the context."),
]
ERRORS_NOTE = "errors: questions with no answer (not counted as wrong)"
TRUNCATED_NOTE = ("truncated: the answer hit the output limit (counted, usually wrong); "
                  "raise --max-tokens if a model needs more room")


def legend(shown: list[Table]) -> list[str]:
    """What the columns shown mean, for those that need it."""
    headers = {name for table in shown for name in table.header}
    texts = [text for column, text in LEGEND if column in headers]
    if any(name[:1] == "L" and name[1:].isdigit() for name in headers):
        texts.append("LN: accuracy at context length N.")
    return texts


def notes(summary_list: list[Summary], shown: list[Table]) -> list[str]:
    """The lines printed under report's terminal tables: the legend, truncation, and the
    errors: which a rerun retries, which it cannot fix and why."""
    lines = [" ".join(legend(shown))] if legend(shown) else []
    if any(s.truncated for s in summary_list):
        lines.append(TRUNCATED_NOTE)
    if any(s.errors for s in summary_list):
        lines.append(ERRORS_NOTE + ":")
    for s in summary_list:
        if s.errors_retryable:
            lines.append(f"  {s.label}: {s.errors_retryable} may pass if asked again; "
                         "run the same command again to retry them")
        if s.errors_permanent:
            lines.append(f"  {s.label}: {s.errors_permanent} cannot be fixed by asking again")
        lines.extend(f"    {count} x {reason}" for reason, count in s.error_reasons.items())
        unlisted = s.errors - sum(s.error_reasons.values())
        if unlisted:
            lines.append(f"    {unlisted} more, for other reasons "
                         "(qmkar show TRANSCRIPT --errors lists each)")
    return lines

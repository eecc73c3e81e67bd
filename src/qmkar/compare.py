"""Side-by-side comparison of runs: one blog-shaped table, paired tests, a size grid.

A *run* is one model's answers in one transcript file, on one task. Runs are
compared row by row; two runs are *paired* only over the questions both answered,
and only when those questions are the same items (same id, same content), so
results on different datasets are never mixed silently. "A beats B" comes with an
exact McNemar p-value over the questions one got right and the other wrong.
Returns data (Tables, JSON); tables.py prints.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, Field

from qmkar import report
from qmkar.condition import Condition
from qmkar.condition import labels as condition_labels
from qmkar.errors import UsageError
from qmkar.score import Summary, wilson_interval
from qmkar.selection import Selection
from qmkar.sizing import axis_params
from qmkar.tables import Accuracy, Pct, Shown, Table
from qmkar.tables import Cell as TableCell
from qmkar.tasks import family
from qmkar.tokens import show_size
from qmkar.transcript import Record, files, latest, load


class Run(NamedTuple):
    """One condition's latest answers on one task in one transcript file."""

    label: str  # the model name and what sets its condition apart (and the file, when needed)
    model: str
    task: str
    file: Path
    records: list[Record]  # latest record per question and sample, errors included
    condition: Condition

    @property
    def question_set(self) -> str:
        """Short fingerprint of the questions asked; equal fingerprints mean the same item ids."""
        ids = "\n".join(sorted(r.item.id for r in self.records))
        return hashlib.sha256(ids.encode()).hexdigest()[:6]

    @property
    def answered(self) -> dict[tuple[str, int], Record]:
        """Answered records by (question, sample)."""
        return {(r.item_id, r.sample): r for r in self.records if r.error is None and r.score is not None}


def load_runs(paths: Iterable[Path], warn: Callable[[str], None] | None = None,
              selection: Selection | None = None) -> list[Run]:
    """Runs (one condition on one task in one file) from transcripts or folders, in the
    order first seen, of the records `selection` keeps. Rows are labelled by
    condition.labels; the same condition in two files is two runs, whose labels name the file."""
    paths = list(paths)
    selection = selection or Selection()
    found = [group for file in files(paths)
             for group in _groups((r for r in load(file, warn) if selection.keeps(r)), file)]
    if not found:
        kept = f" matching {selection.describe()}" if selection else ""
        raise UsageError(f"no transcript records{kept} in " + ", ".join(map(str, paths)))
    return _labelled(found)


def runs_of(records: Iterable[Record], file: Path) -> list[Run]:
    """The runs of some records of one file (a sweep's own questions)."""
    return _labelled(_groups(records, file))


def _groups(records: Iterable[Record], file: Path) -> list[tuple[str, Path, list[Record]]]:
    """(task, file, latest records) per task and condition, in the order first seen."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for record in latest(records).values():
        groups.setdefault((record.item.task, record.condition_id), []).append(record)
    return [(task, file, group) for (task, _), group in groups.items()]


def _labelled(found: list[tuple[str, Path, list[Record]]], strip: frozenset[str] = frozenset()) -> list[Run]:
    """Runs from (task, file, records) groups, labelled by what sets their conditions apart
    (the task options in `strip` left out) and, for the same label in two files, the file."""
    labels: list[str] = []
    for task in dict.fromkeys(task for task, _, _ in found):
        rows = [(records[0].model, records[0].condition.without_params(strip), records[0].label)
                for t, _, records in found if t == task]
        labels.extend(condition_labels(rows))
    order = [(task, file, records) for task in dict.fromkeys(t for t, _, _ in found)
             for t, file, records in found if t == task]
    files_per_label: dict[tuple[str, str], set[Path]] = {}
    for label, (task, file, _) in zip(labels, order, strict=True):
        files_per_label.setdefault((task, label), set()).add(file)
    stems = [file.stem for file in {f for _, f, _ in found}]
    runs = []
    for label, (task, file, records) in zip(labels, order, strict=True):
        if len(files_per_label[(task, label)]) > 1:
            # The stem is shorter; the path is needed only when two files share a stem.
            label = f"{label} @ {file.stem if stems.count(file.stem) == 1 else file}"
        runs.append(Run(label, records[0].model, task, file, records, records[0].condition))
    return runs


def run_summaries(runs: list[Run]) -> list[Summary]:
    """One blog summary per run, named by the run's label."""
    return [report.summarize_records(run.task, run.label, run.records) for run in runs]


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of only_a against Bin(only_a + only_b, 1/2).

    Computed exactly with integer binomial coefficients (math.comb), so no scipy is
    needed and small counts get no normal approximation. 1.0 when no question splits
    the two.
    """
    discordant = only_a + only_b
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, i) for i in range(min(only_a, only_b) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**discordant)))


class Paired(BaseModel):
    """Two runs on the same task, compared question by question."""

    task: str = Field(description="Task family.")
    a: str = Field(description="Label of run A.")
    b: str = Field(description="Label of run B.")
    n: int = Field(description="Questions both runs answered, with identical items; 0 when not paired.")
    both: int = Field(default=0, description="Questions both got right.")
    only_a: int = Field(default=0, description="Questions only A got right.")
    only_b: int = Field(default=0, description="Questions only B got right.")
    neither: int = Field(default=0, description="Questions both got wrong.")
    accuracy_a: float | None = Field(default=None, description="A's accuracy on the paired questions.")
    accuracy_b: float | None = Field(default=None, description="B's accuracy on the paired questions.")
    p_value: float | None = Field(
        default=None, description="Exact two-sided McNemar p-value; null when not paired."
    )
    p_holm: float | None = Field(
        default=None, description="The McNemar p-value adjusted by Holm's method over every pair of the "
        "task, when more than two runs are compared; null otherwise.")
    note: str = Field(default="", description="Why the pair is not (fully) paired, when it is not.")


def _content(record: Record) -> str:
    item = record.item
    return json.dumps([item.task, item.pairs, item.values, item.query, item.expected], separators=(",", ":"))


def pair(a: Run, b: Run) -> Paired:
    """The paired breakdown of runs a and b over the questions both answered."""
    answered_a, answered_b = a.answered, b.answered
    shared = [item_id for item_id in answered_a if item_id in answered_b]
    base = Paired(task=a.task, a=a.label, b=b.label, n=0)
    if not shared:
        if a.question_set == b.question_set:
            base.note = (f"not paired: no question answered by both (A answered "
                         f"{len(answered_a)}, B {len(answered_b)} of the same {len(a.records)})")
        else:
            base.note = (f"not paired: no question answered by both (question sets "
                         f"{a.question_set} and {b.question_set})")
        return base
    differing = [i for i in shared if _content(answered_a[i]) != _content(answered_b[i])]
    if differing:
        base.note = (f"not paired: {len(differing)} question ids are shared but the questions "
                     f"differ (first: {differing[0][0]}); these are different datasets")
        return base
    right_a = [answered_a[i].correct for i in shared]
    right_b = [answered_b[i].correct for i in shared]
    both = sum(x and y for x, y in zip(right_a, right_b, strict=True))
    only_a = sum(x and not y for x, y in zip(right_a, right_b, strict=True))
    only_b = sum(y and not x for x, y in zip(right_a, right_b, strict=True))
    n = len(shared)
    notes = []
    if len(answered_a) > n:
        notes.append(f"{len(answered_a) - n} more in A")
    if len(answered_b) > n:
        notes.append(f"{len(answered_b) - n} more in B")
    return Paired(
        task=a.task, a=a.label, b=b.label, n=n, both=both, only_a=only_a, only_b=only_b,
        neither=n - both - only_a - only_b,
        accuracy_a=(both + only_a) / n, accuracy_b=(both + only_b) / n,
        p_value=mcnemar_exact(only_a, only_b),
        note=("shared questions only; left out: " + ", ".join(notes)) if notes else "",
    )


def pairs(runs: list[Run], baseline: str | None = None) -> list[Paired]:
    """Every pair of runs on the same task whose questions could be the same (same task
    options, or a question id in common), in the order the runs were given; with a
    `baseline` (a run's label or model name), only each run against it. When a task has
    more than two runs, every p-value also gets Holm's adjustment over that task's pairs."""
    if baseline is not None and not any(baseline in (run.label, run.model) for run in runs):
        labels = ", ".join(dict.fromkeys(run.label for run in runs))
        raise UsageError(f"--baseline {baseline!r} names no run; the runs are: {labels}")
    result = []
    for index, a in enumerate(runs):
        for b in runs[index + 1:]:
            if baseline is not None:
                if baseline in (b.label, b.model):
                    a, b = b, a
                if baseline not in (a.label, a.model):
                    continue
            shared = not {r.item_id for r in a.records}.isdisjoint(r.item_id for r in b.records)
            if a.task == b.task and (a.condition.params == b.condition.params or shared):
                result.append(pair(a, b))
    for task in {p.task for p in result}:
        if sum(run.task == task for run in runs) > 2:
            tested = [p for p in result if p.task == task and p.p_value is not None]
            for p, adjusted in zip(tested, holm([p.p_value or 1.0 for p in tested]), strict=True):
                p.p_holm = adjusted
    return result


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of p-values for multiple comparisons, in the order given."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


# --- the size grid: accuracy per (model, condition) and number of pairs -------------


class Cell(BaseModel):
    """Accuracy of one run at one grid point (a context size and the other conditions)."""

    task: str = Field(description="Task family.")
    model: str = Field(description="Run label.")
    size: int = Field(description="Pairs in the context (qmkar, mqar) or values in the list (counting); "
                      "the token target when sized in tokens (unit 'tokens').")
    unit: str = Field(default="", description="What size counts: pairs, values, symbols or tokens.")
    width: int | None = Field(
        default=None, description="Targets (qmkar) or queried keys (mqar) per question; null for counting."
    )
    placement: str | None = Field(default=None, description="Target placement, when the items record one.")
    n: int = Field(description="Questions answered.")
    correct: int = Field(description="Questions answered exactly right.")
    accuracy: float | None = Field(description="correct / n; null when n is 0.")
    accuracy_ci: tuple[float, float] = Field(description="95% Wilson interval of accuracy.")
    errors: int = Field(description="Questions with no answer (not counted).")


def size_unit(task: str) -> str:
    """What a context's size counts, for titles: pairs, values or symbols."""
    return family(task).size_unit


def grid_point(record: Record) -> tuple[int, int | None, str | None]:
    """Where an item sits in a grid: (size, targets or queries, placement); the size is the
    token target when the context was sized in tokens."""
    item = record.item
    width = len(item.expected) if family(item.task).width_name else None
    # Only items that record a placement (a non-random one) have one to show.
    placement = item.params.model_dump(mode="json").get("placement")
    target = record.condition.params.get("context_tokens")
    return target if isinstance(target, int) else item.size, width, placement


# Task options a grid lays out as its own columns (size) and rows (targets, placement).
GRID_PARAMS = frozenset({"pairs", "targets", "queries", "length", "lengths", "placement"})


def series(runs: list[Run]) -> list[tuple[str, str, list[Record]]]:
    """Runs joined into grid rows: (task, label, records), one per file and condition but
    for the grid's own options, labelled by what else sets it apart."""
    groups: dict[tuple[str, Path, str], list[Record]] = {}
    stripped = set(GRID_PARAMS)
    for run in runs:
        # A context sized in tokens: its target is the grid's axis, and what it sized too.
        axis = GRID_PARAMS | axis_params(run.task, run.condition.params)
        stripped |= axis
        key = (run.task, run.file, run.condition.without_params(axis).key())
        groups.setdefault(key, []).extend(run.records)
    joined = _labelled([(task, file, records) for (task, file, _), records in groups.items() if records],
                       strip=frozenset(stripped))
    return [(run.task, run.label, run.records) for run in joined]


def grid(runs: list[Run]) -> list[Cell]:
    """Accuracy per grid row (series) and grid point, sorted by task, row, conditions and size."""
    cells = []
    order: dict[tuple[str, str], int] = {}
    for task, label, records_of_series in series(runs):
        order[(task, label)] = len(order)
        groups: dict[tuple[int, int | None, str | None], list[Record]] = {}
        for record in records_of_series:
            groups.setdefault(grid_point(record), []).append(record)
        for (size, width, placement), records in groups.items():
            answered = [r for r in records if r.error is None and r.score is not None]
            correct = sum(r.correct for r in answered)
            tokens = isinstance(records[0].condition.params.get("context_tokens"), int)
            cells.append(Cell(
                task=task, model=label, size=size, unit="tokens" if tokens else size_unit(task),
                width=width, placement=placement,
                n=len(answered), correct=correct,
                accuracy=correct / len(answered) if answered else None,
                accuracy_ci=wilson_interval(correct, len(answered)),
                errors=len(records) - len(answered),
            ))
    cells.sort(key=lambda c: (c.task, order[(c.task, c.model)], c.width or 0, c.placement or "", c.size))
    return cells


def spans_grid(cells: list[Cell]) -> bool:
    """Whether any run has answers at more than one grid point (worth a grid table)."""
    seen: dict[tuple[str, str], int] = {}
    for cell in cells:
        seen[(cell.task, cell.model)] = seen.get((cell.task, cell.model), 0) + 1
    return any(count > 1 for count in seen.values())


# --- tables ------------------------------------------------------------------------------


class Comparison(NamedTuple):
    """Everything `compare` shows, as plain data."""

    runs: list[Run]
    summaries: list[Summary]
    paired: list[Paired]
    cells: list[Cell]


def compare(runs: list[Run], baseline: str | None = None) -> Comparison:
    return Comparison(runs, run_summaries(runs), pairs(runs, baseline), grid(runs))


def format_p(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.0001" if p < 0.0001 else f"{p:.4f}".rstrip("0").rstrip(".") if p < 1 else "1"


def _accuracy(cell: Cell | None) -> Accuracy | None:
    return None if cell is None else Accuracy(cell.correct, cell.n, cell.errors)


def grid_tables(cells: list[Cell]) -> list[Table]:
    """One table per task: a row per run and condition, a column per context size."""
    result = []
    for task, unit in dict.fromkeys((c.task, c.unit) for c in cells):
        group = [c for c in cells if (c.task, c.unit) == (task, unit)]
        sizes = sorted({c.size for c in group})
        width_name = family(task).width_name
        with_placement = any(c.placement is not None for c in group)
        header = ["model"] + ([width_name] if width_name else []) + (
            ["placement"] if with_placement else []) + [
            show_size(s) if unit == "tokens" else str(s) for s in sizes]
        rows: dict[tuple, dict[int, Cell]] = {}
        for cell in group:
            rows.setdefault((cell.model, cell.width, cell.placement), {})[cell.size] = cell
        body: list[list[TableCell]] = []
        for (model, width, placement), by_size in rows.items():
            row: list[TableCell] = [model] + ([width] if width_name else []) + (
                [placement or "-"] if with_placement else [])
            body.append(row + [_accuracy(by_size.get(size)) for size in sizes])
        by = "prompt tokens (target)" if unit == "tokens" else f"number of {unit}"
        result.append(Table(f"{task}: accuracy by {by}", header, body, keys=len(header) - len(sizes)))
    return result


def paired_table(paired: list[Paired]) -> Table:
    holm = any(p.p_holm is not None for p in paired)
    header = ["task", "A", "B", "n", "both", "only A", "only B", "neither", "acc A", "acc B",
              "McNemar p", *(["Holm p"] if holm else []), "note"]
    body: list[list[TableCell]] = []
    for p in paired:
        if p.n == 0:
            body.append([p.task, p.a, p.b, 0, *([None] * (8 if holm else 7)), p.note])
            continue
        adjusted = [Shown(p.p_holm, format_p(p.p_holm))] if holm else []
        body.append([p.task, p.a, p.b, p.n, p.both, p.only_a, p.only_b, p.neither, Pct(p.accuracy_a),
                     Pct(p.accuracy_b), Shown(p.p_value, format_p(p.p_value)), *adjusted, p.note])
    return Table("paired: same questions, A against B", header, body, keys=3)


def tables(comparison: Comparison) -> list[Table]:
    """Every table of a comparison: the blog's per task, the paired tests, the size grids."""
    result: list[Table] = []
    for task in dict.fromkeys(run.task for run in comparison.runs):
        # Labels are unique within a task only, so each task's rows are built on their own.
        sets = {run.label: run.question_set for run in comparison.runs if run.task == task}
        group = [s for s in comparison.summaries if s.task == task]
        for table in report.tables(group):
            # The question-set column shows at a glance which rows were asked the same questions.
            result.append(Table(table.title, [table.header[0], "questions", *table.header[1:]],
                                [[row[0], sets[str(row[0])], *row[1:]] for row in table.rows]))
    if comparison.paired:
        result.append(paired_table(comparison.paired))
    gridded = {task for task in {c.task for c in comparison.cells}
               if spans_grid([c for c in comparison.cells if c.task == task])}
    result.extend(grid_tables([c for c in comparison.cells if c.task in gridded]))
    return result


COMPARE_NOTES = (
    "questions: fingerprint of the question ids a run was asked; rows with the same "
    "fingerprint answered the same questions. Paired: only the questions both runs answered, "
    "with identical items; McNemar p: exact two-sided binomial test on the only-A / only-B "
    "questions; Holm p: adjusted for every pair of the task when more than two runs are compared."
)


def notes(shown: list[Table]) -> str:
    """What the columns shown mean: compare's own, then report's legend for those present."""
    return " ".join([COMPARE_NOTES, *report.legend(shown)])


def to_json(comparison: Comparison) -> str:
    data = {
        "runs": [
            {"label": run.label, "model": run.model, "task": run.task, "file": str(run.file),
             "questions": run.question_set, "summary": summary.model_dump(mode="json")}
            for run, summary in zip(comparison.runs, comparison.summaries, strict=True)
        ],
        "paired": [p.model_dump(mode="json") for p in comparison.paired],
        "grid": [c.model_dump(mode="json") for c in comparison.cells],
    }
    return json.dumps(data, indent=2)

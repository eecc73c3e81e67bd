"""The size grid: accuracy per run (and condition) at each context size, targets and placement.

compare shows it as tables (one per task), plot as lines, sweep as its result; series()
joins a sweep's runs into rows, whatever grid option sets them apart.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from qmkar.deferred import DeferredModel
from qmkar.runs import Group, Run, labelled
from qmkar.score import wilson_interval
from qmkar.sizing import axis_params
from qmkar.tables import Accuracy, Table
from qmkar.tables import Cell as TableCell
from qmkar.tally import Counts, Tally, joined_tally
from qmkar.tasks import family
from qmkar.tokens import show_size


class Cell(DeferredModel):
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


# Task options a grid lays out as its own columns (size) and rows (targets, placement).
GRID_PARAMS = frozenset({"pairs", "targets", "queries", "length", "lengths", "placement"})


def series(runs: list[Run]) -> list[tuple[str, str, Tally]]:
    """Runs joined into grid rows: (task, label, their tallies joined), one per file and
    condition but for the grid's own options, labelled by what else sets it apart."""
    groups: dict[tuple[str, Path, str], list[Run]] = {}
    stripped = set(GRID_PARAMS)
    for run in runs:
        # A context sized in tokens: its target is the grid's axis, and what it sized too.
        axis = GRID_PARAMS | axis_params(run.task, run.condition.params)
        stripped |= axis
        key = (run.task, run.file, run.condition.without_params(axis).key())
        groups.setdefault(key, []).append(run)
    joined = labelled([Group(task, file, [], joined_tally([run.tally for run in members]))
                       for (task, file, _), members in groups.items()], strip=frozenset(stripped))
    return [(run.task, run.label, run.tally) for run in joined]


def grid(runs: list[Run]) -> list[Cell]:
    """Accuracy per grid row (series) and grid point, sorted by task, row, conditions and size."""
    cells = []
    order: dict[tuple[str, str], int] = {}
    for task, label, tally in series(runs):
        order[(task, label)] = len(order)
        points: dict[tuple[int, int | None, str | None], list[Counts]] = {}
        for point, counts in tally.points.items():
            points.setdefault((point.size, point.width, point.placement), []).append(counts)
        for (size, width, placement), found in points.items():
            n = sum(counts.n for counts in found)
            correct = sum(counts.correct for counts in found)
            cells.append(Cell(
                task=task, model=label, size=size, unit="tokens" if found[0].sized else size_unit(task),
                width=width, placement=placement, n=n, correct=correct,
                accuracy=correct / n if n else None, accuracy_ci=wilson_interval(correct, n),
                errors=sum(counts.others for counts in found),
            ))
    cells.sort(key=lambda c: (c.task, order[(c.task, c.model)], c.width or 0, c.placement or "", c.size))
    return cells


def spans_grid(cells: list[Cell]) -> bool:
    """Whether any run has answers at more than one grid point (worth a grid table)."""
    seen: dict[tuple[str, str], int] = {}
    for cell in cells:
        seen[(cell.task, cell.model)] = seen.get((cell.task, cell.model), 0) + 1
    return any(count > 1 for count in seen.values())


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

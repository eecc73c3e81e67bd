"""The one module that prints tables: named tables -> a terminal (rich), markdown, CSV or JSON.

report, compare, sweep and runs build `Table`s whose cells are values (numbers, and the
few shapes below that show as text but are numbers underneath); the CLI hands them
here with the format the user chose. On a terminal a table too wide for the screen is
folded into several, each repeating the table's leading key columns (the first, or as
many as the table declares: task, A and B of a paired test), so no column is ever dropped
and every part says which row is which. CSV
is one stream with one header: a `table` column, then every column of every table, with
numbers as numbers (a percentage as a fraction, an interval as two bounds).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from qmkar.errors import UsageError

FORMATS = ("table", "markdown", "csv", "json")
# Columns read as text (left-aligned); every other column but the first holds numbers.
TEXT_COLUMNS = frozenset({"A", "B", "task", "model", "run", "file", "placement", "note", "date",
                          "condition", "questions", "transcript", "batch", "submitted", "status"})
WIDEST = 40  # a number column is never squeezed below its widest cell, up to this many characters


class Pct(NamedTuple):
    """A proportion: shows as 37.5%, is 0.375 in CSV."""

    value: float | None

    def __str__(self) -> str:
        return "-" if self.value is None else f"{100 * self.value:.1f}%"


class Interval(NamedTuple):
    """A 95% interval: shows as 28-47%, is two bounds (fractions) in CSV."""

    low: float
    high: float

    def __str__(self) -> str:
        return f"{100 * self.low:.0f}-{100 * self.high:.0f}%"


class Count(NamedTuple):
    """Some of a whole, such as misses of targets: shows as 3/14 ('-' when the whole is 0),
    is two integers in CSV."""

    part: int
    whole: int

    def __str__(self) -> str:
        return f"{self.part}/{self.whole}" if self.whole else "-"


class Accuracy(NamedTuple):
    """A grid cell: shows as '75.0% (3/4) 1 err', is accuracy, correct, n and errors in CSV."""

    correct: int
    n: int
    errors: int = 0

    def __str__(self) -> str:
        text = "-" if self.n == 0 else f"{Pct(self.correct / self.n)} ({self.correct}/{self.n})"
        return text + (f" {self.errors} err" if self.errors else "")


class Shown(NamedTuple):
    """A number with its own display text (a p-value shown as <0.0001, a mean to 2 places)."""

    value: float | int | None
    text: str

    def __str__(self) -> str:
        return self.text


Cell = str | int | float | None | Pct | Interval | Count | Accuracy | Shown


class Table(NamedTuple):
    """A titled table of cells; its first `keys` columns name the row (repeated in each
    part when a terminal table is folded)."""

    title: str
    header: list[str]
    rows: list[list[Cell]]
    keys: int = 1


def text(cell: Cell) -> str:
    """How a cell reads on a terminal and in markdown."""
    return "" if cell is None else str(cell)


def numbers(column: str, cell: Cell) -> list[tuple[str, Any]]:
    """A cell as the CSV columns and values it becomes."""
    if isinstance(cell, Pct):
        return [(column, cell.value)]
    if isinstance(cell, Interval):
        return [(f"{column} low", cell.low), (f"{column} high", cell.high)]
    if isinstance(cell, Count):
        return [(f"{column} part", cell.part), (f"{column} whole", cell.whole)]
    if isinstance(cell, Accuracy):
        return [(f"{column} accuracy", cell.correct / cell.n if cell.n else None),
                (f"{column} correct", cell.correct), (f"{column} n", cell.n),
                (f"{column} errors", cell.errors)]
    if isinstance(cell, Shown):
        return [(column, cell.value)]
    return [(column, cell)]


def check_format(fmt: str, allowed: Iterable[str] = FORMATS) -> str:
    """The format, or a UsageError naming the ones this command prints."""
    allowed = tuple(allowed)
    if fmt not in allowed:
        raise UsageError(f"unknown --format {fmt!r}; choose one of: {', '.join(allowed)}")
    return fmt


def to_markdown(tables: list[Table]) -> str:
    parts = []
    for table in tables:
        parts.append(f"### {table.title}\n")
        parts.append("| " + " | ".join(table.header) + " |")
        parts.append("|" + "|".join("---" for _ in table.header) + "|")
        parts.extend("| " + " | ".join(text(cell).replace("|", "\\|") for cell in row) + " |"
                     for row in table.rows)
        parts.append("")
    return "\n".join(parts)


def to_csv(tables: list[Table]) -> str:
    """One header for the whole stream: `table`, then every column any table has."""
    flat: list[tuple[str, list[tuple[str, Any]]]] = []
    columns: dict[str, None] = {}
    for table in tables:
        for row in table.rows:
            values = [pair for name, cell in zip(table.header, row, strict=True)
                      for pair in numbers(name, cell)]
            columns.update(dict.fromkeys(name for name, _ in values))
            flat.append((table.title, values))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["table", *columns])
    for title, values in flat:
        found = dict(values)
        writer.writerow([title, *("" if found.get(name) is None else found[name] for name in columns)])
    return out.getvalue()


def _rich(title: str, header: list[str], rows: list[list[str]], columns: list[int],
          widths: list[int], keys: int = 1) -> RichTable:
    shown = RichTable(title=title, box=box.SIMPLE_HEAVY, title_justify="left")
    for index in columns:
        name = header[index]
        is_text = index < keys or name in TEXT_COLUMNS
        # A text column other than the first folds onto more lines if it must; numbers are
        # never squeezed.
        folds_text = is_text and index > 0
        floor = None if folds_text else min(widths[index], WIDEST)
        shown.add_column(name, justify="left" if is_text else "right", no_wrap=not folds_text,
                         overflow="fold", min_width=floor)
    for row in rows:
        shown.add_row(*(row[index] for index in columns))
    return shown


def folds(header: list[str], rows: list[list[str]], console: Console, keys: int = 1) -> list[list[int]]:
    """Column indexes of each table a too-wide table is folded into: every fold keeps
    the first `keys` columns and takes as many of the others, in order, as fit the
    console (as rich measures them)."""
    keys = max(1, min(keys, len(header)))
    widths = [max([len(name)] + [len(row[i]) for row in rows]) for i, name in enumerate(header)]
    unbounded = console.options.update(max_width=1_000_000)
    chunks: list[list[int]] = []
    current = list(range(keys))
    for index in range(keys, len(header)):
        wider = _rich("", header, rows, [*current, index], widths, keys)
        if len(current) > keys and wider.__rich_measure__(console, unbounded).maximum > console.width:
            chunks.append(current)
            current = list(range(keys))
        current.append(index)
    chunks.append(current)
    return chunks


def print_rich(tables: list[Table], console: Console) -> None:
    """Aligned terminal tables, folded to fit the console's width; long `note` cells become
    numbered footnotes under their table."""
    for table in tables:
        rows = [[text(cell) for cell in row] for row in table.rows]
        footnotes: dict[str, int] = {}
        if "note" in table.header:
            where = table.header.index("note")
            for row in rows:
                if row[where]:
                    row[where] = f"[{footnotes.setdefault(row[where], len(footnotes) + 1)}]"
        widths = [max([len(name)] + [len(row[i]) for row in rows]) for i, name in enumerate(table.header)]
        chunks = folds(table.header, rows, console, table.keys)
        for number, columns in enumerate(chunks, start=1):
            title = table.title if len(chunks) == 1 else f"{table.title} ({number}/{len(chunks)})"
            console.print(_rich(title, table.header, rows, columns, widths, table.keys))
        for note, number in footnotes.items():
            console.print(f"  [{number}] {note}", markup=False, highlight=False)


def show(console: Console, fmt: str, tables: list[Table], *, json: Callable[[], str],
         notes: Iterable[str] = ()) -> None:
    """Print in `fmt`: rich tables (each line of `notes` dimmed under them), markdown, CSV,
    or the caller's own JSON."""
    if fmt == "table":
        print_rich(tables, console)
        for line in notes:
            console.print(line, style="dim", markup=False, highlight=False)
        return
    rendered = json() if fmt == "json" else to_csv(tables) if fmt == "csv" else to_markdown(tables)
    console.print(rendered, markup=False, highlight=False, soft_wrap=True, end="" if fmt == "csv" else "\n")


VERDICT_STYLES = {"right": "green", "wrong": "red", "truncated": "yellow", "refused": "magenta",
                  "error": "bold red"}


def print_questions(views: Iterable[Any], console: Console) -> None:
    """`qmkar show`: each question as a titled block of field: text lines (coloured on a
    terminal by its verdict)."""
    for shown in views:
        console.print(f"{shown.verdict:<9} {shown.title}", style=VERDICT_STYLES.get(shown.verdict, ""),
                      markup=False, highlight=False)
        width = max(len(field) for field, _ in shown.lines)
        for field, value in shown.lines:
            console.print(f"  {field:<{width}}  {value}", markup=False, highlight=False, soft_wrap=True)
        console.print()


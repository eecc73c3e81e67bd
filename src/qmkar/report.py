"""Transcript records -> per (task, model) summaries -> tables, markdown, CSV or JSON.

Recall tasks get a questions table, a values table (FN by order) and, next to it, an
FN-by-depth table; the sequence tasks (parity, parity-ones, dyck, copy) get one
table with accuracy per context length (see `depth_rows`, `sequence_rows`).

The only module besides cli.py that prints; `summaries()` returns plain data that
the renderers format.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from qmkar.errors import UsageError
from qmkar.score import DEPTH_BUCKETS, FP_KINDS, Summary, summarize
from qmkar.tasks import SEQUENCE_TASKS
from qmkar.transcript import Record, latest, read

FORMATS = ("table", "markdown", "csv", "json")
RECALL_TASKS = ("qmkar", "mqar", "qmkar-kv", "mqar-kv")


def load(paths: Iterable[Path], warn=None) -> list[Record]:
    """Records from transcript files or folders of them (*.jsonl), in order."""
    records: list[Record] = []
    for path in paths:
        if path.is_dir():
            files = sorted(path.glob("*.jsonl"))
            if not files:
                raise UsageError(f"{path} holds no transcript (*.jsonl) files")
        elif path.exists():
            files = [path]
        else:
            raise UsageError(f"{path} does not exist")
        for file in files:
            contents = read(file)
            if contents.torn_bytes and warn is not None:
                warn(f"{file}: ignored an unfinished last line ({contents.torn_bytes} bytes) "
                     "left by a crash")
            records.extend(contents.records)
    return records


def summaries(records: Iterable[Record]) -> list[Summary]:
    """One summary per (task, model), the last record per question counting."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for record in latest(list(records)).values():
        groups.setdefault((record.item.task, record.model), []).append(record)
    result = []
    for (task, model), group in groups.items():
        answered = [r for r in group if r.error is None and r.score is not None]
        result.append(
            summarize(
                task, model,
                [r.score for r in answered],
                [r.error.kind for r in group if r.error is not None],
                refused=sum(1 for r in answered if r.parsed is not None and r.parsed.refused),
            )
        )
    return result


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ci(summary: Summary) -> str:
    low, high = summary.accuracy_ci
    return f"{100 * low:.0f}-{100 * high:.0f}%"


def rows(summary_list: list[Summary]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Blog-shaped tables as (header, rows), keyed by title.

    Recall tasks get two tables, one per question and one per value, so each fits a
    terminal; counting gets one.
    """
    tables: dict[str, tuple[list[str], list[list[str]]]] = {}
    for task in dict.fromkeys(s.task for s in summary_list):
        group = [s for s in summary_list if s.task == task]
        if task in SEQUENCE_TASKS:
            tables.update(sequence_rows(task, group))
            continue
        if task == "counting":
            header = ["model", "n", "exact", "accuracy", "95% CI", "MAE", "over", "under",
                      "unparsed", "errors"]
            body = [[s.model, str(s.n), str(s.exact), _pct(s.accuracy), _ci(s),
                     "-" if s.mae is None else f"{s.mae:.2f}", str(s.over), str(s.under),
                     str(s.unparsed), str(s.errors)] for s in group]
            tables[task] = (header, body)
            continue
        header = ["model", "n", "correct", "accuracy", "95% CI", "True", "F+FN",
                  "F+FP", "F+both", "errors"]
        body = [[s.model, str(s.n), str(s.correct), _pct(s.accuracy), _ci(s),
                 str(s.outcomes["true"]), str(s.outcomes["fn"]), str(s.outcomes["fp"]),
                 str(s.outcomes["both"]), str(s.errors)] for s in group]
        tables[f"{task}: questions"] = (header, body)
        width = max(len(s.fn_by_position) for s in group)
        header = (["model", "TP", "FP", "FN"] + [f"FN-Pos{i}" for i in range(width)]
                  + ["FP-near", "FP-other", "FP-invented"])
        body = []
        for s in group:
            positions = s.fn_by_position + [0] * (width - len(s.fn_by_position))
            body.append([s.model, str(s.tp), str(s.fp), str(s.fn)]
                        + [str(p) for p in positions]
                        + [str(s.fp_kinds[k]) for k in FP_KINDS])
        tables[f"{task}: values"] = (header, body)
        tables.update(depth_rows(task, group))
    return tables


def depth_rows(task: str, group: list[Summary]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """FN by depth bucket as "missed/targets" per bucket; empty when no score has depths
    (transcripts scored before depths existed: `qmkar rescore` adds them)."""
    if not any(sum(s.targets_by_depth) for s in group):
        return {}
    step = 100 // DEPTH_BUCKETS
    header = ["model"] + [f"FN-D{i * step}-{(i + 1) * step}%" for i in range(DEPTH_BUCKETS)]
    body = []
    for s in group:
        targets = s.targets_by_depth or [0] * DEPTH_BUCKETS
        missed = s.fn_by_depth or [0] * DEPTH_BUCKETS
        body.append([s.model] + [f"{m}/{t}" if t else "-" for m, t in zip(missed, targets, strict=True)])
    return {f"{task}: FN by depth": (header, body)}


def sequence_rows(task: str, group: list[Summary]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """One table per sequence task: accuracy overall and per context length (L32, L64...)."""
    lengths = sorted({length for s in group for length in s.by_length})
    header = ["model", "n", "correct", "accuracy", "95% CI"]
    if task == "copy":
        header.append("token acc")
    header += ["unparsed", "errors"] + [f"L{length}" for length in lengths]
    body = []
    for s in group:
        row = [s.model, str(s.n), str(s.correct), _pct(s.accuracy), _ci(s)]
        if task == "copy":
            row.append(_pct(s.token_accuracy))
        row += [str(s.unparsed or 0), str(s.errors)]
        for length in lengths:
            correct, n = s.by_length.get(length, (0, 0))
            row.append(_pct(correct / n) if n else "-")
        body.append(row)
    return {task: (header, body)}


def render_json(summary_list: list[Summary]) -> str:
    return json.dumps([s.model_dump(mode="json") for s in summary_list], indent=2)


def render_csv(summary_list: list[Summary]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    for title, (header, body) in rows(summary_list).items():
        writer.writerow(["table", *header])
        for row in body:
            writer.writerow([title, *row])
    return out.getvalue()


def render_markdown(summary_list: list[Summary]) -> str:
    parts = []
    for title, (header, body) in rows(summary_list).items():
        parts.append(f"### {title}\n")
        parts.append("| " + " | ".join(header) + " |")
        parts.append("|" + "|".join("---" for _ in header) + "|")
        parts.extend("| " + " | ".join(row) + " |" for row in body)
        parts.append("")
    return "\n".join(parts)


# (a column that needs explaining, its explanation); only those of shown tables print.
LEGEND = [
    ("F+FN", "F+FN / F+FP / F+both: wrong with missed values / with extra values / with both."),
    ("FN-Pos0", "FN-PosI: misses at the I-th target position (Pos0 first in the context)."),
    ("FP-near", "FP-near: the value of a key within 2 of the queried key or one digit apart."),
    ("FN-D0-20%", "FN-Dx-y%: misses/targets whose pair sits x-y% into the context."),
]


def print_tables(summary_list: list[Summary], console: Console) -> None:
    """Blog-shaped rich tables; F+FN reads "False with FN", and so on."""
    for title, (header, body) in rows(summary_list).items():
        table = Table(title=title, box=box.SIMPLE_HEAVY, title_justify="left")
        for index, name in enumerate(header):
            widest = max([len(name)] + [len(row[index]) for row in body])
            table.add_column(name, justify="left" if index == 0 else "right",
                             no_wrap=True, min_width=min(widest, 40))
        for row in body:
            table.add_row(*row)
        console.print(table)
    headers = {name for header, _ in rows(summary_list).values() for name in header}
    legend = [text for column, text in LEGEND if column in headers]
    if any(name[:1] == "L" and name[1:].isdigit() for name in headers):
        legend.append("LN: accuracy at context length N.")
    if legend:
        console.print("[dim]" + " ".join(legend) + "[/dim]")
    if any(s.errors for s in summary_list):
        console.print("[dim]errors: questions with no answer (not counted as wrong); "
                      "run the same eval again to retry them[/dim]")


def render(summary_list: list[Summary], fmt: str, console: Console) -> None:
    """Print the summaries in `fmt` (table goes through rich; the others are plain text)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown --format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    if fmt == "table":
        print_tables(summary_list, console)
        return
    text = {"json": render_json, "csv": render_csv, "markdown": render_markdown}[fmt](summary_list)
    console.print(text, markup=False, highlight=False, soft_wrap=True, end="" if fmt == "csv" else "\n")

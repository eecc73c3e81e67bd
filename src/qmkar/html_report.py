"""One self-contained HTML page: a summary per condition with its wrong answers (as `qmkar
show` lists them) in a collapsible section, the compare tables, and the plots, embedded
as base64 PNG.

Nothing is loaded from elsewhere (no scripts, fonts or stylesheets), so the file can
be mailed or attached to a review and opens the same offline.
"""

from __future__ import annotations

import base64
import io
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from shlex import quote

from matplotlib.colors import to_hex

from qmkar import __version__, browse, lengths
from qmkar.compare import Run, compare, notes, tables
from qmkar.errors import OutputError
from qmkar.lengths import DEFAULT_VIEW, View
from qmkar.outputs import is_transcript, probe, write_text
from qmkar.plot import DPI, figures
from qmkar.plot_style import Style, styles
from qmkar.score import Summary
from qmkar.tables import TEXT_COLUMNS, Cell, Interval, Pct, text
from qmkar.transcript import Record, whole_records

WRONG_SHOWN = 10  # wrong answers listed per condition; `qmkar show` lists them all
CELL_SHOWN = 160  # characters of a field shown in that list (a model may give hundreds of values)
# The fields of a `qmkar show` view listed for each wrong answer, and their column names.
WRONG_FIELDS = {"expected": "expected", "read as": "given", "at": "positions (depth)", "missed": "missed",
                "score": "score", "answer": "raw answer"}

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto;
       max-width: 1320px; padding: 0 1rem; color: #222; }
h1 { margin-bottom: 0.2rem; } .meta { color: #666; margin-top: 0; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; margin-top: 2.2rem; }
h3 { margin: 1.4rem 0 0.4rem; font-size: 1.05rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.88rem; }
th, td { padding: 0.25rem 0.6rem; border-bottom: 1px solid #e4e4e4; white-space: nowrap; }
th { background: #f4f4f4; text-align: right; } th:first-child, td:first-child { text-align: left; }
td { text-align: right; font-variant-numeric: tabular-nums; }
th.text, td.text, th.note { text-align: left; }
td.note { text-align: left; white-space: normal; min-width: 12rem; color: #555; }
tr:hover td { background: #fafafa; }
figure { margin: 1.2rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9rem; }
.notes { color: #555; font-size: 0.88rem; max-width: 60rem; }
code { background: #f4f4f4; padding: 0 0.2rem; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 2px; vertical-align: -0.1em;
          margin-right: 0.35rem; }
details { border: 1px solid #e4e4e4; border-radius: 4px; margin: 0.5rem 0; padding: 0.3rem 0.7rem; }
details[open] { padding-bottom: 0.7rem; }
summary { cursor: pointer; font-weight: 600; } summary .count { font-weight: normal; color: #555; }
td { vertical-align: top; }
td.wrap { white-space: normal; text-align: left; max-width: 28rem; overflow-wrap: anywhere; }
"""



def _table(title: str, header: list[str], body: list[list[Cell]], marks: list[str] | None = None,
           keys: int = 1) -> str:
    """A titled HTML table; names and notes read left-aligned, numbers right-aligned; `marks`
    (HTML) go before each row's first cell."""

    def kind(index: int) -> str:
        name = header[index]
        return "note" if name == "note" else "text" if index < keys or name in TEXT_COLUMNS else ""

    kinds = [kind(i) for i in range(len(header))]
    head = "".join(f'<th class="{k}">{escape(h)}</th>' for k, h in zip(kinds, header, strict=True))
    lines = []
    for number, row in enumerate(body):
        cells = "".join(f'<td class="{k}">{escape(text(c))}</td>' for k, c in zip(kinds, row, strict=True))
        if marks:
            cells = cells.replace(">", ">" + marks[number], 1)
        lines.append(f"<tr>{cells}</tr>")
    return (f"<h3>{escape(title)}</h3>\n<div class=\"scroll\"><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(lines)}</tbody></table></div>")


def _swatch(style: Style | None) -> str:
    """A square in the condition's plot colour, so a table row is easy to find in the figures."""
    if style is None:
        return ""
    color = to_hex(style.color)
    # A hatched style (the second round through the palette and on) is striped, as its bars are.
    fill = (f"repeating-linear-gradient(45deg, {color} 0 2px, #fff 2px 3.5px)" if style.hatch else color)
    return f'<span class="swatch" style="background: {fill}"></span>'


def _summary_rows(runs: list[Run], summaries: list[Summary]) -> list[list[Cell]]:
    """A row per condition, its numbers those of `qmkar report` (report.summarize_tally)."""
    return [[run.label, run.task, str(run.file), run.question_set, summary.n, summary.correct,
             Pct(summary.accuracy), Interval(*summary.accuracy_ci) if summary.n else None,
             summary.n - summary.correct, summary.errors]
            for run, summary in zip(runs, summaries, strict=True)]


def _clip(value: str, whole: str) -> str:
    """A field cut to CELL_SHOWN characters, saying how long `whole` (what it shows) is."""
    if len(value) <= CELL_SHOWN:
        return value
    values = whole.split("  ")[0].count(", ") + 1
    more = f"{values:,} values" if values > 1 and whole is value else f"{len(whole):,} characters"
    return f"{value[:CELL_SHOWN].rstrip(', ')} ... ({more} in all)"


def _show_command(run: Run, flag: str) -> str:
    model = run.records[0].label or run.records[0].model
    return f"qmkar show {quote(str(run.file))} {flag} --model {quote(model)}"


def _wrong_answers(runs: list[Run]) -> dict[tuple[str, str, int], Record]:
    """The whole records of the wrong answers each section shows, one pass per file."""
    wanted: dict[Path, set[tuple[str, str, int]]] = {}
    for run in runs:
        wrong = [r.key for r in run.records if r.answered and not r.correct][:WRONG_SHOWN]
        wanted.setdefault(run.file, set()).update(wrong)
    return {key: record for file, keys in wanted.items() for key, record in whole_records(file, keys).items()}


def _condition(run: Run, summary: Summary, style: Style | None,
               full: dict[tuple[str, str, int], Record]) -> str:
    """One collapsible section: what the condition is, and its first wrong answers."""
    wrong = [r for r in run.records if r.answered and not r.correct]
    accuracy = text(Pct(summary.accuracy))
    head = (f"<summary>{_swatch(style)}{escape(run.label)} <span class=\"count\">&middot; {escape(run.task)} "
            f"&middot; accuracy {accuracy} ({summary.correct}/{summary.n}) &middot; "
            f"{summary.n - summary.correct} wrong &middot; {summary.errors} errors</summary>")
    condition = run.condition
    settings = ", ".join(f"{k}={v}" for k, v in sorted(condition.settings.items())) or "-"
    params = ", ".join(f"{k}={v}" for k, v in sorted(condition.params.items())) or "-"
    parts = [head, f'<p class="notes">condition <code>{escape(condition.key())}</code>: provider '
             f"{escape(condition.provider)}, model <code>{escape(condition.model)}</code>, "
             f"options {escape(params)}; settings {escape(settings)}; "
             f"from <code>{escape(str(run.file))}</code></p>"]
    if wrong:
        views = [(browse.view(full[r.key]), full[r.key]) for r in wrong[:WRONG_SHOWN] if r.key in full]
        head_row = "".join(f'<th class="text">{escape(h)}</th>' for h in ["question", *WRONG_FIELDS.values()])
        body = []
        for shown, record in views:
            fields = dict(shown.lines)
            # The raw answer is already cut by `qmkar show`; its length is the record's.
            wholes = {**fields, "answer": record.answer or ""}
            cells = "".join(f'<td class="wrap">{escape(_clip(fields.get(name, "-"), wholes.get(name, "-")))}'
                            "</td>" for name in WRONG_FIELDS)
            body.append(f'<tr><td class="text">{escape(shown.title)}</td>{cells}</tr>')
        parts.append(f"<h3>wrong answers</h3><div class=\"scroll\"><table><thead><tr>{head_row}</tr></thead>"
                     f"<tbody>{''.join(body)}</tbody></table></div>")
        more = len(wrong) - len(views)
        parts.append(f'<p class="notes">{f"{more} more wrong answers not shown; " if more else ""}every one: '
                     f"<code>{escape(_show_command(run, '--wrong'))}</code></p>")
    elif summary.n:
        parts.append('<p class="notes">no wrong answers.</p>')
    if summary.errors:
        parts.append(f'<p class="notes">{summary.errors} questions have no answer; why: '
                     f"<code>{escape(_show_command(run, '--errors'))}</code></p>")
    return "<details>" + "\n".join(parts) + "</details>"


def _png_data(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def page(runs: list[Run], sources: list[str], view: View = DEFAULT_VIEW) -> str:
    """The whole report page as a string (`view`: how lengths.py shows the length axis)."""
    comparison = compare(runs)
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>qmkar report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>qmkar report</h1>",
        f'<p class="meta">qmkar {escape(__version__)} &middot; {made} &middot; from '
        + ", ".join(f"<code>{escape(s)}</code>" for s in sources) + "</p>",
        "<h2>Conditions</h2>",
    ]
    look = styles(runs)
    header = ["run", "task", "file", "questions", "answered", "correct", "accuracy", "95% CI", "wrong",
              "errors"]
    summaries = comparison.summaries  # compare's own, one per run
    parts.append(_table("one model under one condition on one task in one transcript", header,
                        _summary_rows(runs, summaries), [_swatch(look.get(run.label)) for run in runs]))
    parts.append('<p class="notes">Open a condition for what it is and its wrong answers '
                 f"(the first {WRONG_SHOWN}, as <code>qmkar show --wrong</code> lists them).</p>")
    full = _wrong_answers(runs)
    parts.extend(_condition(run, summary, look.get(run.label), full)
                 for run, summary in zip(runs, summaries, strict=True))
    parts.append("<h2>Tables</h2>")
    shown = tables(comparison)
    along = lengths.tables(runs, view)
    for table in shown + along:
        parts.append(_table(table.title, table.header, table.rows, keys=table.keys))
    explained = " ".join([notes(shown), *lengths.notes(along, runs, view)])
    parts.append(f'<p class="notes">{escape(explained)}</p>')
    named = figures(runs, view)
    if named:
        parts.append("<h2>Figures</h2>")
    for figure in named:
        parts.append(
            # Shown at 96 CSS px per inch so every figure's text has the same size on the page.
            f'<figure><img alt="{escape(figure.title)}" '
            f'style="width: {round(figure.figure.get_figwidth() * 96)}px" '
            f'src="data:image/png;base64,{_png_data(figure.figure)}">'
            f"<figcaption>{escape(figure.title)}</figcaption></figure>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def check_output(path: Path, sources: list[Path]) -> None:
    """Refuse, before anything is read, an output that is a folder, one of the transcripts
    read, or any qmkar transcript (the page would replace it)."""
    found = probe(path)
    if found == "folder":
        raise OutputError(f"cannot write {path}: it is a folder; give a file name, for example "
                          f"{path / 'report.html'}")
    if found == "file" and (is_transcript(path) or any(path.resolve() == s.resolve() for s in sources)):
        raise OutputError(f"{path} is a qmkar transcript and the report would replace it; choose another "
                          "-o, for example report.html")


def write(runs: list[Run], path: Path, sources: list[str], view: View = DEFAULT_VIEW) -> int:
    """Write the report to `path` whole or not at all; return its size in bytes."""
    return write_text(path, page(runs, sources, view))

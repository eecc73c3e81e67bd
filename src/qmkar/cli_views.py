"""The commands that look rather than ask: show (question by question), runs (run by
run), models (the providers a name can start with).

Registered on the `qmkar` app by cli.py; the data comes from browse.py and the provider
registry, the printing from tables.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from qmkar import browse, pricing, tables
from qmkar.cli_progress import ReadingBar
from qmkar.commandline import out, user_errors
from qmkar.errors import UsageError
from qmkar.providers import registry

FilesArg = Annotated[list[Path], typer.Argument(help="Transcript files or folders of them.")]


def show_command(
    files: FilesArg,
    wrong: Annotated[bool, typer.Option("--wrong", help="Only questions answered wrong.")] = False,
    errors: Annotated[bool, typer.Option("--errors", help="Only questions with no answer.")] = False,
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-m", metavar="NAME", help="Only this model (name or --label); repeat.")] = None,
    item_id: Annotated[list[str] | None, typer.Option(
        "--id", metavar="ID", help="Only questions whose id starts with this; repeat for several.")] = None,
) -> None:
    """Show questions one by one: what was asked and expected (and where in the context), the
    raw answer, how it was read and scored, or why there is no answer. Paged on a terminal."""
    with user_errors(), ReadingBar("reading") as bar:
        keep = browse.Filter(wrong, errors, tuple(model or ()), tuple(item_id or ()))
        views = browse.questions(files, keep, bar)
        if not views:
            raise UsageError("no question matches: the transcripts hold none that --wrong / --errors / "
                             "--model / --id keep")
    counts = ", ".join(f"{n} {verdict}" for verdict, n in browse.question_count(views).items())
    if out.is_terminal:
        with out.pager(styles=True):
            tables.print_questions(views, out)
            out.print(f"{len(views)} questions: {counts}", markup=False)
    else:
        tables.print_questions(views, out)
        out.print(f"{len(views)} questions: {counts}", markup=False)


def runs_command(
    files: Annotated[list[Path] | None, typer.Argument(
        help="Transcript files or folders of them [results/].")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, markdown, csv or json.")] = "table",
    prices: Annotated[Path | None, typer.Option(
        help="TOML file of prices overriding the shipped table [$QMKAR_PRICES].")] = None,
) -> None:
    """List the runs in transcripts: one line per invocation and condition, with the date,
    model, task, answers, accuracy, errors and the cost estimate."""
    with user_errors():
        tables.check_format(fmt)
        with ReadingBar("reading") as bar:
            listed = browse.runs(files or [Path("results")], pricing.load_prices(prices), bar)
        tables.show(out, fmt, [listed], json=lambda: runs_json(listed))


def runs_json(listed: tables.Table) -> str:
    import json

    return json.dumps([{name: value for name, cell in zip(listed.header, row, strict=True)
                        for name, value in tables.numbers(name, cell)} for row in listed.rows], indent=2)


def models_command() -> None:
    """List the providers a --model name can start with."""
    for prefix in sorted(registry.PROVIDERS):
        out.print(Text.assemble((prefix, "bold"), f"  {registry.DESCRIPTIONS.get(prefix, '')}"))


COMMANDS = {"show": show_command, "runs": runs_command, "models": models_command}


def export_command(
    files: Annotated[list[Path], typer.Argument(help="Transcript files or folders of them.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="inspect: the .eval file (one log) or a "
                                         "folder; eee: the folder that gets data/...")],
    fmt: Annotated[str, typer.Option("--format", help="inspect (inspect_ai .eval logs) or eee "
                                     "(Every Eval Ever records).")] = "inspect",
    organization: Annotated[str, typer.Option(
        help="eee: who publishes the records (source_organization_name).")] = "qmkar user",
) -> None:
    """Write transcripts in the formats other tools read: one log per task and condition."""
    from qmkar import export

    with user_errors(), ReadingBar("reading") as bar:
        tables.check_format(fmt, export.FORMATS)
        written = (export.to_inspect(files, output, bar) if fmt == "inspect"
                   else export.to_eee(files, output, organization, bar))
    for path in written:
        out.print(f"wrote {path}", highlight=False)


COMMANDS["export"] = export_command

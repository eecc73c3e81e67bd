"""`qmkar batch ...`: the batches a transcript's runs submitted with `eval --batch`.

`status` lists them with what their provider says now; `cancel` stops them (what they
finished is collected by the next run of their command). The logic is batch/manage.py's,
imported by each command when it runs: it brings asyncio, which no other command but a run
needs at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from qmkar import tables
from qmkar.commandline import OneEach, OneLineGroup, err, out, user_errors

batch_app = typer.Typer(help="Batches submitted with `qmkar eval --batch`: their status, or cancel them.",
                        no_args_is_help=True, rich_markup_mode=None, cls=OneLineGroup)
PathsArg = Annotated[list[Path] | None, typer.Argument(
    help="Transcripts (or folders of them) whose batches to show [results/].")]


@batch_app.command("status", cls=OneEach)
def status_command(
    files: PathsArg = None,
    fmt: Annotated[str, typer.Option("--format", help="table, markdown, csv or json.")] = "table",
) -> None:
    """List the batches of transcripts and their state (running ones as the provider says now)."""
    from qmkar.batch import manage

    with user_errors():
        tables.check_format(fmt)
        table = manage.status_table(files or [])
        tables.show(out, fmt, [table], json=lambda: manage.to_json(table))


@batch_app.command("cancel", cls=OneEach)
def cancel_command(
    files: PathsArg = None,
    batch_id: Annotated[str | None, typer.Option("--batch-id", help="Cancel only this batch.")] = None,
) -> None:
    """Cancel the running batches of transcripts; answers they finished stay collectable."""
    from qmkar.batch import manage

    with user_errors():
        lines = manage.cancel(files or [], batch_id)
    for line in lines:
        (err if line.startswith("could not") else out).print(line, markup=False, highlight=False)
    if any(line.startswith("could not") for line in lines):
        raise typer.Exit(code=1)

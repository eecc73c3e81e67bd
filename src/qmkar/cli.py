"""The `qmkar` command: maps options to the pipeline's plans and runs, and prints what it returns.

Each command checks its options, calls the stages (tasks, runner, report, compare,
sweep, plot) and hands their tables to tables.py. Task options come from the task
families (tasks.option_specs), defaults from defaults.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from qmkar import (
    __version__,
    cli_eval,
    cli_sweep,
    cli_views,
    compare,
    defaults,
    lengths,
    offload,
    outputs,
    rescore,
    runs,
    tables,
    tokens,
)
from qmkar import reference as reference_rows
from qmkar.cli_batch import batch_app
from qmkar.cli_context import describe_sizes, show_report
from qmkar.cli_progress import ReadingBar
from qmkar.commandline import (
    ContextOptions,
    OneEach,
    OneLineGroup,
    out,
    stop_on_sigterm,
    user_errors,
    warning_line,
    with_context_options,
    with_length_options,
    with_selection,
    with_task_options,
)
from qmkar.errors import UsageError
from qmkar.lengths import View
from qmkar.plans import GeneratedPlan
from qmkar.selection import Selection
from qmkar.sizing import Sizing
from qmkar.tasks import FAMILIES, make_spec
from qmkar.tasks.datasets import write_items

app = typer.Typer(
    help="Stress-test language models on associative recall: QMKAR, MQAR and counting.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    # Help texts show defaults as [500]; without this, rich would read them as markup tags.
    rich_markup_mode=None,
    cls=OneLineGroup,
)
TaskOpt = Annotated[str, typer.Option("--task", "-t", help=f"Task: {', '.join(FAMILIES)}.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed; the same seed gives the same data.")]
ModelOpt = Annotated[list[str], typer.Option(
    "--model", "-m", help="Model to ask; repeat for several. `qmkar models` lists them.")]
TemplateOpt = Annotated[Path | None, typer.Option(
    help="Prompt template file to use instead of the built-in one.")]
FormatOpt = Annotated[str, typer.Option("--format", help="table, markdown, csv or json.")]
FilesArg = Annotated[list[Path], typer.Argument(help="Transcript files or folders of them.")]


@app.command("generate", cls=OneEach)
@with_task_options()
@with_context_options
def generate_command(
    output: Annotated[Path, typer.Option("--output", "-o", help="Dataset file to write (JSONL).")],
    task_options: dict[str, Any],
    context: ContextOptions | None,
    task: TaskOpt = "qmkar",
    n: Annotated[int, typer.Option("-n", help="Number of questions (of each size with --context-tokens).")]
    = defaults.GENERATE_N,
    seed: SeedOpt = defaults.SEED,
    force: Annotated[bool, typer.Option(help="Allow replacing an existing OUTPUT.")] = False,
) -> None:
    """Write a dataset of N questions, one JSON item per line (schema in README.md)."""
    with user_errors():
        sizing = None if context is None else Sizing(
            context.targets, tokens.counter(tokens.tokenizer_name(context.tokenizer or tokens.DEFAULT)))
        plan = GeneratedPlan(make_spec(task, **task_options), n, seed, sizing)
        outputs.refuse_existing(output, force)  # after the options, before any work
        describe_sizes(plan)
        count = write_items(plan.items(), output, force)
    out.print(f"wrote {count} {task} items to {output}")


app.command("eval", cls=OneEach)(cli_eval.eval_command)


@app.command("report", cls=OneEach)
@with_selection
@with_length_options
def report_command(
    files: FilesArg,
    selection: Selection,
    length: View,
    fmt: Annotated[str, typer.Option(
        "--format", help="table, markdown, csv, json, or html (needs -o).")] = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="html: the file to write.")] = None,
) -> None:
    """Print blog-style tables per task and model from transcripts (no network).

    Rows asked at several lengths (sweeps, --context-tokens) also get recall by depth and
    length, and their effective context length. --format html -o FILE writes one
    self-contained page instead: the `compare` tables and the `plot` figures embedded.
    """
    with user_errors():
        if fmt == "html" or output is not None:
            _write_html_report(files, fmt, output, selection, length)
            return
        tables.check_format(fmt)
        with ReadingBar("reading") as bar:  # counted file by file as they are read
            counted = runs.count_latest(files, _warn, selection, bar)
        show_report(counted, fmt, length)


@app.command("rescore", cls=OneEach)
def rescore_command(
    file: Annotated[Path, typer.Argument(help="Transcript to rescore.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the rescored transcript.")],
    force: Annotated[bool, typer.Option(help="Allow overwriting OUTPUT, even when it is FILE.")] = False,
) -> None:
    """Parse and score the stored answers again (after a parser fix); asks no model."""
    with user_errors(), ReadingBar("rescoring") as bar:
        done = rescore.rescore(file, output, force, bar)
    out.print(f"rescored {done.records} records ({done.changed} changed) into {output}")


def _warn(message: str) -> None:
    warning_line(message)


def _write_html_report(files: list[Path], fmt: str, output: Path | None, selection: Selection,
                       length: View) -> None:
    from qmkar import html_report

    if fmt != "html":
        raise UsageError(f"-o writes an html report; pass --format html (not {fmt!r}) or drop -o")
    if output is None:
        raise UsageError("--format html writes a file: add -o FILE, for example -o report.html")
    html_report.check_output(output, files)
    with ReadingBar("reading") as bar:
        found = compare.load_runs(files, warn=_warn, selection=selection, progress=bar)
    size = html_report.write(found, output, sources=[str(f) for f in files], view=length)
    out.print(f"wrote {output} ({size / 1024:.0f} KiB)")


@app.command("compare", cls=OneEach)
@with_selection
@with_length_options
def compare_command(
    files: FilesArg,
    selection: Selection,
    length: View,
    fmt: FormatOpt = "table",
    baseline: Annotated[str | None, typer.Option(
        help="Pair every run with this one only (a label or model name shown).")] = None,
    reference: Annotated[str | None, typer.Option(
        help="Show published results beside yours: blog (its 20-question tables, a different sample).")]
    = None,
) -> None:
    """Compare runs side by side: one row per model and task, paired tests (no network).

    Two runs on the same questions also get a paired breakdown (both right, only A,
    only B, neither) and an exact McNemar p-value. Runs on different questions are
    shown but never paired. The same model in two files is two rows. Rows asked at
    several lengths get recall by depth and length (and its difference between rows) and
    their effective context length.
    """
    with user_errors():
        tables.check_format(fmt)
        published = reference_rows.check(reference)
        with ReadingBar("reading") as bar:
            runs = compare.load_runs(files, warn=_warn, selection=selection, progress=bar)
        comparison = compare.compare(runs, baseline)
        shown = compare.tables(comparison)
        along = lengths.tables(runs, length)
        beside = reference_rows.tables(runs, reference) if published and reference else []
        text = lambda: lengths.with_json(compare.to_json(comparison), runs, length)  # noqa: E731
        tables.show(out, fmt, shown + along + beside,
                    json=lambda: reference_rows.with_json(text(), reference) if reference else text(),
                    notes=[compare.notes(shown), *lengths.notes(along, runs, length),
                           *(reference_rows.notes(reference) if reference else [])])


app.command("sweep", cls=OneEach)(cli_sweep.sweep_command)


@app.command("plot", cls=OneEach)
@with_selection
@with_length_options
def plot_command(
    files: FilesArg,
    selection: Selection,
    length: View,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the PNG files to.")],
) -> None:
    """Draw PNG figures from transcripts (no network).

    Accuracy against context size with 95% bands, FN by target position and by
    depth, FP kinds, counting errors; for rows asked at several lengths, recall by depth
    and length (heatmaps, and their differences) and the effective length: one PNG each,
    for the tasks present.
    """
    with user_errors():
        from qmkar import plot

        plot.check_folder(output)
        with ReadingBar("reading") as bar:
            found = runs.count_runs(files, _warn, selection, bar)  # the figures read tallies only
        written = plot.write_all(found, output, length)
        if not written:
            raise UsageError("nothing to plot: the transcripts hold no answered questions")
    for path in written:
        out.print(f"wrote {path}")


for _name, _command in cli_views.COMMANDS.items():
    app.command(_name, cls=OneEach)(_command)  # type: ignore[type-var]


app.add_typer(batch_app, name="batch")


def version_callback(value: bool) -> None:
    if value:
        out.print(f"qmkar {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Stress-test language models on associative recall: QMKAR, MQAR and counting."""


def main() -> None:
    # Every command, not only a run, ends on SIGTERM (timeout, systemd, Slurm, docker stop)
    # through its `finally` blocks: rescore's temporary output and workers are removed as
    # on Ctrl-C. Python's default would end the process where it stands.
    stop_on_sigterm()
    try:
        app()
    finally:
        offload.stop_all()
        for said in offload.failures():
            warning_line(f"a helper process of qmkar failed, and the command did its work without it "
                         f"(the same results, only slower); please report it. It said: {said}")
        offload.end_uncollected()

"""`qmkar sweep`: a grid of cells asked of models, or the search for their effective length.

Registered on the app in cli.py. The grid is sweep.SweepPlan's; the search is search.py's
(one model at a time, each step a run into the same transcript). This module maps options
to those and prints what they return.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from qmkar import compare, defaults, lengths, search, sweep, tables
from qmkar.cli_progress import ReadingBar
from qmkar.commandline import (
    ContextOptions,
    build_run,
    check_numbers,
    err,
    execute,
    finish,
    out,
    user_errors,
    with_context_options,
    with_length_options,
    with_send_options,
    with_task_options,
)
from qmkar.errors import UsageError
from qmkar.lengths import View
from qmkar.plans import Plan, SendOptions
from qmkar.providers import registry
from qmkar.providers.base import Provider
from qmkar.readprogress import begin
from qmkar.render import Templates
from qmkar.runs import tallied_runs
from qmkar.sizing import for_models
from qmkar.slim import SlimReading
from qmkar.tally import Tally, tallies
from qmkar.tasks import FAMILIES
from qmkar.tokens import show_size
from qmkar.transcript import latest

if TYPE_CHECKING:
    from qmkar.runner import Run

SEARCH_HELP = ("Search for each model's effective context length instead of asking the whole grid: "
               "the --context-tokens sizes from the shortest up, then bisection between the last "
               "passing and the first failing size (docs/compare.md).")


@with_task_options(axes=sweep.AXES)
@with_context_options
@with_send_options
@with_length_options
def sweep_command(
    model: Annotated[list[str], typer.Option(
        "--model", "-m", help="Model to ask; repeat for several. `qmkar models` lists them.")],
    task_options: dict[str, Any],
    context: ContextOptions | None,
    send: SendOptions,
    length: View,
    task: Annotated[str, typer.Option("--task", "-t", help=f"Task: {', '.join(FAMILIES)}.")] = "qmkar",
    n: Annotated[int, typer.Option("-n", help="Questions per grid cell (with --find-effective-length: at "
                                   "most, per size).")] = defaults.SWEEP_N,
    seed: Annotated[int, typer.Option(
        "--seed", help="Seed; the same seed gives the same data.")] = defaults.SEED,
    template: Annotated[Path | None, typer.Option(
        help="Prompt template file to use instead of the built-in one.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Transcript file [results/sweep-<task>-n<N>-seed<S>.jsonl].")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, markdown, csv or json.")] = "table",
    find_effective_length: Annotated[bool, typer.Option("--find-effective-length", help=SEARCH_HELP)] = False,
    bracket: Annotated[float, typer.Option(help="The search stops when the effective length is bracketed "
                                           "within this factor.")] = defaults.SEARCH_BRACKET,
    look_every: Annotated[int, typer.Option(help="The search asks this many questions at a size between two "
                                            "looks at its interval.")] = defaults.SEARCH_LOOK_EVERY,
) -> None:
    """Ask every cell of a grid (pairs x targets ...) of N questions, print accuracy per cell.

    All cells go to one transcript; each record's item carries its cell in
    params.cell. Running the same command again resumes, like eval; widening the
    grid later asks only the new cells. --context-tokens 1k..64k makes the sizes an axis
    in tokens; --find-effective-length searches it instead of asking every size.
    """
    with user_errors():
        tables.check_format(fmt)
        check_numbers({"bracket": bracket, "look_every": look_every}, SEARCH_BOUNDS)
        models = list(dict.fromkeys(model))
        templates = Templates.for_run(task, template)
        sizing = None if context is None else for_models(
            context.targets, context.tokenizer, models, send.provider_options(), templates(task))
        plan = sweep.SweepPlan(task, task_options, n, seed, sizing)
        path = output or defaults.RESULTS_DIR / f"{plan.name}.jsonl"
        providers = [registry.resolve(name, send.provider_options()) for name in models]

        def make_run(asked: Plan, who: list[Provider]) -> Run:
            return build_run(asked, who, path, templates, send)

        if find_effective_length:
            _search(plan, providers, path, templates, make_run, send, length, fmt, bracket, look_every)
            return
        err.print(f"sweep: {len(plan.cells)} cells x {n} questions x {len(models)} model(s)")
        run = make_run(plan, providers)
        result, found = execute(plan, run, plan.ids())
        _show_grid(found, path, fmt, length)
        err.print(f"transcript: {path}")
        finish(result, found, run)


# The search's own numbers: a bracket under 1.01 would ask hundreds of sizes per doubling.
SEARCH_BOUNDS = {"bracket": (1.01, 64.0), "look_every": (1, 100_000)}


def _show_grid(found: list[Tally], path: Path, fmt: str, length: View,
               searches: list[dict[str, Any]] | None = None) -> None:
    runs = tallied_runs(found, path)
    cells = compare.grid(runs)
    along = lengths.tables(runs, length)

    def as_json() -> str:
        if searches is None:
            return sweep.grid_json(cells)
        grid = [c.model_dump(mode="json") for c in cells]
        return json.dumps({"searches": searches, "grid": grid}, indent=2)

    tables.show(out, fmt, compare.grid_tables(cells) + along, json=as_json,
                notes=[sweep.GRID_NOTE, *lengths.notes(along, runs, length)])


def _search(plan: sweep.SweepPlan, providers: list[Provider], path: Path, templates: Templates,
            make_run: Callable[[Plan, list[Provider]], Run], send: SendOptions, length: View,
            fmt: str, bracket: float, look_every: int) -> None:
    """Each model's search, one after the other; then every answer they hold, as a grid."""
    if plan.sizing is None:
        raise UsageError("--find-effective-length searches over --context-tokens: give two sizes or more, "
                         "for example --context-tokens 1k..64k")
    if len(plan.base_specs) != 1:
        raise UsageError("--find-effective-length varies only --context-tokens; give one value for "
                         "--targets, --placement and the other axes")
    if send.samples > 1:
        raise UsageError("--find-effective-length asks each question once; leave out --samples")
    if send.batch:
        raise UsageError("--find-effective-length decides each step on the last one's answers; leave out "
                         "--batch")
    settings = search.Settings(plan.sizing.targets, bracket, look_every, plan.n, length.rule)

    def ask(asked: Plan, who: list[Provider]) -> None:
        execute(asked, make_run(asked, who), steps=True)

    results, searches = [], []
    for provider in providers:
        finder = search.Search(settings)
        err.print(f"searching {provider.name}: sizes {', '.join(map(show_size, finder.fine))} tokens")
        asker = search.TranscriptSearch(plan.base_specs[0], plan.seed, plan.sizing, provider, path, templates,
                                        send.settings(), ask, plan.n)
        found = search.find(finder, asker)
        results.append(search.found_line(provider.name, found))
        searches.append(search.found_json(provider.name, found))
        if fmt != "json":
            tables.show(out, fmt, [search.found_table(plan.task, provider.name, found)], json=str)
    names = {p.name for p in providers}
    with ReadingBar("reading the answers") as bar:
        begin(bar, [path])
        counted = tallies(r for r in latest(SlimReading(path, progress=bar)).values() if r.model in names)
    _show_grid(counted, path, fmt, length, searches)
    for line in results:
        (out if fmt == "table" else err).print(line, highlight=False, markup=False)
    err.print(f"transcript: {path}")

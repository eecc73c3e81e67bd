"""The command line's side of context length: eval's questions sized in tokens, and the
report that adds the length tables (depth x length heatmaps, effective lengths).

Used by cli.py's generate and report and cli_eval.py's eval; the options themselves (--context-tokens,
--tokenizer, --pass, --pass-relative, --by-tokens) are option families in commandline.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qmkar import lengths, report, tables
from qmkar.cli_progress import ReadingBar
from qmkar.commandline import ContextOptions, err, out
from qmkar.errors import UsageError
from qmkar.lengths import View
from qmkar.plans import DatasetPlan, GeneratedPlan, Plan, SendOptions
from qmkar.render import Templates
from qmkar.runs import tallied_runs
from qmkar.sizing import for_models
from qmkar.tally import Tally
from qmkar.tasks import make_spec


def dataset_plan(path: Path, n: int | None) -> DatasetPlan:
    """A dataset's plan, its questions checked with a bar (seconds for 100k questions)."""
    with ReadingBar("checking the dataset") as bar:
        return DatasetPlan(path, n, bar)


def eval_plan(dataset: Path | None, task: str | None, task_options: dict[str, Any],
              context: ContextOptions | None, template: Path | None, models: list[str], send: SendOptions,
              n: int | None, seed: int) -> tuple[Plan, Templates]:
    """eval's questions and templates: a dataset's items, or n generated (of each token size)."""
    if dataset is not None and (task_options or context):
        raise UsageError("task options (--pairs, --targets, --context-tokens, ...) do not apply to "
                         "--dataset; the dataset already fixes them")
    if dataset is not None:
        plan: Plan = dataset_plan(dataset, n)
        if task is not None and task != plan.task:
            raise UsageError(f"--task {task} does not match the dataset, whose items are {plan.task}")
        return plan, Templates.for_run(plan.task, template)
    chosen = task or "qmkar"
    templates = Templates.for_run(chosen, template)
    sizing = None if context is None else for_models(
        context.targets, context.tokenizer, models, send.provider_options(), templates(chosen))
    assert n is not None  # the caller fills in the default for generated questions
    generated = GeneratedPlan(make_spec(chosen, **task_options), n, seed, sizing)
    describe_sizes(generated)
    return generated, templates


def describe_sizes(plan: GeneratedPlan) -> None:
    """What each --context-tokens size became (pairs, keys, tokens counted), on stderr."""
    if plan.sizing is not None:
        for line in plan.sizing.describe(plan.fits):
            err.print(line, highlight=False, markup=False)


def show_report(found: list[Tally], fmt: str, length: View) -> None:
    """report's tables, then the heatmaps and effective lengths of rows spanning lengths, of
    answers counted per task and condition (tally.py)."""
    summaries = report.tally_summaries(found)
    runs = tallied_runs(found, Path("."))
    shown = report.tables(summaries)
    along = lengths.tables(runs, length)
    tables.show(out, fmt, shown + along, json=lambda: report.to_json(summaries),
                notes=report.notes(summaries, shown) + lengths.notes(along, runs, length))

"""`qmkar eval`: models asked questions (generated, one or more datasets, or a preset's), every
answer written to a transcript, the scores printed.

Registered on the app in cli.py. A run is planned as jobs, one per dataset and group of
models sent the same settings, each into its dataset's transcript; they run one after the
other and one report follows. The preset format is presets/'s, the blog's problem sets by
name blogsets.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

from qmkar import blogsets, defaults, presets, pricing, tables
from qmkar.cli_context import dataset_plan, eval_plan, show_report
from qmkar.commandline import (
    ContextOptions,
    build_run,
    display_names,
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
from qmkar.plans import GeneratedPlan, Plan, SendOptions
from qmkar.providers import registry, rules
from qmkar.providers.endpoints import find
from qmkar.render import Templates, render
from qmkar.tally import Tally
from qmkar.tasks import FAMILIES, make_spec

if TYPE_CHECKING:
    from qmkar.runner import RunResult


class Job(NamedTuple):
    """Some models asked one set of questions with the same settings, into one transcript."""

    dataset: str  # as the user named it (a file, blog:qmkar), or the generated task
    plan: Plan
    templates: Templates
    models: list[str]
    send: SendOptions
    labels: dict[str, str]
    path: Path
    notes: dict[str, str]  # model -> the preset's note on it


def dataset_path(text: str) -> Path:
    """A --dataset value as a file: a blog set by name (fetched and kept if need be), or a path."""
    if blogsets.is_named(text):
        return blogsets.path_for(text, note=lambda line: err.print(line, markup=False, highlight=False))
    return Path(text)


def _plans(datasets: list[str], task: str | None, task_options: dict[str, Any],
           context: ContextOptions | None, template: Path | None, models: list[str], send: SendOptions,
           n: int | None, seed: int) -> list[tuple[str, Plan, Templates]]:
    if not datasets:
        plan, templates = eval_plan(None, task, task_options, context, template, models, send,
                                    defaults.EVAL_N if n is None else n, seed)
        return [(plan.task, plan, templates)]
    if len(set(datasets)) != len(datasets):
        raise UsageError("a --dataset is given twice; give each once")
    return [(text, *eval_plan(dataset_path(text), task, task_options, context, template, models, send, n,
                              seed)) for text in datasets]


def _output(plan: Plan, output: Path | None, several: bool, folder: Path = defaults.RESULTS_DIR) -> Path:
    """One set of questions: -o FILE or the default. Several: each its own transcript, in -o DIR."""
    if not several:
        return output or folder / f"{plan.name}.jsonl"
    if output is not None and output.is_file():
        raise UsageError(f"-o {output} is a file; with several datasets -o names a folder, where each "
                         "dataset gets its own transcript")
    return (output or folder) / f"{plan.name}.jsonl"


def plain_jobs(model: list[str], label: list[str], datasets: list[str], task: str | None,
               task_options: dict[str, Any], context: ContextOptions | None, template: Path | None,
               send: SendOptions, n: int | None, seed: int, output: Path | None) -> list[Job]:
    models = list(dict.fromkeys(model))
    if not models:
        raise UsageError("name a model to ask with --model (or a whole comparison with --preset)")
    labels = display_names(models, label)
    found = _plans(datasets, task, task_options, context, template, models, send, n, seed)
    return [Job(name, plan, templates, models, send, labels, _output(plan, output, len(found) > 1), {})
            for name, plan, templates in found]


def preset_jobs(reference: str, send: SendOptions, n: int | None, output: Path | None) -> list[Job]:
    """A preset's jobs: per dataset, its models grouped by the settings they are sent."""
    loaded = presets.load(reference, send.provider_options())
    preset = loaded.preset
    if "samples" in preset.model_fields_set:
        send = send.model_copy(update={"samples": preset.samples})
    if preset.questions is not None:
        q = preset.questions
        generated = GeneratedPlan(make_spec(q.task, **q.options), n or q.n, q.seed)
        found: list[tuple[str, Plan, Templates]] = [(q.task, generated, Templates.for_run(q.task, None))]
    else:
        found = []
        for text in preset.datasets or []:
            asked = dataset_plan(dataset_path(text), n)
            found.append((text, asked, Templates.for_run(asked.task, None)))
    jobs = []
    for name, plan, templates in found:
        entries = preset.asks(name) if preset.datasets else preset.models
        groups: dict[str, list[presets.ModelEntry]] = {}
        for entry in entries:
            groups.setdefault(repr(sorted(entry.settings.given().items())), []).append(entry)
        path = _output(plan, output, True, defaults.RESULTS_DIR / loaded.name)
        for group in groups.values():
            settings = group[0].settings.given()
            jobs.append(Job(name, plan, templates, [e.model for e in group],
                            send.model_copy(update=settings) if settings else send,
                            {e.model: e.label for e in group if e.label}, path,
                            {e.model: e.note for e in group if e.note}))
    return jobs


def answer_budget(name: str, send: SendOptions) -> int | None:
    """The answer tokens a model is allowed (the rules' default or the setting); None for a
    model answered on this machine. Checks the settings against the model's rule, offline."""
    options = send.provider_options()
    prefix, model = registry.canonical(name, options)
    if prefix in registry.OFFLINE:
        return None
    endpoint = find(prefix, options) if prefix not in ("openai", "anthropic") else None
    rule = rules.find(prefix, model, endpoint.reasoning if endpoint else None, send.endpoints)
    given = {k: v for k, v in send.settings().items() if k != "seed"}
    return int(rules.settings(rule, name, given)["max_tokens"])


def dry_run_table(jobs: list[Job], table: dict[str, pricing.Price]) -> tables.Table:
    """Per model and dataset: questions, prompt tokens, the estimate and the most it could
    cost; a total row last."""
    header = ["model", "dataset", "questions", "prompt tokens", "estimated cost", "answer budget", "at most"]
    body: list[list[tables.Cell]] = []
    totals = [0.0, 0.0]
    for job in jobs:
        for name in job.models:
            provider, model = pricing.model_id(name, job.send.provider_options())
            prompts = (render(item, job.templates(item.task)) for item in job.plan.items())
            row = pricing.dry_run_row(name, provider, model, prompts, table)
            budget = answer_budget(name, job.send)
            price = pricing.price_for(model or name, table)
            samples = job.send.samples
            paid = pricing.BATCH_DISCOUNT if job.send.batch else 1.0
            estimate = row.cost * samples * paid if row.cost is not None else None
            most = (pricing.cost(price, row.prompt_tokens * samples, row.questions * samples * budget) * paid
                    if price is not None and budget is not None else None)
            totals = [totals[0] + (estimate or 0), totals[1] + (most or 0)]
            exact = "" if "exact" in row.counted_by and "approximate" not in row.counted_by else " ~"
            shown = f"{job.labels[name]} ({name})" if job.labels.get(name) else name
            body.append([shown, job.dataset, row.questions * samples,
                         tables.Shown(row.prompt_tokens * samples, f"{row.prompt_tokens * samples:,}{exact}"),
                         tables.Shown(estimate, pricing.format_cost(estimate)),
                         tables.Shown(budget, "-" if budget is None else f"{budget:,}"),
                         tables.Shown(most, pricing.format_cost(most))])
    body.append(["total", "", None, None, tables.Shown(totals[0], pricing.format_cost(totals[0])), None,
                 tables.Shown(totals[1], pricing.format_cost(totals[1]))])
    return tables.Table(f"dry run: nothing sent (prices of {pricing.PRICES_DATE}, estimates)", header, body)


def dry_run(jobs: list[Job], send: SendOptions, preset: bool, fmt: str,
            table: dict[str, pricing.Price]) -> None:
    if not preset:
        for job in jobs:
            if len(jobs) > 1:
                out.print(f"{job.dataset}:", highlight=False, markup=False)
            prompts = lambda job=job: (render(i, job.templates(i.task)) for i in job.plan.items())  # noqa: E731
            for line in pricing.dry_run(job.models, send.provider_options(), prompts, table, send.batch,
                                        send.samples):
                out.print(line, highlight=False)
        return
    shown = dry_run_table(jobs, table)
    notes = [f"costs are batch prices ({100 * (1 - pricing.BATCH_DISCOUNT):g}% off)"] if send.batch else []
    notes += [f"estimated cost: {pricing.ASSUMED_OUTPUT_TOKENS} answer tokens a question; at most: every "
             "answer using its whole budget (reasoning models can); totals leave out models with no price. "
             "Prompt tokens marked ~ are approximate (exact for the built-in numeric prompts: README.md, "
             "Contexts sized in tokens). No key is needed to plan."]
    notes += [f"{model}: {note}" for job in jobs for model, note in job.notes.items()]
    rows = [{name: cell.value if isinstance(cell, tables.Shown) else cell
             for name, cell in zip(shown.header, row, strict=True)} for row in shown.rows]
    tables.show(out, fmt, [shown], json=lambda: json.dumps(rows, indent=2), notes=list(dict.fromkeys(notes)))


def run_jobs(jobs: list[Job], fmt: str, length: View, price_table: dict[str, pricing.Price]) -> None:
    """Run each job, then one report per dataset, usage, and the exit code of them all."""
    # Every model of every job is built and its settings checked first: a missing key or a
    # setting a model does not take stops the run before any job has sent anything.
    built = [[registry.resolve(name, job.send.provider_options()) for name in job.models] for job in jobs]
    for job, providers in zip(jobs, built, strict=True):
        for provider in providers:
            provider.settings_for(job.send.settings())
    done: list[tuple[Job, RunResult, list[Tally], Any]] = []
    for job, providers in zip(jobs, built, strict=True):
        named = {p.name: job.labels[name] for p, name in zip(providers, job.models, strict=True)
                 if name in job.labels}
        run = build_run(job.plan, providers, job.path, job.templates, job.send, named)
        result, found = execute(job.plan, run)
        done.append((job, result, found, run))
    by_dataset: dict[str, list[Tally]] = {}
    for job, _, found, _ in done:
        by_dataset.setdefault(job.dataset, []).extend(found)
    for dataset, found in by_dataset.items():
        if len(by_dataset) > 1:  # on stderr for csv and json, whose output programs read
            console = out if fmt in ("table", "markdown") else err
            console.print(f"\n{dataset}", style="bold", highlight=False, markup=False)
        if found:
            show_report(found, fmt, length)
    for job, _, found, run in done:
        limited = {name: s.limiter.rate_limited for name, s in run.sendings.items() if s.limiter is not None}
        for line in pricing.usage_lines(found, job.send.provider_options(), price_table, limited):
            err.print(line, highlight=False)
    for path in dict.fromkeys(job.path for job in jobs):
        err.print(f"transcript: {path}")
    codes = []
    for _, result, found, run in done:
        try:
            finish(result, found, run)
        except typer.Exit as exc:
            codes.append(exc.exit_code)
    if codes:
        raise typer.Exit(code=max(codes))


def _refuse_with_preset(given: Iterable[tuple[str, bool]]) -> None:
    for option, present in given:
        if present:
            raise UsageError(f"{option} does not go with --preset: the preset names its models and "
                             "questions (copy it and edit the copy to change them)")


@with_task_options()
@with_context_options
@with_send_options
@with_length_options
def eval_command(
    task_options: dict[str, Any],
    context: ContextOptions | None,
    send: SendOptions,
    length: View,
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-m", help="Model to ask; repeat for several. `qmkar models` lists them.")] = None,
    task: Annotated[str | None, typer.Option(
        "--task", "-t", help=f"Task: {', '.join(FAMILIES)} [qmkar].")] = None,
    n: Annotated[int | None, typer.Option(
        "-n", "--limit", help=f"Number of questions [{defaults.EVAL_N}; with --dataset or --preset's "
        "datasets: the first N of each, else all; with --context-tokens: of each size].")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed; the same seed gives the same data.")]
    = defaults.SEED,
    dataset: Annotated[list[str] | None, typer.Option(
        help="Ask the items of this dataset instead of generating: a JSONL or blog JSON file, or the "
        "blog's published sets by name (blog:qmkar, blog:mqar, blog:counting; README.md says where "
        "they come from). Repeat for several: each is asked and reported apart, into its own "
        "transcript.")] = None,
    preset: Annotated[str | None, typer.Option(
        help="A whole comparison from a TOML file, or a shipped one: blog-2025 (the blog's models "
        "and sets), frontier-2026. Transcripts go to results/<preset>/ unless -o DIR.")] = None,
    label: Annotated[list[str] | None, typer.Option(
        help="Display name in reports: NAME with one --model, or MODEL=NAME (repeatable).")] = None,
    template: Annotated[Path | None, typer.Option(
        help="Prompt template file to use instead of the built-in one.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Transcript file [results/<run>.jsonl]; with several datasets or a "
        "preset, the folder their transcripts go to.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, markdown, csv or json.")] = "table",
    dry_run_only: Annotated[bool, typer.Option(
        "--dry-run", help="Print questions, prompt tokens and estimated cost per model (with --batch, "
        "the batch price too; with --preset, a table with each model's answer budget and the most it "
        "could cost); send nothing, need no key.")] = False,
) -> None:
    """Ask one or more models, write every answer to a transcript, print the scores.

    Running the same command again resumes: questions already answered are skipped,
    questions that failed are asked again.
    """
    with user_errors():
        tables.check_format(fmt)
        if preset is not None:
            _refuse_with_preset([("--model", bool(model)), ("--dataset", bool(dataset)),
                                 ("--task", task is not None), ("--label", bool(label)),
                                 ("--template", template is not None), ("task options", bool(task_options)),
                                 ("--context-tokens", context is not None)])
            jobs = preset_jobs(preset, send, n, output)
        else:
            jobs = plain_jobs(model or [], label or [], dataset or [], task, task_options, context, template,
                              send, n, seed, output)
        price_table = pricing.load_prices(send.prices)  # a bad prices file is refused before sending
        if dry_run_only:
            dry_run(jobs, send, preset is not None, fmt, price_table)
            return
        run_jobs(jobs, fmt, length, price_table)

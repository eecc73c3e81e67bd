"""What the `qmkar` command is built from: options generated from the typed models that
own them (checked before anything is built), progress, and how a run ends. The consoles
and the one-line error handler are cli_errors.py's, imported from here by the commands.

Task options come from every task family (tasks.option_specs); run options from
plans.SendOptions' fields. Each family of options reaches a command as one argument.

The send path (runner, batch.run; asyncio and tenacity under them) is imported by the
functions that build and execute a run, not with this module: every command imports it, and
those that send nothing (help, report, compare...) started 0.08 to 0.12 s sooner without it
(docs/performance.md, the thirtieth pass).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from qmkar import transcript
from qmkar.batch.state import BatchState, state_path
from qmkar.cli_errors import (  # noqa: F401 (the commands import them from here)
    OneEach,
    OneLineGroup,
    check_numbers,
    err,
    error_line,
    out,
    user_errors,
    warning_line,
)
from qmkar.cli_progress import CountingBar, ReadingBar
from qmkar.defaults import SEND_BOUNDS
from qmkar.errors import UsageError
from qmkar.lengths import PassRule, View
from qmkar.plans import Plan, SendOptions
from qmkar.providers.base import Provider
from qmkar.providers.endpoints import check_base_url, load_endpoints
from qmkar.providers.http import mask_url
from qmkar.render import Template
from qmkar.selection import Selection
from qmkar.tally import Tally, tallies
from qmkar.tasks import option_specs
from qmkar.tasks.base import option_name
from qmkar.tokens import parse_sizes

if TYPE_CHECKING:  # the send path: see the module's docstring
    from qmkar.runner import Run, RunResult


def _option(name: str, annotation: Any, text: str, default: Any,
            metavar: str | None = None) -> inspect.Parameter:
    option = typer.Option(option_name(name), help=text, metavar=metavar)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[annotation, option])


def _extend(command: Callable[..., Any], into: str, added: list[inspect.Parameter],
            collect: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
    """`command` with the `added` options in place of its parameter `into`, which receives
    collect({option: value}) instead: one typed object for a family of options."""
    signature = inspect.signature(command, eval_str=True)
    names = [p.name for p in added]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in names}
        with user_errors():
            kwargs[into] = collect(given)
        return command(**kwargs)

    kept = [p for p in signature.parameters.values() if p.name != into]
    wrapper.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
    return wrapper


def with_task_options(axes: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Every task family's options, reaching the command as the dict `task_options` (those
    given). Options in `axes` take comma-separated values (sweep's grid)."""
    added = []
    for spec in option_specs():
        kind = str if spec.name in axes else spec.kind
        text = spec.help + (" Comma-separated values make a grid axis." if spec.name in axes else "")
        added.append(_option(spec.name, bool, text, False) if kind is bool
                     else _option(spec.name, kind | None, text, None))
    return lambda command: _extend(command, "task_options", added, lambda given: {
        name: value for name, value in given.items() if value is not None and value is not False})


def with_selection(command: Callable[..., Any]) -> Callable[..., Any]:
    """--model, --task and --where, reaching the command as `selection` (a Selection)."""
    added = [
        _option("model", list[str] | None, "Only this model (its name or --label; * and ? match "
                "anything); repeat for several.", None, "NAME"),
        _option("task", list[str] | None, "Only this task; repeat for several.", None, "TASK"),
        _option("where", list[str] | None, "Only conditions whose FIELD is VALUE, e.g. params.pairs=500, "
                "settings.temperature=0, endpoint=...; repeat to require several.", None, "FIELD=VALUE"),
    ]
    return _extend(command, "selection", added, lambda given: Selection.of(
        given["model"], given["task"], given["where"]))


def _send_options(given: dict[str, Any]) -> SendOptions:
    check_numbers(given, SEND_BOUNDS)
    if given.get("base_url") is not None:
        try:
            check_base_url(given["base_url"])
        except ValueError as exc:
            raise UsageError(f"--base-url {exc}") from None
    if given.get("endpoints") is not None:
        load_endpoints(given["endpoints"])  # a file given is checked whole, whichever names are used
    try:
        return SendOptions(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        bound = (first.get("ctx") or {}).get("ge")
        name = option_name(str(first["loc"][0]))
        raise UsageError(f"{name} must be at least {bound:g}, not {first['input']:g}" if bound is not None
                         else f"{name}: {first['msg']}") from None


def with_send_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """plans.SendOptions' fields as options (help from their descriptions), reaching the
    command as `send`."""
    added = [_option(name, field.annotation, field.description or "", field.default)
             for name, field in SendOptions.model_fields.items()]
    return _extend(command, "send", added, _send_options)


PROGRESS_EVERY = 10.0  # seconds between progress lines when stderr is not a terminal


class ContextOptions(NamedTuple):
    """--context-tokens and --tokenizer: the token targets and who counts them."""

    targets: list[int]
    tokenizer: str | None


def _context_options(given: dict[str, Any]) -> ContextOptions | None:
    text, tokenizer = given["context_tokens"], given["tokenizer"]
    if text is None:
        if tokenizer is not None:
            raise UsageError("--tokenizer counts the tokens of --context-tokens; give --context-tokens too")
        return None
    return ContextOptions(parse_sizes(text), tokenizer)


def with_context_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--context-tokens and --tokenizer, reaching the command as `context` (None when not given)."""
    added = [
        _option("context_tokens", str | None, "Size each context to this many prompt tokens: 4k "
                "(4,096), a list 4k,8k,32k (each its own questions) or a range 1k..64k (the powers of "
                "two in it); the pairs, values or symbols that fit are chosen, counted by --tokenizer.",
                None),
        _option("tokenizer", str | None, "What counts tokens for --context-tokens: o200k, cl100k, "
                "digits or a model name [the models' own; o200k for offline models].", None),
    ]
    return _extend(command, "context", added, _context_options)


def _length_options(given: dict[str, Any]) -> View:
    absolute, relative = given["pass_line"], given["pass_relative"]
    if absolute is not None and relative is not None:
        raise UsageError("give --pass or --pass-relative, not both")
    line = relative if relative is not None else absolute if absolute is not None else PassRule().line
    if not math.isfinite(line) or not 0 < line <= 1:
        raise UsageError(f"the pass line must be a share between 0 and 1 (0.85 is 85%), not {line:g}")
    return View(PassRule(line, relative is not None), "tokens" if given["by_tokens"] else "target",
                absolute is not None or relative is not None)


def with_length_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--pass, --pass-relative and --by-tokens, reaching the command as `length` (a lengths.View)."""
    added = [
        inspect.Parameter("pass_line", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            float | None, typer.Option("--pass", help="Effective length: a length passes when the lower "
                                       "95% bound of its accuracy is at least this "
                                       f"[{PassRule().line:g}].")]),
        _option("pass_relative", float | None, "Effective length: pass at this share of the shortest "
                "length's accuracy instead (NoLiMa's rule, e.g. 0.85).", None),
        _option("by_tokens", bool, "Heatmaps and effective lengths by the real prompt tokens (reported by "
                "the provider, else counted), in power-of-two bins, instead of the target or the pairs.",
                False),
    ]
    return _extend(command, "length", added, _length_options)


class Bars:
    """A run's progress on stderr: rich bars on a terminal; otherwise (a log file, a pipe,
    CI) a line per model every PROGRESS_EVERY seconds with done/total, rate, errors and
    the time left, and a last one when the run ends."""

    def __init__(self, every: float = PROGRESS_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        columns = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        self.lines = not err.is_terminal
        self.progress = Progress(*columns, console=err, transient=False, disable=self.lines)
        self.bars: dict[str, TaskID] = {}
        self.every, self.clock = every, clock
        self.counts: dict[str, list[float]] = {}  # model -> [total, done, errors, start, done at start]
        self.last = clock()
        self.notes: dict[str, str] = {}

    def __enter__(self) -> Bars:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
        if self.lines:
            self._report()

    def start(self, model: str, total: int, done: int) -> None:
        self.bars[model] = self.progress.add_task(model, total=total, completed=done)
        self.counts[model] = [total, done, 0, self.clock(), done]

    def advance(self, model: str, failed: bool = False) -> None:
        self.progress.advance(self.bars[model])
        counts = self.counts[model]
        counts[1] += 1
        counts[2] += failed
        if self.lines and self.clock() - self.last >= self.every:
            self._report()

    def note(self, model: str, text: str) -> None:
        """What a model's batches are doing: on a terminal in its bar, otherwise a line of its
        own when it changed."""
        if self.notes.get(model) == text:
            return
        self.notes[model] = text
        if self.lines:
            err.print(f"{model}: {text}", markup=False, highlight=False)
        else:
            self.progress.update(self.bars[model], description=f"{model}: {text}")

    def _report(self) -> None:
        self.last = now = self.clock()
        for model, (total, done, errors, started, before) in self.counts.items():
            rate = (done - before) / max(now - started, 1e-9)
            left = f", {_duration((total - done) / rate)} left" if rate > 0 and done < total else ""
            err.print(f"progress {model}: {done:.0f}/{total:.0f} ({done / max(total, 1):.0%}), "
                      f"{rate:.1f}/s, {errors:.0f} errors{left}", markup=False, highlight=False)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


# Exit codes: 0 every question answered; 1 a mistake in the command (one line says which);
# 2 a malformed command line (click's usage error); 3 the run finished but some questions
# ended in errors or a model was stopped; 130 interrupted (Ctrl-C, SIGINT); 143 stopped by
# SIGTERM (timeout, systemd, Slurm, docker stop): 128 + the signal's number, as shells say.
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


def stop_on_sigterm() -> None:
    """From now on (cli.main calls it first), outside a run's event loop (which handles SIGTERM
    like SIGINT: runner.Stopping), end on SIGTERM with EXIT_TERMINATED and one line, no
    traceback, `finally` blocks run."""

    def terminated(number: int, frame: object) -> None:
        sys.stderr.write("\nstopped by SIGTERM\n")
        raise SystemExit(EXIT_TERMINATED)

    with contextlib.suppress(ValueError):  # not the main thread: leave the default
        signal.signal(signal.SIGTERM, terminated)


def display_names(models: list[str], given: list[str]) -> dict[str, str]:
    """--label values as model -> display name: NAME (one model) or MODEL=NAME each."""
    names: dict[str, str] = {}
    for text in given:
        model, sep, name = text.rpartition("=")
        if not sep:
            if len(models) != 1:
                raise UsageError(f"--label {text!r}: with several --model options write MODEL=NAME")
            model, name = models[0], text
        if model not in models:
            raise UsageError(f"--label {text!r} names {model!r}, which is not one of the --model options")
        if not name.strip():
            raise UsageError(f"--label {text!r} gives an empty name")
        names[model] = name.strip()
    return names


def masked_command() -> list[str]:
    """The command line as a transcript records it: credentials in URLs masked."""
    return [mask_url(arg) for arg in ["qmkar", *sys.argv[1:]]]


def build_run(plan: Plan, providers: list[Provider], path: Path, templates: Callable[[str], Template],
              send: SendOptions, labels: dict[str, str] | None = None) -> Run:
    """The run the options ask for: one request per question, or batches (--batch). Reading
    what the transcript already holds shows a bar (cli_progress: a terminal, 50 MB or more)."""
    from qmkar.batch.run import BatchRun
    from qmkar.runner import Run

    sendings = send.sendings(providers)
    if send.no_wait and not send.batch:
        raise UsageError("--no-wait goes with --batch (a run without batches always waits for its answers)")
    with ReadingBar("reading the transcript") as bar:
        common: dict[str, Any] = {"samples": send.samples, "labels": labels, "command": masked_command(),
                                  "reading": bar}
        if send.batch:
            options = {"base_url": send.base_url, "api_key_env": send.api_key_env,
                       "endpoints": str(send.endpoints) if send.endpoints else None}
            return BatchRun(plan, providers, path, templates, send.settings(), send.concurrency, sendings,
                            wait=not send.no_wait, poll=send.batch_poll, options=options, **common)
        return Run(plan, providers, path, templates, send.settings(), send.concurrency, sendings, **common)


def _again(*dropped: str) -> str:
    """This command line again, less the options named, credentials in URLs masked."""
    return "qmkar " + shlex.join(mask_url(arg) for arg in sys.argv[1:] if arg not in dropped)


def execute(plan: Plan, run: Run, ids: set[str] | None = None,
            steps: bool = False) -> tuple[RunResult, list[Tally]]:
    """Execute a run with progress bars; say what it resumed, what condition changed, why
    models stopped, how to resume, which batches are still running. Returns the result and
    this run's answers counted per task and condition (tally.py): as they came, in a fresh
    transcript; else the latest records of the run's questions, read back. `steps`: the run
    is one step of a search, whose every new size is a new condition by design, so neither
    the transcript nor that is said again."""
    from qmkar.batch.run import BatchRun

    run.check_pacing()
    if not steps:
        err.print(f"transcript: {run.path}")
    if run.torn_bytes:
        warning_line(f"{run.path} ended in an unfinished line ({run.torn_bytes} bytes) from an "
                     "earlier crash; it was dropped and that question will be asked again")
    with CountingBar("naming the plan's questions") as bar:  # a resume's outline (runner.Run.outline)
        run.name_questions(bar)
    for provider in run.providers:
        if not steps and (changed := run.changed(provider)):
            err.print(f"{provider.name}: this transcript holds its answers under another condition "
                      f"({'; '.join(changed)}); these questions are asked afresh and reported apart",
                      markup=False, highlight=False)
        if already := run.already_answered(provider, ids):
            err.print(f"resuming {provider.name}: {already} of {plan.count * run.samples} already answered")
    if not isinstance(run, BatchRun) and state_path(run.path).exists():
        names = {p.name for p in run.providers}
        if held := sum(len(b.submission.requests) for b in BatchState(state_path(run.path)).live()
                       if b.submission.model in names):
            warning_line(f"{held} questions of these models are in batches still running at the "
                         "provider; asking them one by one pays for them twice (add --batch to collect "
                         "the batches instead)")
    with Bars() as bars:
        result = run.execute(bars)
    running = run.live() if isinstance(run, BatchRun) else []
    if result.interrupted:
        if running:
            err.print(f"\nstopped waiting: {len(running)} batch(es) keep running at the provider (nothing "
                      f"was cancelled); answers collected so far are in {run.path}")
            err.print(f"collect with: {_again('--no-wait')}", markup=False)
        else:
            why = "stopped by SIGTERM" if result.signal == signal.SIGTERM else "interrupted"
            err.print(f"\n{why}: answers received so far are in {run.path}", markup=False, highlight=False)
            err.print(f"resume with: {_again()}", markup=False)
        raise typer.Exit(code=128 + (result.signal or signal.SIGINT))
    for name, why in result.stats.stopped.items():
        error_line(f"stopped asking {name}: {why}")
    for cache in {id(s.cache): s.cache for s in run.sendings.values() if s.cache is not None}.values():
        if cache.failed_writes:  # the run went on (the transcript has every answer): said once
            warning_line(f"{cache.failed_writes} answers could not be stored in the response cache "
                         f"{cache.directory} (a full disk, no permission, not a folder?); the transcript "
                         "holds them, but a run into another transcript would pay for them again")
    for note in run.notes if isinstance(run, BatchRun) else []:
        warning_line(note)
    if running:
        ids_shown = ", ".join(f"{b.batch_id} ({b.submission.model}, {len(b.submission.requests)} questions)"
                              for b in running)
        err.print(f"running at the provider: {ids_shown}", markup=False, highlight=False)
        err.print(f"check with: qmkar batch status {shlex.quote(str(run.path))}", markup=False)
        err.print(f"collect with: {_again('--no-wait')}", markup=False)
    if run.tallies is not None and not isinstance(run, BatchRun):  # a fresh transcript: all this run's
        return result, list(run.tallies.values())
    # The questions to summarise: those the run went through, unless a model stopped early
    # (or batches asked): then every question of the plan.
    reached = result.stats.item_ids if not result.stats.stopped and not isinstance(run, BatchRun) else None
    wanted = ids if ids is not None else reached or {item.id for item in plan.items()}
    counted = None if isinstance(run, BatchRun) else run.first_summary(result.conditions, wanted)
    if counted is not None:  # nothing written since the first pass: its counts are the summary
        return result, counted
    with ReadingBar("reading the answers") as bar:
        return result, tallies(transcript.run_records(run.path, result.conditions, wanted, bar),
                               per_question=run.samples > 1)


def finish(result: RunResult, found: list[Tally], run: Run | None = None) -> None:
    """Exit 0 when every question was answered, or is in a batch still running; EXIT_INCOMPLETE
    when some ended in errors or a model was stopped (the lines above say which and why)."""
    from qmkar.batch.run import BatchRun

    waiting = {q for b in run.live() for q in b.questions()} if isinstance(run, BatchRun) else set()
    if result.stats.stopped or any(key not in waiting for tally in found for key in tally.error_keys):
        raise typer.Exit(code=EXIT_INCOMPLETE)

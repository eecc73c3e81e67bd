"""The on-disk record of a run: one JSON line per asked question, versioned.

Records are appended and flushed one by one as answers arrive, so a crash or Ctrl-C
loses nothing already answered. One reader streams them (a torn last line from a
crash is skipped and reported); readers take the last record per (model, item id), so
a question that failed and was asked again on a later run is counted once. `rescore`
grades stored answers again with their task's current rules.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, model_validator

from qmkar.condition import Condition
from qmkar.errors import TranscriptError, UsageError
from qmkar.parse import ParsedAnswer
from qmkar.providers import registry
from qmkar.providers.base import Usage
from qmkar.render import Template, default_template, render
from qmkar.score import Score
from qmkar.tasks import family
from qmkar.tasks.base import Item

SCHEMA_VERSION = 2

# Errors that asking again cannot fix; a rerun reports them instead of asking again.
PERMANENT_KINDS = frozenset({"missing", "unreadable_prompt", "too_large", "bad_option"})
# Client errors a later run can get past: a fixed key or access (401, 403), a lock or a
# rate limit that has cleared (408, 409, 429).
RETRYABLE_STATUSES = frozenset({401, 403, 408, 409, 429})


def retryable_kind(kind: str) -> bool:
    """Whether an error of this kind may pass when the next run asks again (for records that
    do not say): not a malformed request, nor an answer that can never exist."""
    if kind in PERMANENT_KINDS:
        return False
    if kind.startswith("http_"):
        status = kind.removeprefix("http_")
        return not status.isdigit() or not 400 <= int(status) < 500 or int(status) in RETRYABLE_STATUSES
    return True


class CallError(BaseModel):
    """Why a question has no answer."""

    kind: str = Field(description="Stable label: missing, timeout, http_429, connection, ...")
    message: str = Field(description="What went wrong, for a person.")
    status: int | None = Field(default=None, description="HTTP status, when there was one.")
    retryable: bool | None = Field(
        default=None, description="Whether the next run asks again: true for errors that may pass "
        "(timeouts, 5xx, rate limits, a refused key once fixed), false for permanent ones (400, 404, "
        "a missing replay answer...), which are reported, not retried. Null in transcripts written "
        "before it was recorded (then the kind decides).")

    @property
    def permanent(self) -> bool:
        return not (self.retryable if self.retryable is not None else retryable_kind(self.kind))


class Attempt(BaseModel):
    """One try at a request (hosted providers may make several)."""

    started_at: datetime = Field(description="When the attempt was sent (UTC).")
    seconds: float = Field(description="How long it took, from sending to its answer or error.")
    waited: float = Field(default=0.0, description="Seconds it waited for the rate limiter (--concurrency, "
                          "--rpm, --tpm, a server's 429) before it was sent; not in `seconds`.")
    error: CallError | None = Field(default=None, description="Its error; null if it answered.")


class RunHeader(BaseModel):
    """The first line an `eval` or `sweep` invocation writes: who ran what, when."""

    kind: Literal["run"] = "run"
    schema_version: int = Field(default=SCHEMA_VERSION, description="Version of the transcript's shape.")
    run_id: str = Field(description="Names this invocation; its records carry it.")
    started_at: datetime = Field(description="When the invocation started (UTC).")
    qmkar_version: str = Field(description="qmkar's version.")
    command: list[str] = Field(description="The command line, credentials masked.")


class TemplateLine(BaseModel):
    """A prompt template's text, written once per transcript before the first record using it."""

    kind: Literal["template"] = "template"
    id: str = Field(description="sha256 of the text (12 hex digits): a condition's `template`.")
    task: str = Field(description="Task the template is for.")
    origin: str = Field(description="Where it came from: builtin:<task>.txt or the user's path.")
    text: str = Field(description="The template, whole.")


class ItemLine(BaseModel):
    """A question, written once per transcript before the first record that answers it."""

    kind: Literal["item"] = "item"
    item: Item = Field(description="The question, whole.")


class Record(BaseModel):
    """One question asked of one model under one condition: an `answer` line of a transcript.

    The question itself is on its `item` line (once per transcript); readers attach it
    as `record.item`. Records of schema 1 (one line with the item inside and no
    condition) are read into this shape, their condition inferred."""

    kind: Literal["answer"] = "answer"
    schema_version: int = Field(default=SCHEMA_VERSION, description="Version of this record's shape.")
    run_id: str | None = Field(default=None, description="The invocation that wrote it (its run line).")
    model: str = Field(description="Model name as given to --model.")
    label: str | None = Field(default=None, description="Display name given with --label, if any.")
    item_id: str = Field(description="The question's id (its item line).")
    condition: Condition = Field(description="Everything that can change the answer.")
    condition_id: str = Field(description="The condition's id (Condition.key()).")
    sample: int = Field(default=0, description="Which of --samples this is (0 for the first).")
    template: str = Field(description="Where the prompt template came from.")
    answer: str | None = Field(default=None, description="Raw final answer text; null on error.")
    reasoning: str | None = Field(default=None, description="Reasoning text, kept apart; never parsed.")
    response_model: str | None = Field(default=None, description="Model name the provider reported.")
    usage: Usage | None = Field(default=None, description="Token usage, when known.")
    truncated: bool = Field(
        default=False, description="The answer stopped at the output limit (finish reason length / "
        "max_tokens), so it may be cut short or empty.")
    started_at: datetime = Field(description="When the question was first sent (UTC).")
    seconds: float = Field(description="Wall time from first send to final answer or error, waits "
                           "for the rate limiter included (each attempt's `waited` says how much).")
    attempts: list[Attempt] = Field(default_factory=list, description="Every attempt, in order.")
    error: CallError | None = Field(default=None, description="Why there is no answer; null if answered.")
    parsed: ParsedAnswer | None = Field(default=None, description="What the answer predicts.")
    score: Score | None = Field(default=None, description="Metrics of the answer.")
    extra: dict[str, Any] = Field(default_factory=dict, description="Provider-specific details.")
    item: Item = Field(exclude=True, description="The question (from its item line; not written here).")

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("schema_version", 1) == 1 and "condition" not in data:
            return upgrade_v1(data)
        if "item" not in data:
            items = (info.context or {}).get("items") or {}
            found = items.get(data.get("item_id"))
            if found is None:
                raise ValueError(f"record for question {data.get('item_id')!r} comes before (or without) "
                                 "its item line")
            data = {**data, "item": found}
        return data

    @property
    def answered(self) -> bool:
        return self.error is None and self.answer is not None

    @property
    def correct(self) -> bool:
        """Answered, scored, and exactly right."""
        return self.score is not None and self.score.correct

    @property
    def waited(self) -> float:
        """Seconds spent waiting for the rate limiter, over every attempt (in `seconds` too)."""
        return sum(attempt.waited for attempt in self.attempts)

    @property
    def done(self) -> bool:
        """Needs no asking again: answered, or failed in a way asking again cannot fix."""
        return self.answered or (self.error is not None and self.error.permanent)

    @property
    def key(self) -> tuple[str, str, int]:
        """What resume and reports key on: the question, the condition, the sample."""
        return (self.item_id, self.condition_id, self.sample)


def upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 record (item inline, no condition) in schema 2's shape; its condition is
    inferred from the model name, the settings it recorded and its template's origin.
    Anything else is left as it is, for validation to refuse."""
    if "item" not in data or "model" not in data:
        return data
    item = Item.model_validate(data["item"])
    request = data.get("request") or {}
    if isinstance(request, BaseModel):
        request = request.model_dump()
    provider, model = registry.canonical_or_name(str(data.get("model")))
    model = model or provider  # a provider that is its own model (oracle)
    origin = str(data.get("template", ""))
    # Offline models were recorded with the settings as given; they are sent none.
    settings = {} if provider in registry.OFFLINE else request.get("settings") or {}
    condition = Condition(
        provider=provider, model=model, settings=settings,
        template=template_key(origin, item.task), task=item.task,
        params=family(item.task).condition_params(item.params), inferred=True)
    upgraded = {key: value for key, value in data.items() if key not in ("request", "schema_version")}
    upgraded.update(item=item, item_id=item.id, condition=condition, condition_id=condition.key())
    return upgraded


def template_key(origin: str, task: str) -> str:
    """A v1 record's template id: the built-in text's hash for a built-in template (those have
    not changed), else its origin, which is all schema 1 recorded."""
    if origin.startswith("builtin:"):
        return text_key(default_template(task).text)
    return f"origin:{origin}"


def text_key(text: str) -> str:
    """The id of a template text (12 hex digits of its sha256)."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class TranscriptContents(NamedTuple):
    """What reading a transcript found."""

    records: list[Record]
    torn_bytes: int  # size of an unfinished last line (from a crash), 0 if none


# The kind of a line, read without parsing it: qmkar writes it first, other tools may space it.
KIND = re.compile(rb'\s*\{\s*"kind"\s*:\s*"(\w+)"')


class Reading:
    """The records of one transcript, streamed line by line, each with its item attached.

    Besides answers, a transcript holds a `run` line per invocation and each `item` and
    `template` once, before the first answer that uses it; they are kept in `runs`,
    `items` and `templates`. A line torn by a crash can only be the last (it has no
    newline): it is skipped and its size kept in `torn_bytes`. Any other bad line, or a
    line written by a newer qmkar, is an error the user must look at."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.torn_bytes = 0
        self.runs: list[RunHeader] = []
        self.items: dict[str, Item] = {}
        self.templates: dict[str, TemplateLine] = {}

    def __iter__(self) -> Iterator[Record]:
        if not self.path.exists():
            return
        if not self.path.is_file():
            raise TranscriptError(f"{self.path} is not a file")
        context = {"items": self.items}
        with self.path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                kind = KIND.match(line)
                try:
                    if kind is not None and kind[1] == b"item":
                        item = ItemLine.model_validate_json(line).item
                        self.items[item.id] = item
                    elif kind is not None and kind[1] == b"template":
                        template = TemplateLine.model_validate_json(line)
                        self.templates[template.id] = template
                    elif kind is not None and kind[1] == b"run":
                        self.runs.append(self._newer_refused(RunHeader.model_validate_json(line), number))
                    else:
                        yield self._newer_refused(Record.model_validate_json(line, context=context), number)
                except ValidationError as exc:
                    if not line.endswith(b"\n"):
                        self.torn_bytes = len(line)
                        return
                    raise TranscriptError(
                        f"{self.path} line {number} is not a qmkar transcript record "
                        f"({exc.errors()[0]['msg']}); is this the right file?"
                    ) from None

    def prompt(self, record: Record) -> list[dict[str, str]]:
        """The messages a record's question was sent as: its item through its template (read
        back from the template line; a record of schema 1 used the built-in template or one
        whose text was not kept)."""
        line = self.templates.get(record.condition.template)
        template = (Template(line.task, line.text, line.origin) if line is not None
                    else default_template(record.item.task))
        return render(record.item, template)

    def _newer_refused(self, line: Any, number: int) -> Any:
        if line.schema_version > SCHEMA_VERSION:
            raise TranscriptError(
                f"{self.path} line {number} was written by a newer qmkar (transcript schema "
                f"{line.schema_version}; this qmkar reads up to {SCHEMA_VERSION}); upgrade qmkar to read it")
        return line


def iter_records(path: Path) -> Iterator[Record]:
    """Yield the records of a transcript one at a time; a torn last line is skipped."""
    return iter(Reading(path))


def read(path: Path) -> TranscriptContents:
    """Every record, and the size of a torn last line (0 if none)."""
    reading = Reading(path)
    records = list(reading)
    return TranscriptContents(records, reading.torn_bytes)


# The start of a line qmkar writes (schema 2), or of a schema-1 record.
QMKAR_LINE = re.compile(rb'\s*\{\s*"(kind"\s*:\s*"(run|item|template|answer)"|schema_version"|model")')


def _looks_like_transcript(path: Path) -> bool:
    """Whether the first non-blank line of `path` is one qmkar writes (an empty file is)."""
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                return QMKAR_LINE.match(line) is not None
    return True


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def files(paths: Iterable[Path], note: Callable[[str], None] = _note) -> list[Path]:
    """The transcript files named directly or found (*.jsonl) in the folders given. A file
    found in a folder that is not a transcript (a dataset, a replay file) is skipped with
    a one-line `note`; a file named directly is kept, so reading it says what is wrong."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = []
            for candidate in sorted(path.glob("*.jsonl")):
                try:
                    kept = _looks_like_transcript(candidate)
                except OSError as exc:
                    note(f"skipped {candidate}: cannot be read ({exc.strerror})")
                    continue
                if kept:
                    inside.append(candidate)
                else:
                    note(f"skipped {candidate}: not a qmkar transcript")
            if not inside:
                raise UsageError(f"{path} holds no transcript (*.jsonl) files")
            found.extend(inside)
        elif path.exists():
            found.append(path)
        else:
            raise UsageError(f"{path} does not exist")
    return list(dict.fromkeys(found))


def load(path: Path, warn: Callable[[str], None] | None = None) -> list[Record]:
    """Every record of one file, warning (not failing) about a line torn by a crash."""
    contents = read(path)
    if contents.torn_bytes and warn is not None:
        warn(f"{path}: ignored an unfinished last line ({contents.torn_bytes} bytes) left by a crash")
    return contents.records


def run_records(path: Path, conditions: set[str], item_ids: set[str]) -> list[Record]:
    """The latest records of a run's questions under its conditions, without contexts and
    reasoning: what the end-of-run summary and usage read."""
    slim = []
    for record in latest(iter_records(path)).values():
        if record.condition_id in conditions and record.item_id in item_ids:
            slim.append(record.model_copy(update={"item": record.item.without_context(), "reasoning": None}))
    return slim


def latest(records: Iterable[Record]) -> dict[tuple[str, str, int], Record]:
    """The last record per (question, condition, sample), in first-seen order: a question
    that failed and was asked again later counts once."""
    found: dict[tuple[str, str, int], Record] = {}
    for record in records:
        found[record.key] = record
    return found


class TranscriptWriter:
    """Appends to a transcript, one flushed line per record, each item and template once.

    Opening drops a torn last line left by a crash (its question is asked again), so
    every later line starts on a line of its own. `items` and `templates` name those the
    file already holds (from a Reading of it)."""

    def __init__(self, path: Path, torn_bytes: int = 0, items: Iterable[str] = (),
                 templates: Iterable[str] = ()) -> None:
        self.path = path
        self.items = set(items)
        self.templates = set(templates)
        self._headers: list[RunHeader] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        if torn_bytes:
            with path.open("r+b") as handle:
                handle.truncate(path.stat().st_size - torn_bytes)
        needs_newline = False
        if path.exists() and path.stat().st_size:
            with path.open("rb") as handle:
                handle.seek(-1, os.SEEK_END)
                needs_newline = handle.read(1) != b"\n"
        self._handle: IO[str] | None = path.open("a", encoding="utf-8")
        if needs_newline:
            self._handle.write("\n")

    def header(self, header: RunHeader) -> None:
        """A run line, written with the next record: a rerun with nothing to ask leaves the
        file as it was."""
        self._headers.append(header)

    def write(self, record: Record, template: TemplateLine | None = None) -> None:
        """Append the record, after its run line, template and item when the file lacks them."""
        lines = [header.model_dump_json() for header in self._headers]
        self._headers = []
        if template is not None and template.id not in self.templates:
            lines.append(template.model_dump_json())
            self.templates.add(template.id)
        if record.item_id not in self.items:
            lines.append(ItemLine(item=record.item).model_dump_json())
            self.items.add(record.item_id)
        lines.append(record.model_dump_json())
        self._write("\n".join(lines) + "\n")

    def _write(self, text: str) -> None:
        if self._handle is None:
            raise TranscriptError(f"transcript {self.path} is closed")
        self._handle.write(text)
        # flush, not fsync: a crash or kill -9 of qmkar keeps what the OS has, and an
        # fsync per answer would serialise a fast run on the disk.
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_all(reading: Reading, records: list[Record], path: Path) -> None:
    """Write a whole transcript (used by rescore) atomically, in the current schema."""
    temporary = path.with_name(path.name + ".tmp")
    with TranscriptWriter(temporary) as writer:
        for header in reading.runs:
            writer.header(header)
        for record in records:
            template = reading.templates.get(record.condition.template)
            writer.write(record, template)
    temporary.replace(path)


class Rescored(NamedTuple):
    records: int
    changed: int


def rescore(source: Path, output: Path, force: bool = False) -> Rescored:
    """Grade every stored answer of `source` again into `output` (asks no model).

    Refuses to overwrite `output` (even when it is `source`) unless `force`."""
    if not source.is_file():
        raise UsageError(f"{source} does not exist")
    if output.exists() and not force:
        same = output.resolve() == source.resolve()
        raise UsageError(
            f"{output} exists" + (" and is the transcript being rescored" if same else "")
            + "; choose another --output or pass --force to overwrite it"
        )
    reading = Reading(source)
    records = list(reading)
    changed = 0
    for record in records:
        if record.answer is None or record.error is not None:
            continue
        graded = family(record.item.task).grade(record.item, record.answer)
        if graded.parsed != record.parsed or graded.score != record.score:
            changed += 1
        record.parsed, record.score = graded.parsed, graded.score
    write_all(reading, records, output)
    return Rescored(len(records), changed)


"""The on-disk shapes of a transcript's lines, versioned: run, template, item and answer.

An `answer` line is a Record: one question asked of one model under one condition. Records
of schema 1 (the item inline, no condition) are read into today's shape (`upgrade_v1`).
transcript.py reads these lines whole, writer.py writes them, and slim.py reads them without
building them whole.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal, NamedTuple

import msgspec
from pydantic import BaseModel, Field, ValidationInfo, model_validator

from qmkar import tokens
from qmkar.condition import Condition
from qmkar.deferred import DeferredModel
from qmkar.parse import ParsedAnswer
from qmkar.providers import registry
from qmkar.providers.base import Usage
from qmkar.render import Template, default_template, fill
from qmkar.score import Score
from qmkar.shapes import decode_item
from qmkar.tasks import family
from qmkar.tasks.base import Item, MadeAhead, Prompted, TaskParams, made_ahead, pairs_json
from qmkar.tasks.datasets import trusted_item

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


class CallError(DeferredModel):
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


class Attempt(DeferredModel):
    """One try at a request (hosted providers may make several)."""

    started_at: datetime = Field(description="When the attempt was sent (UTC).")
    seconds: float = Field(description="How long it took, from sending to its answer or error.")
    waited: float = Field(default=0.0, description="Seconds it waited for the rate limiter (--concurrency, "
                          "--rpm, --tpm, a server's 429) before it was sent; not in `seconds`.")
    error: CallError | None = Field(default=None, description="Its error; null if it answered.")


class RunHeader(DeferredModel):
    """The first line an `eval` or `sweep` invocation writes: who ran what, when."""

    kind: Literal["run"] = "run"
    schema_version: int = Field(default=SCHEMA_VERSION, description="Version of the transcript's shape.")
    run_id: str = Field(description="Names this invocation; its records carry it.")
    started_at: datetime = Field(description="When the invocation started (UTC).")
    qmkar_version: str = Field(description="qmkar's version.")
    command: list[str] = Field(description="The command line, credentials masked.")


class TemplateLine(DeferredModel):
    """A prompt template's text, written once per transcript before the first record using it."""

    kind: Literal["template"] = "template"
    id: str = Field(description="sha256 of the text (12 hex digits): a condition's `template`.")
    task: str = Field(description="Task the template is for.")
    origin: str = Field(description="Where it came from: builtin:<task>.txt or the user's path.")
    text: str = Field(description="The template, whole.")


class ItemLine(DeferredModel):
    """A question, written once per transcript before the first record that answers it."""

    kind: Literal["item"] = "item"
    item: Item = Field(description="The question, whole.")


def item_line(item: Item) -> str:
    """The item's transcript line (ItemLine's JSON): the question worker's, when it made the
    item (tasks.base.MadeAhead), else written now."""
    made = made_ahead(item)
    return made.line if made is not None else _written_line(item)[0]


def _written_line(item: Item) -> tuple[str, tuple[int, int] | None]:
    """ItemLine(item=item).model_dump_json(), byte for byte, and where its pairs sit in it when
    int_pairs_json wrote them. They are written once (tasks.base.pairs_json: kept from the
    item's making, which hashed them for its id), and put in the place of the null that
    pydantic writes for no pairs: the first "pairs":null of the line is that field's (the id
    and task before it are strings, whose quotes are escaped)."""
    written = pairs_json(item)
    if written is None:
        return ItemLine(item=item).model_dump_json(), None
    bare = ItemLine(item=item.model_copy(update={"pairs": None})).model_dump_json()
    start = bare.index('"pairs":null') + len('"pairs":')
    end = start + len(written)
    return bare[:start] + written.decode() + bare[start + len("null"):], (start, end)


def item_of_line(line: str | bytes, params: dict[tuple[str, bytes], TaskParams]) -> Item:
    """The item of an item line (what item_line wrote): built from msgspec's typed decoding,
    its params checked once per distinct params kept in `params` (tasks.datasets.trusted_item),
    or by pydantic for anything unusual."""
    try:
        return trusted_item(decode_item(line).item, params)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return ItemLine.model_validate_json(line).item


class Prompting(NamedTuple):
    """What the question worker also makes each generated item's prompt with: the run's
    template for the plan's task, and the tokenizers (tokens.counter's names) whose counts
    the run's --max-cost ceiling needs; none without one."""

    template: Template
    counters: tuple[str, ...] = ()


def make_ahead(item: Item, prompting: Prompting | None = None) -> MadeAhead:
    """In the question worker: the item's transcript line and prompt fields; with `prompting`,
    its prompt too, its tokens counted."""
    line, pairs = _written_line(item)
    fields = family(item.task).prompt_fields(item)
    prompted = None
    if prompting is not None and prompting.template.task == item.task:
        text = fill(prompting.template.text, fields)
        counted = {name: tokens.counter(name).count(text) for name in prompting.counters}
        prompted = Prompted(prompting.template.text, text, counted)
    return MadeAhead(line, fields, prompted, pairs)


class Record(DeferredModel):
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
            # The context's "items": anything whose get(id) gives an Item or None (a dict of
            # the file's items, rescore's offsets into it, slim's stand-ins).
            items = (info.context or {}).get("items")
            found = items.get(data.get("item_id")) if items is not None else None
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

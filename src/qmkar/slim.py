"""Transcripts read for reports, comparisons, figures and resume: what they use, not whole records.

A transcript of 100k answers holds 100k contexts, and reports need none of them. `SlimReading`
decodes each line with msgspec into small typed structs (an item's context stays JSON text,
checked and counted by shapes.int_rows, never made numbers) and keeps per answer a
`SlimRecord`: its key, condition, error, score, a few flags and token counts, and its question
as a `SlimItem` (size, expected values, and, where runs are to be paired, a fingerprint of the
content) shared by every answer to it. Conditions, scores and errors are shared between the
records that repeat them, and so are names (model, label, condition id, task: interned). Lines
the fast decoder does not take (schema 1, a value of an unexpected type) are read through the
whole pydantic records (records.py), so a transcript that loads whole loads slim, with the same
errors. A record whose score contradicts its parsed answer is not trusted: it is graded again
from its answer text and the reader warns.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import msgspec
from pydantic import ValidationError

from qmkar.condition import Condition
from qmkar.errors import TranscriptError
from qmkar.outputs import reason
from qmkar.readprogress import ReadProgress, Told
from qmkar.records import SCHEMA_VERSION, CallError, ItemLine, Record, RunHeader, TemplateLine
from qmkar.score import Score
from qmkar.shapes import (
    NULL,
    SlimUsage,
    context_rows,
    decode_answer,
    decode_slim_item,
)
from qmkar.tasks import family
from qmkar.tasks.base import Item, TaskParams, params_type
from qmkar.transcript import bad_line, item_offsets, kind_of, newer_error, opened, present


class SlimItem(msgspec.Struct, frozen=True, gc=False):
    """A question without its context: what reports, grids and pairing look at."""

    id: str
    task: str
    size: int  # pairs, values or symbols in the context
    expected: tuple[int, ...]
    placement: str | None  # the target placement its params name, when they name one
    prompt_tokens: int | None  # prompt tokens counted when the context was sized in tokens
    content: int | None  # fingerprint of the question (task, context, query, expected); None unless asked


class SlimRecord(msgspec.Struct, gc=False):
    """One answer as reports read it (see records.Record for the fields' meaning)."""

    model: str
    label: str | None
    item: SlimItem
    condition: Condition
    condition_id: str
    sample: int
    error: CallError | None
    score: Score | None
    truncated: bool
    refused: bool  # the answer predicted nothing and reads as a refusal
    unparsed: bool  # the answer predicted nothing and is not a refusal
    has_answer: bool  # an answer text is stored (null on error)
    usage: SlimUsage | None
    extra: dict[str, Any]  # of the record's extra, only `cache` and `batch`
    run_id: str | None = None  # the invocation that wrote it (none before schema 2)

    @property
    def item_id(self) -> str:
        return self.item.id

    @property
    def answered(self) -> bool:
        return self.error is None and self.has_answer

    @property
    def correct(self) -> bool:
        return self.score is not None and self.score.correct

    @property
    def done(self) -> bool:
        """Needs no asking again: answered, or failed in a way asking again cannot fix."""
        return self.answered or (self.error is not None and self.error.permanent)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.item.id, self.condition_id, self.sample)


EMPTY: dict[str, Any] = {}


def fingerprint(task: str, pairs: bytes | None, values: bytes | None, query: Sequence[int],
                expected: Sequence[int], text: str | None) -> int:
    """Equal for two questions with the same content, whatever their ids, in any process (a
    file read by readers.py's second process pairs with one read here); never stored. A 64-bit
    BLAKE2 digest of the content, the context as compact JSON text (`pairs`, `values`: how
    qmkar writes it, so a reading hashes the text it read and a whole item encodes its own)."""
    content = msgspec.msgpack.encode((task, pairs, values, query, expected, text))
    return int.from_bytes(hashlib.blake2b(content, digest_size=8).digest(), "little")


def _params_facts(params: TaskParams) -> tuple[str | None, int | None]:
    placement = params.model_dump(mode="json").get("placement")
    tokens = params.extra("prompt_tokens")
    return (placement if isinstance(placement, str) else None, tokens if isinstance(tokens, int) else None)


def slim_item(item: Item, contents: bool = True) -> SlimItem:
    """A whole item's slim form (fingerprinted with `contents`, as pairing needs)."""
    placement, tokens = _params_facts(item.params)
    content = None
    if contents:
        pairs = None if item.pairs is None else msgspec.json.encode(item.pairs)
        values = None if item.values is None else msgspec.json.encode(item.values)
        content = fingerprint(item.task, pairs, values, item.query, item.expected, item.text)
    return SlimItem(item.id, item.task, item.size, tuple(item.expected), placement, tokens, content)


def _extra(extra: dict[str, Any]) -> dict[str, Any]:
    return {key: extra[key] for key in ("cache", "batch") if key in extra} if extra else EMPTY


def slim_of(record: Record | SlimRecord, item: SlimItem | None = None,
            scores: dict[bytes, Score] | None = None) -> SlimRecord:
    """The slim form of a whole record (of itself when it is already slim). `scores`: equal
    scores are kept once (most answers of a run score alike), as a reading keeps them."""
    if isinstance(record, SlimRecord):
        return record
    parsed, usage, score = record.parsed, record.usage, record.score
    if score is not None and scores is not None:
        score = scores.setdefault(score.__pydantic_serializer__.to_json(score), score)
    return SlimRecord(
        record.model, record.label, item or slim_item(record.item), record.condition, record.condition_id,
        record.sample, record.error, score, record.truncated,
        parsed is not None and parsed.refused,
        parsed is not None and not parsed.values and not parsed.refused, record.answer is not None,
        None if usage is None else SlimUsage(usage.input_tokens, usage.output_tokens, usage.reasoning_tokens,
                                             usage.cached_tokens),
        _extra(record.extra), record.run_id)


class _Stubs:
    """What the full Record validator looks an item up in: a stand-in per known question."""

    def __init__(self, reading: SlimReading) -> None:
        self.reading = reading

    def get(self, key: str) -> Item | None:
        found = self.reading.item(key)
        if found is None:
            return None
        return Item.model_construct(id=found.id, task=found.task, pairs=None, values=None, query=[],
                                    expected=list(found.expected), target_positions=[],
                                    params=TaskParams(), dropped_size=found.size)


class SlimReading:
    """The records of one transcript, slim, in file order (latest() picks the last per key).

    Like transcript.Reading, it skips a torn last line (its size in `torn_bytes`) and
    refuses any other bad line and lines of a newer qmkar; `items` and `templates` are
    the questions and template ids the file holds, `started` when each run began (what
    `qmkar runs` lists). Records whose score contradicts their
    answer are graded again (`regraded` counts those whose grade was wrong; readers.py warns).
    Questions are fingerprinted (SlimItem.content) only with `contents`: pairing two runs
    needs it, reports do not.

    Iterating reads the whole file; `read(stop)` reads it in parts, from where the last part
    ended up to the line starting at byte `stop`, so that a second process can read the rest
    (readers.py): that one calls `index(start)` first, to find the items the lines before
    `start` hold, each decoded when an answer needs it. `progress` is told the bytes each read
    goes through (readprogress.ReadProgress)."""

    def __init__(self, path: Path, contents: bool = False, progress: ReadProgress | None = None) -> None:
        self.path = path
        self.contents = contents  # fingerprint each question (what pairing two runs checks)
        self.progress = progress
        self.torn_bytes = 0
        self.size = 0  # bytes read: the file's size when it was read through (a writer compares)
        self.started: dict[str, datetime] = {}  # run id ("-": none) -> its run line's time, or first answer's
        self.regraded = 0
        self.items: dict[str, SlimItem] = {}
        self.templates: set[str] = set()
        self._lines = self._good = 0  # lines read, and good ones among them, by the parts before
        self._offsets: dict[str, int] = {}  # items before `index`'s start, where their lines are
        self._unindexed = 0  # `index`'s start, until the first item missing from the part asks
        self._lookup: IO[bytes] | None = None  # the file, open to read those lines
        self.looked_up = 0  # items decoded from there
        self._conditions: dict[bytes, Condition] = {}
        self._scores: dict[bytes, Score] = {}
        self._errors: dict[bytes, CallError] = {}
        self._params: dict[tuple[str, bytes], tuple[str | None, int | None]] = {}

    def __iter__(self) -> Iterator[SlimRecord]:
        return self.read()

    def read(self, stop: int | None = None) -> Iterator[SlimRecord]:
        try:
            yield from self._records(stop)
        except OSError as exc:  # a read error mid-file (a failing disk, a special file)
            raise TranscriptError(f"cannot read {self.path}: {reason(exc)}") from None
        finally:
            if self._lookup is not None:
                self._lookup.close()
                self._lookup = None

    def index(self, start: int) -> None:
        """Read from byte `start` on, finding items written before it where their lines are
        (transcript.item_offsets), each decoded when an answer needs it. The lines before
        `start` are scanned only when the first answer to an item not in the part asks for
        one: in a transcript of one run each item line comes just before its answers, and that
        scan, never used, was 40% of a reader's py-spy samples in a report of 100k records."""
        self.size = start
        self._unindexed = start

    def item(self, item_id: str) -> SlimItem | None:
        """A question of this file by id (decoded now when `index` found it)."""
        found = self.items.get(item_id)
        if found is None and self._unindexed:
            self._offsets, self._unindexed = item_offsets(self.path, self._unindexed), 0
        if found is None and item_id in self._offsets:
            if self._lookup is None:
                self._lookup = opened(self.path)
            self._lookup.seek(self._offsets.pop(item_id))
            self._item(self._lookup.readline())
            self.looked_up += 1
            found = self.items.get(item_id)
        return found

    def _records(self, stop: int | None) -> Iterator[SlimRecord]:
        if not present(self.path):
            return
        suspects: dict[str, list[tuple[SlimRecord, str]]] = {}
        told = Told(self.progress, self.size)
        mark = told.mark
        with opened(self.path) as handle:
            handle.seek(self.size)
            for line in handle:
                if stop is not None and self.size >= stop:
                    break
                self._lines += 1
                number = self._lines
                self.size += len(line)
                if self.size >= mark:
                    mark = told.tell(self.size)
                if line.isspace():  # a blank line (isspace stops at the first other byte)
                    continue
                name = kind_of(line)
                try:
                    if name == b"answer":
                        record, values, text = self._answer(line)
                        if record is None:
                            record, values, text = self._whole_answer(line, number)
                    elif name == b"item":
                        self._item(line)
                        self._good += 1
                        continue
                    elif name == b"template":
                        self.templates.add(TemplateLine.model_validate_json(line).id)
                        self._good += 1
                        continue
                    elif name == b"run":
                        self._run(line, number)
                        self._good += 1
                        continue
                    else:
                        record, values, text = self._whole_answer(line, number)
                except ValidationError as exc:
                    if not line.endswith(b"\n") and self._good:
                        self.torn_bytes = len(line)
                        break
                    raise bad_line(self.path, number, line, exc.errors()[0]["msg"]) from None
                self._good += 1
                if record.error is None and family(record.item.task).contradicts(
                        record.item.expected, values, record.score, text):
                    suspects.setdefault(record.item.id, []).append((record, text or ""))
                yield record
        told.tell(self.size)
        if suspects:
            self._regrade(suspects)

    def _run(self, line: bytes, number: int) -> None:
        header = RunHeader.model_validate_json(line)
        if header.schema_version > SCHEMA_VERSION:
            raise newer_error(self.path, number, header.schema_version)
        self.started[header.run_id] = header.started_at

    def _item(self, line: bytes) -> None:
        try:
            item = decode_slim_item(line).item
            pairs, pair_rows = context_rows(item.pairs, 2)  # never made numbers: see context_rows
            values, value_rows = context_rows(item.values, 1)
            key = (item.task, bytes(item.params))
            facts = self._params.get(key)
            if facts is None:
                try:
                    facts = _params_facts(params_type(item.task).model_validate_json(key[1]))
                except ValueError:  # an unknown task or bad params: the whole item says which
                    raise msgspec.ValidationError from None
                self._params[key] = facts
            size = (pair_rows if pair_rows is not None else len(item.text) if item.text is not None
                    else value_rows or 0)
            content = (fingerprint(item.task, pairs, values, item.query, item.expected, item.text)
                       if self.contents else None)
            self.items[item.id] = SlimItem(item.id, sys.intern(item.task), size, tuple(item.expected),
                                           facts[0], facts[1], content)
        except (msgspec.ValidationError, msgspec.DecodeError):
            whole = ItemLine.model_validate_json(line).item
            self.items[whole.id] = slim_item(whole, self.contents)

    def _answer(self, line: bytes) -> tuple[SlimRecord | None, list[int] | None, str | None]:
        """The fast path; (None, ...) sends the line to the whole record's validation."""
        try:
            data = decode_answer(line)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None, None, None
        item = self.item(data.item_id)
        if item is None or data.schema_version != SCHEMA_VERSION:
            return None, None, None
        try:
            raw = bytes(data.condition)
            condition = self._conditions.get(raw)
            if condition is None:
                condition = self._conditions[raw] = Condition.model_validate_json(raw)
            raw = bytes(data.score)
            score = self._scores.get(raw)
            if score is None and raw != NULL:
                score = self._scores[raw] = Score.model_validate_json(raw)
            raw = bytes(data.error)
            error = self._errors.get(raw)
            if error is None and raw != NULL:
                error = self._errors[raw] = CallError.model_validate_json(raw)
            for attempt in data.attempts:
                raw = bytes(attempt.error)
                if raw != NULL and raw not in self._errors:
                    self._errors[raw] = CallError.model_validate_json(raw)
        except ValidationError:
            return None, None, None
        parsed = data.parsed
        record = SlimRecord(
            sys.intern(data.model), data.label and sys.intern(data.label), item, condition,
            sys.intern(data.condition_id), data.sample, error, score,
            data.truncated, parsed is not None and parsed.refused,
            parsed is not None and not parsed.values and not parsed.refused, data.answer is not None,
            data.usage, _extra(data.extra), data.run_id and sys.intern(data.run_id))
        self.started.setdefault(data.run_id or "-", data.started_at)
        return record, None if parsed is None else parsed.values, data.answer

    def _whole_answer(self, line: bytes, number: int) -> tuple[SlimRecord, list[int] | None, str | None]:
        """A line the fast path did not take, through the whole Record (schema 1 included)."""
        whole = Record.model_validate_json(line, context={"items": _Stubs(self)})
        if whole.schema_version > SCHEMA_VERSION:
            raise newer_error(self.path, number, whole.schema_version)
        item = self.items.get(whole.item_id)
        if item is None:  # schema 1: the item came inline
            item = self.items[whole.item_id] = slim_item(whole.item)
        values = None if whole.parsed is None else whole.parsed.values
        self.started.setdefault(whole.run_id or "-", whole.started_at)
        return slim_of(whole, item), values, whole.answer

    def _regrade(self, suspects: dict[str, list[tuple[SlimRecord, str]]]) -> None:
        """Grade the suspects again from their answer texts with their whole items, counting
        those whose stored grade was wrong."""
        with self.path.open("rb") as handle:
            for line in handle:
                if kind_of(line) != b"item" or not suspects:
                    continue
                try:
                    item = ItemLine.model_validate_json(line).item
                except ValidationError:
                    continue
                for record, text in suspects.pop(item.id, []):
                    graded = family(item.task).grade(item, text)
                    if graded.score != record.score:
                        self.regraded += 1
                    record.score = graded.score
                    record.refused = graded.parsed.refused
                    record.unparsed = not graded.parsed.values and not graded.parsed.refused

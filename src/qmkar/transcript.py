"""The on-disk record of a run: one JSON line per asked question, versioned.

Records are appended and flushed one by one as answers arrive, so a crash or Ctrl-C
loses nothing already answered. Readers take the last record per (model, item id):
a question that failed and was asked again on a later run is counted once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

from pydantic import BaseModel, Field, ValidationError

from qmkar.errors import TranscriptError
from qmkar.parse import ParsedAnswer
from qmkar.providers.base import ModelRequest, Usage
from qmkar.score import Score
from qmkar.tasks.base import Item

SCHEMA_VERSION = 1


class CallError(BaseModel):
    """Why a question has no answer."""

    kind: str = Field(description="Stable label: missing, timeout, http_429, connection, ...")
    message: str = Field(description="What went wrong, for a person.")
    status: int | None = Field(default=None, description="HTTP status, when there was one.")


class Attempt(BaseModel):
    """One try at a request (hosted providers may make several)."""

    started_at: datetime = Field(description="When the attempt was sent (UTC).")
    seconds: float = Field(description="How long it took.")
    error: CallError | None = Field(default=None, description="Its error; null if it answered.")


class Record(BaseModel):
    """One question asked of one model: a line of a transcript."""

    schema_version: int = Field(default=SCHEMA_VERSION, description="Version of this record's shape.")
    model: str = Field(description="Model name as given to --model.")
    item: Item = Field(description="The question, whole.")
    template: str = Field(description="Where the prompt template came from.")
    request: ModelRequest = Field(description="Messages and settings as sent.")
    answer: str | None = Field(default=None, description="Raw final answer text; null on error.")
    reasoning: str | None = Field(default=None, description="Reasoning text, kept apart; never parsed.")
    response_model: str | None = Field(default=None, description="Model name the provider reported.")
    usage: Usage | None = Field(default=None, description="Token usage, when known.")
    started_at: datetime = Field(description="When the question was first sent (UTC).")
    seconds: float = Field(description="Wall time from first send to final answer or error.")
    attempts: list[Attempt] = Field(default_factory=list, description="Every attempt, in order.")
    error: CallError | None = Field(default=None, description="Why there is no answer; null if answered.")
    parsed: ParsedAnswer | None = Field(default=None, description="What the answer predicts.")
    score: Score | None = Field(default=None, description="Metrics of the answer.")
    extra: dict[str, Any] = Field(default_factory=dict, description="Provider-specific details.")

    @property
    def answered(self) -> bool:
        return self.error is None and self.answer is not None


class TranscriptContents(NamedTuple):
    """What reading a transcript found."""

    records: list[Record]
    torn_bytes: int  # size of an unfinished last line (from a crash), 0 if none


def iter_records(path: Path) -> Iterator[Record]:
    """Yield the records of a transcript one line at a time (a long run's transcript need
    not fit in memory); a torn last line is skipped, any other bad line raised (see read)."""
    if not path.exists():
        return
    if not path.is_file():
        raise TranscriptError(f"{path} is not a file")
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield Record.model_validate_json(line)
            except ValidationError as exc:
                if not line.endswith(b"\n"):  # only the last line can lack one: torn by a crash
                    return
                raise TranscriptError(
                    f"{path} line {number} is not a qmkar transcript record "
                    f"({exc.errors()[0]['msg']}); is this the right file?"
                ) from None


def read(path: Path) -> TranscriptContents:
    """Read every record; a torn last line is reported in the result, not raised.

    A line that fails to parse anywhere but at the end means the file is not a
    transcript (or was edited), which is an error the user must look at.
    """
    if not path.exists():
        return TranscriptContents([], 0)
    if not path.is_file():
        raise TranscriptError(f"{path} is not a file")
    data = path.read_bytes()
    lines = data.split(b"\n")
    records: list[Record] = []
    torn = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(Record.model_validate_json(line))
        except ValidationError as exc:
            is_last = number == len(lines) or all(not rest.strip() for rest in lines[number:])
            if is_last and not data.endswith(b"\n"):
                torn = len(line)
                continue
            raise TranscriptError(
                f"{path} line {number} is not a qmkar transcript record "
                f"({exc.errors()[0]['msg']}); is this the right file?"
            ) from None
    return TranscriptContents(records, torn)


def latest(records: list[Record]) -> dict[tuple[str, str], Record]:
    """The last record per (model, item id), in first-seen order."""
    found: dict[tuple[str, str], Record] = {}
    for record in records:
        found[(record.model, record.item.id)] = record
    return found


class TranscriptWriter:
    """Appends records to a transcript, one flushed line each.

    Opening drops a torn last line left by a crash (its question is asked again), so
    every later line starts on a line of its own.
    """

    def __init__(self, path: Path, torn_bytes: int = 0) -> None:
        self.path = path
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

    def write(self, record: Record) -> None:
        if self._handle is None:
            raise TranscriptError(f"transcript {self.path} is closed")
        self._handle.write(record.model_dump_json() + "\n")
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


def write_all(records: list[Record], path: Path) -> None:
    """Write a whole transcript (used by rescore) atomically."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(record.model_dump_json() + "\n")
    temporary.replace(path)

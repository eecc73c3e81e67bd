"""Which batch holds which questions: the state file beside a transcript.

`<transcript>.batches` is append-only JSON lines, each flushed and fsync'd before qmkar
goes on. A submission is written *before* it is sent (its requests: custom_id -> question,
condition, sample) and again with the provider's batch id the moment it is accepted; its
collection or abandonment closes it. So a run killed at any point (kill -9, a reboot,
`--no-wait`) finds its batches again, and no question in a live batch is submitted twice.
A submission whose reply was lost (written, no batch id) is looked for at the provider
before anything is submitted again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from qmkar.condition import Condition
from qmkar.deferred import DeferredModel
from qmkar.errors import TranscriptError
from qmkar.outputs import append_whole, reason

SUFFIX = ".batches"  # not .jsonl: folders of transcripts are read as *.jsonl


def state_path(transcript: Path) -> Path:
    """Where a transcript's batch state lives: beside it, named after it."""
    return transcript.with_name(transcript.name + SUFFIX)


def transcript_of(state: Path) -> Path:
    return state.with_name(state.name.removesuffix(SUFFIX))


class Question(NamedTuple):
    """What one request of a batch asks: a question, under a condition, as which sample."""

    item_id: str
    condition_id: str
    sample: int


class Submitting(DeferredModel):
    """A batch about to be sent: everything needed to collect it, or to find it again."""

    event: Literal["submitting"] = "submitting"
    id: str = Field(description="qmkar's name for the submission (the marker find_batch looks for).")
    model: str = Field(description="The model name as given to --model.")
    endpoint: str | None = Field(description="The address the batch goes to.")
    options: dict[str, str | None] = Field(
        description="How to reach the provider again: base_url, api_key_env, endpoints (names, never keys).")
    at: datetime = Field(description="When it was written, just before sending (UTC).")
    command: list[str] = Field(description="The command line that submitted it (credentials masked).")
    estimate: float | None = Field(default=None, description="Its estimated cost in USD, batch price.")
    conditions: dict[str, Condition] = Field(description="Its questions' conditions, by id.")
    requests: dict[str, Question] = Field(description="custom_id -> (question id, condition id, sample).")


class Submitted(DeferredModel):
    """The provider accepted a submission."""

    event: Literal["submitted"] = "submitted"
    id: str
    batch_id: str = Field(description="The provider's batch id.")
    input_file_id: str | None = Field(default=None, description="OpenAI: the uploaded file of requests.")
    at: datetime
    found: bool = Field(default=False, description="Found at the provider after a lost reply.")


class Collected(DeferredModel):
    """Every request of the batch has its record in the transcript."""

    event: Literal["collected"] = "collected"
    id: str
    at: datetime
    status: str = Field(description="The batch's final status at the provider.")
    answered: int
    errors: int


class Abandoned(DeferredModel):
    """The submission never became a batch (refused, or not found after a lost reply)."""

    event: Literal["abandoned"] = "abandoned"
    id: str
    at: datetime
    reason: str


Event = Annotated[Submitting | Submitted | Collected | Abandoned, Field(discriminator="event")]
EVENT: TypeAdapter[Any] = TypeAdapter(Event, config=ConfigDict(defer_build=True))  # as DeferredModel's


class Batch:
    """One submission and what became of it."""

    def __init__(self, submission: Submitting) -> None:
        self.submission = submission
        self.submitted: Submitted | None = None
        self.collected: Collected | None = None
        self.abandoned: Abandoned | None = None

    @property
    def id(self) -> str:
        return self.submission.id

    @property
    def batch_id(self) -> str | None:
        return self.submitted.batch_id if self.submitted else None

    @property
    def closed(self) -> bool:
        return self.collected is not None or self.abandoned is not None

    @property
    def live(self) -> bool:
        """At the provider and not yet collected."""
        return self.submitted is not None and not self.closed

    @property
    def in_doubt(self) -> bool:
        """Written, but the provider's reply was lost: it may or may not exist."""
        return self.submitted is None and not self.closed

    def questions(self) -> Iterator[Question]:
        return iter(self.submission.requests.values())


class BatchState:
    """A transcript's batches, read at once, appended to as they change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.batches: dict[str, Batch] = {}
        self._torn = 0
        if path.exists():
            self._read()

    def _read(self) -> None:
        with self.path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    self._apply(EVENT.validate_json(line))
                except ValidationError as exc:
                    if not line.endswith(b"\n"):  # cut by a crash mid-write: it never happened
                        self._torn = len(line)
                        return
                    raise TranscriptError(f"{self.path} line {number} is not a qmkar batch record "
                                          f"({exc.errors()[0]['msg']}); is this the right file?") from None

    def _apply(self, event: Any) -> None:
        if isinstance(event, Submitting):
            self.batches[event.id] = Batch(event)
            return
        batch = self.batches.get(event.id)
        if batch is None:
            return
        if isinstance(event, Submitted):
            batch.submitted = event
        elif isinstance(event, Collected):
            batch.collected = event
        elif isinstance(event, Abandoned):
            batch.abandoned = event

    def write(self, event: Submitting | Submitted | Collected | Abandoned) -> None:
        """Append one event and make it durable (fsync) before returning: the next step may
        be a submission nothing else remembers. A write that fails (a full disk) is cut back
        off, so the file keeps whole lines, and is one TranscriptError: the same command run
        again finds what was submitted (a submission with no id is looked for at the provider)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise self._failed(exc) from None
        try:
            size = os.fstat(descriptor).st_size - self._torn
            if self._torn:
                os.ftruncate(descriptor, size)
                self._torn = 0
            append_whole(descriptor, event.model_dump_json().encode() + b"\n", size)
            os.fsync(descriptor)
        except OSError as exc:
            raise self._failed(exc) from None
        finally:
            os.close(descriptor)
        self._apply(event)

    def _failed(self, exc: OSError) -> TranscriptError:
        return TranscriptError(f"cannot write {self.path}: {reason(exc)}; run the same command again when "
                               "that is fixed: what was submitted before is found and collected")

    def of(self, model: str) -> list[Batch]:
        """The batches of one model (by the name given to --model), oldest first."""
        return [b for b in self.batches.values() if b.submission.model == model]

    def live(self, batches: Iterable[Batch] | None = None) -> list[Batch]:
        return [b for b in (self.batches.values() if batches is None else batches) if b.live]

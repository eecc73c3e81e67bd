"""Transcripts on disk: one JSON line per asked question, appended, read back line by line.

Records are appended as answers arrive, each with its run, template and item lines in one
`write`, so a crash or Ctrl-C loses nothing already answered and leaves at most a torn
last line. One process writes a transcript at a time (an advisory lock), and qmkar
appends only to files that are its own transcripts. `Reading` streams whole records (a
torn last line is skipped and reported); readers take the last record per question,
condition and sample. The line shapes are in records.py; slim.py reads what reports and
resume need without building whole records; rescore.py grades stored answers again.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

import msgspec
from pydantic import ValidationError

from qmkar.errors import TranscriptError, UsageError
from qmkar.outputs import make_folder, probe, reason
from qmkar.records import (
    PERMANENT_KINDS as PERMANENT_KINDS,
)
from qmkar.records import (
    RETRYABLE_STATUSES as RETRYABLE_STATUSES,
)
from qmkar.records import (
    SCHEMA_VERSION,
    Attempt,
    CallError,
    ItemLine,
    Record,
    RunHeader,
    TemplateLine,
    retryable_kind,
    template_key,
    text_key,
    upgrade_v1,
)
from qmkar.render import Template, default_template, render
from qmkar.tasks.base import Item

if TYPE_CHECKING:
    from qmkar.slim import SlimRecord

try:  # advisory locks are POSIX; elsewhere a transcript is not locked
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = ["SCHEMA_VERSION", "Attempt", "CallError", "ItemLine", "Record", "RunHeader", "TemplateLine",
           "retryable_kind", "template_key", "text_key", "upgrade_v1"]

class TranscriptContents(NamedTuple):
    """What reading a transcript found."""

    records: list[Record]
    torn_bytes: int  # size of an unfinished last line (from a crash), 0 if none


# The kind of a line, read without parsing it: qmkar writes it first, other tools may space it.
KIND = re.compile(rb'\s*\{\s*"kind"\s*:\s*"(\w+)"')
# A newer qmkar's line, also when it no longer validates as this qmkar's shape.
VERSION = re.compile(rb'"schema_version"\s*:\s*(\d+)')


def present(path: Path) -> bool:
    """Whether a transcript file is there to read: False when missing, an error when it is
    not a file or cannot be looked at (a name too long, no access)."""
    try:
        if not path.is_file():
            if path.exists():
                raise TranscriptError(f"{path} is not a file")
            return False
    except OSError as exc:
        raise TranscriptError(f"cannot read {path}: {reason(exc)}") from None
    return True


def opened(path: Path) -> IO[bytes]:
    try:
        return path.open("rb")
    except OSError as exc:
        raise TranscriptError(f"cannot read {path}: {reason(exc)}") from None


def newer_error(path: Path, number: int, version: int) -> TranscriptError:
    return TranscriptError(
        f"{path} line {number} was written by a newer qmkar (transcript schema {version}; this qmkar "
        f"reads up to {SCHEMA_VERSION}); upgrade qmkar to read it")


def bad_line(path: Path, number: int, line: bytes, why: str) -> TranscriptError:
    """The error for a line that is not a transcript line (a newer qmkar's, when it says so)."""
    version = VERSION.search(line)
    if version is not None and int(version[1]) > SCHEMA_VERSION:
        return newer_error(path, number, int(version[1]))
    return TranscriptError(f"{path} line {number} is not a qmkar transcript record ({why}); "
                           "is this the right file?")


class Reading:
    """The records of one transcript, streamed line by line, each with its item attached.

    Besides answers, a transcript holds a `run` line per invocation and each `item` and
    `template` once, before the first answer that uses it; they are kept in `runs`,
    `items` and `templates`. A line torn by a crash can only be the last (it has no
    newline) after at least one good line: it is skipped and its size kept in
    `torn_bytes`. Any other bad line, or a line written by a newer qmkar, is an error the
    user must look at."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.torn_bytes = 0
        self.runs: list[RunHeader] = []
        self.items: dict[str, Item] = {}
        self.templates: dict[str, TemplateLine] = {}

    def __iter__(self) -> Iterator[Record]:
        try:
            yield from self._records()
        except OSError as exc:  # a read error mid-file (a failing disk, a special file)
            raise TranscriptError(f"cannot read {self.path}: {reason(exc)}") from None

    def _records(self) -> Iterator[Record]:
        if not present(self.path):
            return
        context = {"items": self.items}
        good = 0
        with opened(self.path) as handle:
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
                        record = Record.model_validate_json(line, context=context)
                        record = self._newer_refused(record, number)
                        good += 1
                        yield record
                        continue
                    good += 1
                except ValidationError as exc:
                    if not line.endswith(b"\n") and good:
                        self.torn_bytes = len(line)
                        return
                    raise bad_line(self.path, number, line, exc.errors()[0]["msg"]) from None

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
            raise newer_error(self.path, number, line.schema_version)
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
        try:
            folder = path.is_dir()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {reason(exc)}") from None
        if folder:
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


def run_records(path: Path, conditions: set[str], item_ids: set[str]) -> list[SlimRecord]:
    """The latest records of a run's questions under its conditions, slim (no contexts, no
    answer texts): what the end-of-run summary and usage read."""
    from qmkar.slim import SlimReading  # slim.py reads lines through this module

    return [record for record in latest(SlimReading(path)).values()
            if record.condition_id in conditions and record.item_id in item_ids]


class Keyed(Protocol):
    @property
    def key(self) -> tuple[str, str, int]: ...


K = TypeVar("K", bound=Keyed)


def latest(records: Iterable[K]) -> dict[tuple[str, str, int], K]:
    """The last record per (question, condition, sample), in first-seen order: a question
    that failed and was asked again later counts once."""
    found: dict[tuple[str, str, int], K] = {}
    for record in records:
        found[record.key] = record
    return found


LINE_KINDS = frozenset({"run", "item", "template", "answer"})


def holder(descriptor: int) -> int | None:
    """The pid holding a lock on the open file (Linux's /proc/locks), if it can be known."""
    try:
        stat = os.fstat(descriptor)
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            for line in handle:
                fields = line.split()
                if "->" in fields or len(fields) < 6:
                    continue
                device = fields[5].split(":")
                if len(device) == 3 and device[2] == str(stat.st_ino) and fields[4].lstrip("-").isdigit():
                    pid = int(fields[4])
                    return pid if pid > 0 and pid != os.getpid() else None
    except OSError:
        return None
    return None


def lock(descriptor: int, path: Path) -> None:
    """Take the transcript's lock, or say which process holds it."""
    if fcntl is None:  # pragma: no cover
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = holder(descriptor)
        who = f"another process (pid {pid})" if pid else "another process"
        raise TranscriptError(f"{path} is being written by {who}; wait for it to finish, or write to "
                              "another file with -o") from None


def first_line_is_ours(handle: Any) -> bool:
    """Whether the file's first non-blank line is a whole qmkar transcript line."""
    for line in handle:
        if not line.strip():
            continue
        if not line.endswith(b"\n"):
            return False
        try:
            data = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return False
        return isinstance(data, dict) and (data.get("kind") in LINE_KINDS
                                           or ("item" in data and "model" in data))
    return False


class TranscriptWriter:
    """Appends to a transcript, each record with its run, template and item lines (those the
    file lacks) in one `write`, under an advisory lock held until `close`.

    Opening refuses a file another process is writing, and a non-empty file that is not a
    qmkar transcript (qmkar modifies only its own files). `torn_bytes` is the size of an
    unfinished last line a Reading found (left by a crash): it is dropped, so every later
    line starts on a line of its own, and its question is asked again. `items` and
    `templates` name those the file already holds."""

    def __init__(self, path: Path, torn_bytes: int = 0, items: Iterable[str] = (),
                 templates: Iterable[str] = ()) -> None:
        self.path = path
        self.items = set(items)
        self.templates = set(templates)
        self._headers: list[RunHeader] = []
        if probe(path) == "folder":
            raise TranscriptError(f"cannot write the transcript {path}: it is a folder; give a file name")
        make_folder(path.parent)
        try:
            self._descriptor: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise TranscriptError(f"cannot write the transcript {path}: {reason(exc)}") from None
        try:
            lock(self._descriptor, path)
            self._prepare(torn_bytes)
        except BaseException:
            self.close()
            raise

    def _prepare(self, torn_bytes: int) -> None:
        assert self._descriptor is not None
        size = os.fstat(self._descriptor).st_size
        if not size:
            return
        with self.path.open("rb") as handle:
            if not first_line_is_ours(handle):
                raise TranscriptError(f"{self.path} is not a qmkar transcript and qmkar appends only to its "
                                      "own; choose another file with -o")
            handle.seek(max(0, size - torn_bytes - 1))
            tail = handle.read()
        if torn_bytes:
            if size <= torn_bytes or tail[:1] != b"\n" or b"\n" in tail[1:]:
                raise TranscriptError(f"{self.path} changed while it was read (is another program writing "
                                      "it?); run the command again")
            os.ftruncate(self._descriptor, size - torn_bytes)
        elif not tail.endswith(b"\n"):
            self._write(b"\n")

    def header(self, header: RunHeader) -> None:
        """A run line, written with the next record: a rerun with nothing to ask leaves the
        file as it was."""
        self._headers.append(header)

    def write(self, record: Record, template: TemplateLine | None = None) -> None:
        """Append the record, after its run line, template and item when the file lacks them."""
        lines = [header.model_dump_json() for header in self._headers]
        if template is not None and template.id not in self.templates:
            lines.append(template.model_dump_json())
        if record.item_id not in self.items:
            lines.append(ItemLine(item=record.item).model_dump_json())
        lines.append(record.model_dump_json())
        self._write(("\n".join(lines) + "\n").encode())
        self._headers = []
        if template is not None:
            self.templates.add(template.id)
        self.items.add(record.item_id)

    def _write(self, data: bytes) -> None:
        """One `write` of whole lines. A failed or short write (a full disk) is cut back off,
        so the file keeps only whole lines, and becomes a TranscriptError.

        No fsync: a crash or kill -9 of qmkar keeps what the OS has, and an fsync per
        answer would serialise a fast run on the disk."""
        if self._descriptor is None:
            raise TranscriptError(f"transcript {self.path} is closed")
        size = os.fstat(self._descriptor).st_size
        try:
            written = os.write(self._descriptor, data)
            if written != len(data):
                raise OSError(28, os.strerror(28))
        except OSError as exc:
            try:
                os.ftruncate(self._descriptor, size)
            except OSError:
                pass
            raise TranscriptError(f"cannot write to the transcript {self.path}: {reason(exc)}; the "
                                  "answers written before are kept") from None

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing releases the lock
            self._descriptor = None

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

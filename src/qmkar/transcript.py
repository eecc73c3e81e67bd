"""Transcripts on disk: one JSON line per asked question, appended, read back line by line.

Records are appended as answers arrive, each with its run, template and item lines in one
`write`, so a crash or Ctrl-C loses nothing already answered and leaves at most a torn
last line. One process writes a transcript at a time (an advisory lock), and qmkar
appends only to files that are its own transcripts. `Reading` streams whole records (a
torn last line is skipped and reported); readers take the last record per question,
condition and sample; `whole_records` reads only the records of some keys. The line shapes
are in records.py, the writer in writer.py; slim.py reads what reports and resume need
without building whole records; rescore.py grades stored answers again.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

import msgspec
from pydantic import ValidationError

from qmkar.errors import TranscriptError, UsageError
from qmkar.outputs import QMKAR_LINE, first_line, reason
from qmkar.readprogress import ReadProgress, Told, begin
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
from qmkar.shapes import decode_item_id, decode_key
from qmkar.tasks.base import Item
from qmkar.writer import TranscriptWriter, lock

if TYPE_CHECKING:
    from qmkar.slim import SlimRecord

__all__ = ["SCHEMA_VERSION", "Attempt", "CallError", "ItemLine", "Record", "RunHeader", "TemplateLine",
           "TranscriptWriter", "lock", "retryable_kind", "template_key", "text_key", "upgrade_v1"]

class TranscriptContents(NamedTuple):
    """What reading a transcript found."""

    records: list[Record]
    torn_bytes: int  # size of an unfinished last line (from a crash), 0 if none


# The kind of a line, read without parsing it: qmkar writes it first, other tools may space it.
KIND = re.compile(rb'\s*\{\s*"kind"\s*:\s*"(\w+)"')


def kind_of(line: bytes) -> bytes:
    """The kind of a line (KIND), b"" for none; qmkar's own answer and item lines, most of a
    transcript, are told by their first bytes without the regular expression."""
    if line.startswith(b'{"kind":"answer",'):
        return b"answer"
    if line.startswith(b'{"kind":"item",'):
        return b"item"
    kind = KIND.match(line)
    return kind[1] if kind is not None else b""


def line_start(path: Path, near: int) -> int | None:
    """Where the first line starting at or after byte `near` starts, to split a file between
    two processes: the first item line's when one starts within REACH bytes, else any line's.
    In a transcript of one run each item line comes just before its answers, so a part that
    starts at one needs no item from the lines before it; a part cut between an item and its
    answer made the second process scan every line before the cut for where item lines are
    (0.15 s for the 34 MB before a compare's cut). None when no line starts there before the
    end (or the file cannot be read: the reading of it says why)."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(near - 1, 0))
            handle.readline()  # the rest of the line holding byte near - 1
            start = handle.tell()
            ahead = handle.read(REACH)
    except OSError:
        return None
    if not ahead or start == 0:
        return None
    item = 0 if ahead.startswith(ITEM_HEAD) else ahead.find(b"\n" + ITEM_HEAD) + 1
    return start + item


ITEM_HEAD = b'{"kind":"item","item":{"id":"'  # how qmkar starts an item line, up to its id
HEADS = (b'{"kind":"answer",', ITEM_HEAD, b'{"kind":"run",', b'{"kind":"template",')  # qmkar's lines
BLOCK = 1 << 22  # bytes item_offsets reads at a time (and then to the end of the line)
REACH = 1 << 20  # bytes line_start looks through for an item line


def item_offsets(path: Path, stop: int) -> dict[str, int]:
    """Where the item lines before byte `stop` start, by the item's id (the last line of an
    id, as a reading keeps the last), what a reading of the rest needs to look items up.
    Read a few MB of whole lines at a time: where every line starts as qmkar writes its
    lines (HEADS), item lines are found by their first bytes and the id read between quotes;
    elsewhere (lines spaced by another tool, blank lines, an escape in an id) line by line.
    A line that is not a valid item is left out: the reading of that part reports it."""
    found: dict[str, int] = {}
    with opened(path) as handle:
        base = 0  # where the block starts in the file: always a line's start
        while base < stop and (block := handle.read(BLOCK) + handle.readline()):
            if len(block) > stop - base:  # up to the end of the line holding byte stop - 1
                end = block.find(b"\n", stop - base - 1)
                block = block if end < 0 else block[:end + 1]
            lines = block.count(b"\n") + (not block.endswith(b"\n"))
            if sum(block.count(b"\n" + head) for head in HEADS) + block.startswith(HEADS) == lines:
                _compact_items(block, base, found)
            else:
                _items_by_line(block, base, found)
            base += len(block)
    return found


def _compact_items(block: bytes, base: int, found: dict[str, int]) -> None:
    at = 0 if block.startswith(ITEM_HEAD) else _next_item(block, 0)
    while at >= 0:
        start = at + len(ITEM_HEAD)
        end = block.find(b'"', start)
        if b"\\" in block[start:end]:  # an escape: the JSON decoder reads the id
            _items_by_line(block[at:block.find(b"\n", at) + 1 or len(block)], base + at, found)
        else:
            found[block[start:end].decode(errors="replace")] = base + at
        at = _next_item(block, start)


def _next_item(block: bytes, after: int) -> int:
    """The start of the next item line after byte `after` (-1: none)."""
    at = block.find(b"\n" + ITEM_HEAD, after)
    return at + 1 if at >= 0 else -1


def _items_by_line(block: bytes, base: int, found: dict[str, int]) -> None:
    for line in io.BytesIO(block):  # lines end at \n only, as in a file
        if kind_of(line) == b"item":
            with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
                found[decode_item_id(line).item.id] = base
        base += len(line)


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
    user must look at. `progress` is told the bytes read (not started: its reader's caller
    knows what it reads in all)."""

    def __init__(self, path: Path, progress: ReadProgress | None = None) -> None:
        self.path, self.progress = path, progress
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
        good = at = 0
        told = Told(self.progress)
        mark = told.mark
        with opened(self.path) as handle:
            for number, line in enumerate(handle, start=1):
                at += len(line)
                if at >= mark:
                    mark = told.tell(at)
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
                        break
                    raise bad_line(self.path, number, line, exc.errors()[0]["msg"]) from None
        told.tell(at)

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


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def files(paths: Iterable[Path], note: Callable[[str], None] = _note) -> list[Path]:
    """The transcript files named directly or found (*.jsonl) in the folders given. A file
    found in a folder that is not a transcript (a dataset, a replay file) is skipped with
    a one-line `note`; a file named directly is kept, so reading it says what is wrong. A file
    given twice (by name, or by name and in a folder, however spelled) is read once, with a
    `note`: `compare a.jsonl a.jsonl`, likely a slip for another file, shows one run."""
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
                    line = first_line(candidate)  # an empty file is a transcript with no records yet
                    kept = line is None or QMKAR_LINE.match(line) is not None
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
    return _once(found, note)


def _once(found: list[Path], note: Callable[[str], None]) -> list[Path]:
    """`found` without the files listed before, each file's first spelling kept."""
    seen: dict[Path, Path] = {}
    for path in found:
        try:
            same = path.resolve()
        except OSError:  # unresolvable (a loop of links): reading it says what is wrong
            same = path
        if same in seen:
            note(f"{path} is given more than once (as {seen[same]} first); it is read once")
        else:
            seen[same] = path
    return list(seen.values())


def whole_records(path: Path, keys: set[tuple[str, str, int]]) -> dict[tuple[str, str, int], Record]:
    """The whole records of these keys in one transcript (the last of each), their items with
    contexts: what a page showing a few answers in full reads. Only their items are kept, and
    lines are judged by the slim reading that found the keys, so a bad one is skipped here."""
    wanted = {key[0] for key in keys}
    items: dict[str, Item] = {}
    found: dict[tuple[str, str, int], Record] = {}
    if not keys or not present(path):
        return found
    with opened(path) as handle:
        for line in handle:
            name = kind_of(line)
            try:
                if name == b"item":
                    if decode_item_id(line).item.id in wanted:
                        item = ItemLine.model_validate_json(line).item
                        items[item.id] = item
                elif name == b"answer":
                    head = decode_key(line)
                    if (head.item_id, head.condition_id, head.sample) in keys:
                        record = Record.model_validate_json(line, context={"items": items})
                        found[record.key] = record
                elif name not in (b"run", b"template"):  # schema 1: the key is known once read
                    record = Record.model_validate_json(line, context={"items": items})
                    if record.key in keys:
                        found[record.key] = record
            except (msgspec.ValidationError, msgspec.DecodeError, ValidationError):
                continue
    return found


def run_records(path: Path, conditions: set[str], item_ids: set[str],
                progress: ReadProgress | None = None) -> list[SlimRecord]:
    """The latest records of a run's questions under its conditions, slim (no contexts, no
    answer texts): what the end-of-run summary and usage read. `progress` is told the bytes."""
    from qmkar.slim import SlimReading  # slim.py reads lines through this module

    begin(progress, [path])
    return [record for record in latest(SlimReading(path, progress=progress)).values()
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

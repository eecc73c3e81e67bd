"""Appending to a transcript: one writer at a time, whole lines, only qmkar's own files.

TranscriptWriter takes an advisory lock (flock) for as long as it is open, so a second
process writing the same transcript stops with a line naming the first; each record goes
out with the run, template and item lines it needs in one `write`, so the file only ever
ends in whole lines or, after a crash, one torn line that the next writer drops.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from qmkar.errors import TranscriptError
from qmkar.outputs import append_whole, make_folder, probe, reason
from qmkar.records import Record, RunHeader, TemplateLine, item_line

try:  # advisory locks are POSIX; elsewhere a transcript is not locked
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


LINE_KINDS = frozenset({"run", "item", "template", "answer"})


class Changed(Exception):
    """The transcript is not the size its reading saw: another run wrote it in between."""


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
    """Whether the file's first non-blank line is a whole qmkar transcript line: stricter than
    outputs.is_transcript (a line that starts like one), as qmkar appends only to its own."""
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
    `templates` name those the file already holds. `seen`: the size the reading saw; once
    the lock is held, a file of another size raises Changed and is left as it was (a run
    that read it while another wrote it reads it again: runner.Run).

    `answers_per_item`: how many answers each item gets (a fresh transcript: models x
    samples). An item's id is then forgotten after its last answer, so the writer holds the
    ids of the items in flight, not of every item of the run. An id forgotten too early
    (an item asked more often than that) only has its line written again, which readers
    take as the same item; no answer is ever written without its item's line before it."""

    def __init__(self, path: Path, torn_bytes: int = 0, items: Iterable[str] = (),
                 templates: Iterable[str] = (), seen: int | None = None,
                 answers_per_item: int | None = None) -> None:
        self.path = path
        self.items = set(items)
        self.answers_per_item = answers_per_item
        self._answers: dict[str, int] = {}  # with answers_per_item: the answers written per item in flight
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
            if seen is not None and os.fstat(self._descriptor).st_size != seen:
                raise Changed(path)
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
        item_id = record.item_id
        if item_id not in self.items and item_id not in self._answers:
            lines.append(item_line(record.item))
        lines.append(record.model_dump_json())
        self._write(("\n".join(lines) + "\n").encode())
        self._headers = []
        if template is not None:
            self.templates.add(template.id)
        if self.answers_per_item is None:
            self.items.add(item_id)
            return
        written = self._answers.get(item_id, 0) + 1
        if written < self.answers_per_item:
            self._answers[item_id] = written
        else:
            self._answers.pop(item_id, None)

    def _write(self, data: bytes) -> None:
        """One `write` of whole lines. A failed or short write (a full disk) is cut back off,
        so the file keeps only whole lines, and becomes a TranscriptError.

        No fsync: a crash or kill -9 of qmkar keeps what the OS has, and an fsync per
        answer would serialise a fast run on the disk."""
        if self._descriptor is None:
            raise TranscriptError(f"transcript {self.path} is closed")
        try:
            append_whole(self._descriptor, data)
        except OSError as exc:
            raise TranscriptError(f"cannot write to the transcript {self.path}: {reason(exc)}; the "
                                  "answers written before are kept") from None

    @property
    def held(self) -> int:
        """How many item ids the writer holds (what it knows the file has)."""
        return len(self.items) + len(self._answers)

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing releases the lock
            self._descriptor = None

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

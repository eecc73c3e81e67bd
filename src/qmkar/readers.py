"""Several transcripts read at once: the later ones by a second process, while this one reads
the first.

compare, plot and the HTML report read two or more transcripts, each in seconds at 100k
answers, and a machine has a second core idle while one process reads. `read_each` reads
the files in order, as runs.py always did, but hands a tail of them (about half the bytes) to
a reader process (`python -m qmkar.worker read`, started as ahead.py starts its worker). It
reads them slim (slim.SlimReading) and sends each back as msgpack: the records with their
items, conditions, scores and errors written once each, and the warnings its reading gave.
Warnings reach `warn` in file order, as if every file were read here.

Whatever the reader cannot do exactly as a reading here would, is done here: a file whose
reading raised (a bad line, a newer schema: this process then raises the same error, after the
files before it), a reader that cannot start, fails or dies. Files read here before a child's
are read first, so a bad line in them is the error shown, as before. Few or small files are all
read here: starting a process costs about half a second.
"""

from __future__ import annotations

import pickle
import queue
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import msgspec

from qmkar.ahead import HERE, cpus, read_frame, start_worker, write_frame
from qmkar.condition import Condition
from qmkar.records import CallError
from qmkar.score import Score
from qmkar.shapes import SlimUsage
from qmkar.slim import SlimItem, SlimReading, SlimRecord
from qmkar.transcript import latest

SPLIT_MIN = 24 << 20  # bytes a reader process must get to be worth starting


def read_latest(path: Path, warn: Callable[[str], None] | None = None,
                contents: bool = False) -> list[SlimRecord]:
    """The latest slim record per question, condition and sample of one transcript, warning
    (not failing) about a line torn by a crash. `contents`: fingerprint the questions, as
    pairing runs needs (SlimReading)."""
    reading = SlimReading(path, warn, contents)
    kept = latest(reading)
    if reading.torn_bytes and warn is not None:
        warn(f"{path}: ignored an unfinished last line ({reading.torn_bytes} bytes) left by a crash")
    return list(kept.values())


def read_each(paths: list[Path], warn: Callable[[str], None] | None = None,
              contents: bool = False) -> list[list[SlimRecord]]:
    """read_latest of every file, in order; a tail of them read by a second process where
    that saves time (see the module's docstring)."""
    tail = _tail(paths)
    if not tail:
        return [read_latest(path, warn, contents) for path in paths]
    reader = Reader(paths[-tail:], contents)
    try:
        found = [read_latest(path, warn, contents) for path in paths[:-tail]]
        for path in paths[-tail:]:
            found.append(reader.take(path, warn, contents))
        return found
    finally:
        reader.close()


def _tail(paths: list[Path]) -> int:
    """How many of the last files a reader process should read (0: none): the split of the
    bytes closest to even, when the reader's part is at least SPLIT_MIN."""
    if len(paths) < 2 or cpus() < 2:
        return 0
    try:
        sizes = [path.stat().st_size for path in paths]
    except OSError:  # the reading here says what is wrong with the file
        return 0
    tail = min(range(1, len(paths)), key=lambda t: max(sum(sizes[:-t]), sum(sizes[-t:])))
    return tail if sum(sizes[-tail:]) >= SPLIT_MIN else 0


class Wire(msgspec.Struct, array_like=True, gc=False):
    """A SlimRecord as the reader sends it: its item, condition, error and score by index."""

    model: str
    label: str | None
    item: int
    condition: int
    condition_id: str
    sample: int
    error: int  # -1: none
    score: int  # -1: none
    flags: int  # truncated 1, refused 2, unparsed 4, has_answer 8
    usage: SlimUsage | None
    extra: dict[str, Any]


class Reply(msgspec.Struct, array_like=True, gc=False):
    """One file's reading, sent back: the latest records, what they share, the warnings."""

    items: list[SlimItem]
    conditions: list[bytes]  # JSON of each distinct condition, score and error
    scores: list[bytes]
    errors: list[bytes]
    records: list[Wire]
    warnings: list[str]


class Reader:
    """A reader process's files, taken in order: each as it sent it back, or read here."""

    def __init__(self, paths: list[Path], contents: bool) -> None:
        self.replies: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.process: subprocess.Popen[bytes] | None = None
        try:
            self.process = start_worker("read")
            assert self.process.stdin is not None
            write_frame(self.process.stdin, pickle.dumps(([str(path) for path in paths], contents)))
        except (OSError, ValueError):  # no reader: every file is read here
            self.replies.put(None)
            return
        threading.Thread(target=self._receive, args=(len(paths),), name="qmkar-reader", daemon=True).start()

    def _receive(self, count: int) -> None:
        """The receiving thread: the reader's frames, in order, then None for what it did not send."""
        assert self.process is not None and self.process.stdout is not None
        stream = self.process.stdout
        try:
            hello = read_frame(stream)
            if hello is None or hello.decode(errors="replace") != HERE:
                return  # it did not start, or runs another copy of qmkar
            for _ in range(count):
                body = read_frame(stream)
                if body is None:
                    return
                self.replies.put(body or None)
        except (OSError, ValueError):  # closed under it: the run has ended
            return
        finally:
            self.replies.put(None)

    def take(self, path: Path, warn: Callable[[str], None] | None, contents: bool) -> list[SlimRecord]:
        """The next file's records: the reader's, or read here when it could not."""
        body = self.replies.get()
        if body is None:
            self.replies.put(None)  # and every file after this one is read here too
            return read_latest(path, warn, contents)
        reply = msgspec.msgpack.decode(body, type=Reply)
        if warn is not None:
            for message in reply.warnings:
                warn(message)
        return _records(reply)

    def close(self) -> None:
        """Stop the reader, whether or not it has sent everything."""
        process, self.process = self.process, None
        if process is None:
            return
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def _records(reply: Reply) -> list[SlimRecord]:
    conditions = [Condition.model_validate_json(text) for text in reply.conditions]
    scores = [Score.model_validate_json(text) for text in reply.scores]
    errors = [CallError.model_validate_json(text) for text in reply.errors]
    items = reply.items
    return [SlimRecord(w.model, w.label, items[w.item], conditions[w.condition], w.condition_id, w.sample,
                       None if w.error < 0 else errors[w.error], None if w.score < 0 else scores[w.score],
                       bool(w.flags & 1), bool(w.flags & 2), bool(w.flags & 4), bool(w.flags & 8), w.usage,
                       w.extra) for w in reply.records]


def _reply(records: list[SlimRecord], warnings: list[str]) -> bytes:
    """The reader's side: one file's records as a Reply."""
    shared: list[dict[int, tuple[int, Any]]] = [{}, {}, {}, {}]  # items, conditions, scores, errors

    def index(table: int, value: Any) -> int:
        if value is None:
            return -1
        known = shared[table].get(id(value))
        if known is None:
            known = shared[table][id(value)] = (len(shared[table]), value)
        return known[0]

    wires = [Wire(r.model, r.label, index(0, r.item), index(1, r.condition), r.condition_id, r.sample,
                  index(3, r.error), index(2, r.score),
                  r.truncated | r.refused << 1 | r.unparsed << 2 | r.has_answer << 3, r.usage, r.extra)
             for r in records]
    items, conditions, scores, errors = ([value for _, value in table.values()] for table in shared)
    dumped = [[value.__pydantic_serializer__.to_json(value) for value in table]
              for table in (conditions, scores, errors)]
    return msgspec.msgpack.encode(Reply(items, dumped[0], dumped[1], dumped[2], wires, warnings))


def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """The reader process: read each file asked for and send it back, or an empty frame when
    its reading raised (the run reads that file itself and shows the error)."""
    write_frame(sink, HERE.encode())
    job = read_frame(source)
    if job is None:
        return
    paths, contents = pickle.loads(job)
    for path in paths:
        warnings: list[str] = []
        try:
            body = _reply(read_latest(Path(path), warnings.append, contents), warnings)
        except Exception:  # noqa: BLE001 - whatever it was, the run's own reading meets it again
            body = b""
        write_frame(sink, body)

"""Transcripts read by two processes at once: a second one reads the last part of the bytes
(the end of a file, and any files after it) while this one reads the rest.

report, compare, plot and the HTML report read transcripts of up to 100k answers and more,
seconds each, while a second core sits idle. `read_each` reads the files in order, as runs.py
always did, but hands part of the bytes to a reader process (a worker, offload.py, serving
with this module's `serve`): the files' last SHARE of bytes, counted as if they were one
file, from a line's start; the file holding the cut is read in two parts. A reader given
the end of a file finds the file's earlier item lines (SlimReading.index) when its first
answer to one of them asks, and decodes those its answers need; when most of them are (a
second model asked later into the same file), it gives the part back (`_own_items`). It
reads slim (slim.SlimReading) and sends back, as msgpack, the latest records with their
items, conditions, scores and errors written once each, and what to warn about. For
report and plot, which need only their counts (`count_each`), it counts them itself and
sends the tallies: fewer bytes to write and read, and the counting done on the second
core. Where it read the end of a file whose start was read here, it sends that part's keys
too; when one of them was read here as well (a question asked again at the file's end),
its tallies cannot be joined to this process's, and it is asked for its records.

Whatever the reader cannot do exactly as a reading here would, is done here: a part whose
reading raised (a bad line, a newer schema, a torn line it cannot judge alone: this process
reads that part itself and raises the same error, with the same line number), a reader that
cannot start, fails or dies. The parts read here come first, so their errors are shown first,
as before. Warnings (answers graded again, a torn last line) are given here, once per file,
in file order. Small inputs are read here alone: starting a process costs about half a
second. A command's progress (readprogress.ReadProgress) counts the bytes read here as they are
read, and a reader's part whole when its reading comes back.
"""

from __future__ import annotations

import pickle
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec

from qmkar import offload
from qmkar.condition import Condition
from qmkar.offload import cpus, read_frame, write_frame
from qmkar.readprogress import ReadProgress, begin
from qmkar.records import CallError
from qmkar.score import Score
from qmkar.selection import Selection
from qmkar.shapes import SlimUsage
from qmkar.slim import SlimItem, SlimReading, SlimRecord
from qmkar.tally import Tallies, Tally, tallies
from qmkar.transcript import latest, line_start

SPLIT_MIN = 24 << 20  # bytes a reader process must get to be worth starting
# Of the files' bytes, the part the reader reads: it starts later. Measured on a 100k-record
# report: 0.42 beat 0.35 in 7 rounds of 8 once the reader no longer scanned the lines before
# its part up front (0.3-0.35 was best while it did); 0.48 and 0.55 were slower. Two files
# used to be split between whole files, and a compare of two 100k-record files waited 0.3 to
# 1 s for the reader's: with this share it took 4.16 against 4.67 s (5 rounds). Once the
# reader was started before the command's imports (launch.py), 0.48 was no faster (5 rounds,
# together with no head for rescore's worker: halves.HEAD).
SHARE = 0.42

CHECK_EVERY = 1000  # a reader's records between two looks at where its answers' items were
Warn = Callable[[str], None] | None


class Part(NamedTuple):
    """What a reader is asked for: a file from byte `start` (a line's start) to its end."""

    path: Path
    start: int
    size: int = 0  # the file's size when it was split: what progress counts once it is read


def read_latest(path: Path, warn: Warn = None, contents: bool = False,
                progress: ReadProgress | None = None) -> list[SlimRecord]:
    """The latest slim record per question, condition and sample of one transcript, warning
    (not failing) about answers graded again and a line torn by a crash. `contents`:
    fingerprint the questions, as pairing runs needs (SlimReading); `progress` is told the
    bytes read."""
    reading = SlimReading(path, contents, progress)
    kept = latest(reading)
    _warn(warn, path, reading.regraded, reading.torn_bytes)
    return list(kept.values())


def _warn(warn: Warn, path: Path, regraded: int, torn_bytes: int) -> None:
    if warn is not None and regraded:
        warn(f"{path}: {regraded} answer(s) have a stored score that does not follow from the stored "
             "answer; they are graded again here (qmkar rescore writes the grades into a file)")
    if warn is not None and torn_bytes:
        warn(f"{path}: ignored an unfinished last line ({torn_bytes} bytes) left by a crash")


def read_each(paths: list[Path], warn: Warn = None, contents: bool = False,
              progress: ReadProgress | None = None) -> Generator[list[SlimRecord], None, None]:
    """read_latest of every file, in order, each file's records given as soon as they are read
    (a caller counting one file's records does so while the reader process still reads the
    next); part of them read by a second process where that saves time (see the module's
    docstring). `progress` is told the total bytes, then the bytes read."""
    begin(progress, paths)
    parts = _parts(paths)
    if not parts:
        for path in paths:
            yield read_latest(path, warn, contents, progress)
        return
    reader = Reader(parts, contents)
    try:
        for path in paths[:-len(parts)]:
            yield read_latest(path, warn, contents, progress)
        if parts[0].start:  # a file's end read by the reader, its start here
            yield _read_split(parts[0], reader, warn, contents, progress)
        for part in parts[1:] if parts[0].start else parts:
            reply = reader.take()
            if reply is None:
                yield read_latest(part.path, warn, contents, progress)
            else:
                _warn(warn, part.path, reply.regraded, reply.torn_bytes)
                if progress is not None:
                    progress.advance(part.size)
                yield _records(reply)
    finally:
        reader.close()


def _read_split(part: Part, reader: Reader, warn: Warn, contents: bool,
                progress: ReadProgress | None) -> list[SlimRecord]:
    """One file, the lines before the part's start read here and the rest by the reader (or
    here, when it could not)."""
    reading = SlimReading(part.path, contents, progress)
    first = list(reading.read(stop=part.start))
    reply = reader.take()
    if reply is None:
        kept = latest([*first, *reading.read()])
        _warn(warn, part.path, reading.regraded, reading.torn_bytes)
    else:  # the reader's records are the latest of its part: the same latest of the whole
        kept = latest([*first, *_records(reply)])
        _warn(warn, part.path, reading.regraded + reply.regraded, reply.torn_bytes)
        if progress is not None:
            progress.advance(part.size - part.start)
    return list(kept.values())


class Counted(NamedTuple):
    """One file's latest records, counted: how many there are, and the tallies of those the
    selection keeps (tally.tallies)."""

    records: int
    tallies: list[Tally]


def _counted(records: list[SlimRecord], selection: Selection) -> Counted:
    return Counted(len(records), tallies(selection.kept(records)))


def count_each(paths: list[Path], selection: Selection, warn: Warn = None,
               progress: ReadProgress | None = None) -> Generator[Counted, None, None]:
    """Each file's latest records that `selection` keeps, counted, file by file: what
    `read_each` gives, each file's records counted and let go (report and plot need their
    tallies only). A reader process counts its part itself and sends the tallies, not the records;
    where it has the end of a file read here, the two parts' tallies are joined when their
    keys do not meet, and otherwise it is asked for its records (`_count_split`)."""
    begin(progress, paths)
    parts = _parts(paths)
    if not parts:
        for path in paths:
            yield _counted(read_latest(path, warn, False, progress), selection)
        return
    reader = Reader(parts, False, selection)
    try:
        for path in paths[:-len(parts)]:
            yield _counted(read_latest(path, warn, False, progress), selection)
        if parts[0].start:
            yield _count_split(parts[0], len(parts) - 1, reader, selection, warn, progress)
        for part in parts[1:] if parts[0].start else parts:
            tallied = reader.take_tallied()
            if tallied is None:
                yield _counted(read_latest(part.path, warn, False, progress), selection)
            else:
                _warn(warn, part.path, tallied.regraded, tallied.torn_bytes)
                if progress is not None:
                    progress.advance(part.size)
                yield Counted(tallied.records, pickle.loads(tallied.tallies))
    finally:
        reader.close()


def _count_split(part: Part, later: int, reader: Reader, selection: Selection, warn: Warn,
                 progress: ReadProgress | None) -> Counted:
    """One file counted, the lines before the part's start read here and the rest by the
    reader. Its tallies join this process's when no key of its part is among the keys read
    here (a question asked again at the file's end, after an error, is the usual one that
    is): the latest records of the whole are then those read here followed by its own. When
    one is, the reader is asked for its records (it sends them after the `later` parts'
    tallies), and the whole is counted here, as read_each's would be."""
    reading = SlimReading(part.path, False, progress)
    first = latest(reading.read(stop=part.start))
    found = Tallies()  # counted while the reader may still be counting; of no use if a key meets
    found.extend(tallies(selection.kept(list(first.values()))))
    tallied = reader.take_tallied()
    if tallied is not None and tallied.keys is not None and first.keys().isdisjoint(tallied.keys):
        reader.release()
        found.extend(pickle.loads(tallied.tallies))
        counted = Counted(len(first) + tallied.records, list(found.values()))
    elif tallied is not None and (reply := reader.take_held(later)) is not None:
        counted = _counted(list(latest([*first.values(), *_records(reply)]).values()), selection)
    else:  # read here
        counted = _counted(list(latest([*first.values(), *reading.read()]).values()), selection)
        _warn(warn, part.path, reading.regraded, reading.torn_bytes)
        return counted
    _warn(warn, part.path, reading.regraded + tallied.regraded, tallied.torn_bytes)
    if progress is not None:
        progress.advance(part.size - part.start)
    return counted


def _parts(paths: list[Path]) -> list[Part]:
    """What a reader process should read (nothing: none is started): the files' last SHARE of
    bytes, as if they were one stream: the end of the file holding the cut, from a line's
    start, and every file after it whole. Only when that is at least SPLIT_MIN bytes, and
    with a second CPU."""
    if not paths or cpus() < 2:
        return []
    try:
        sizes = [path.stat().st_size for path in paths]
    except OSError:  # the reading here says what is wrong with the file
        return []
    cut = int(sum(sizes) * (1 - SHARE))
    first = 0
    while first < len(paths) - 1 and cut >= sizes[first]:
        cut -= sizes[first]
        first += 1
    start = line_start(paths[first], cut) if cut else 0
    if start is None:  # no line starts after the cut: the reader takes the files after it
        first, start = first + 1, 0
    parts = [Part(path, 0, size) for path, size in zip(paths[first:], sizes[first:], strict=True)]
    if not parts or sum(sizes[first:]) - start < SPLIT_MIN:
        return []
    parts[0] = parts[0]._replace(start=start)
    return parts


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
    run_id: str | None


class Reply(msgspec.Struct, array_like=True, gc=False):
    """One part's reading, sent back: the latest records, what they share, what to warn of."""

    items: list[SlimItem]
    conditions: list[bytes]  # JSON of each distinct condition, score and error
    scores: list[bytes]
    errors: list[bytes]
    records: list[Wire]
    regraded: int
    torn_bytes: int


class Tallied(msgspec.Struct, array_like=True, gc=False):
    """One part's counting, sent back (count_each): its latest records' number, their keys
    when the command read the file's start, the pickled tallies of those the selection
    keeps, what to warn of."""

    records: int
    keys: list[tuple[str, str, int]] | None
    tallies: bytes
    regraded: int
    torn_bytes: int


ASK = b"records"  # the command's frame asking a counting reader for its first part's records


class Reader:
    """A reader process's parts, taken in order: each as it sent it back, or None (read it here).
    With a `selection` it counts each part (count_each) instead of sending its records."""

    def __init__(self, parts: list[Part], contents: bool, selection: Selection | None = None) -> None:
        self.replies: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.stashed: deque[bytes | None] = deque()  # later parts' frames, received before asked-for records
        asked = [(str(part.path), part.start) for part in parts]
        job = pickle.dumps((asked, contents, CHECK_EVERY, selection))
        self.process = offload.start("qmkar.readers", job)
        if self.process is None:  # no reader: every part is read here
            self.replies.put(None)
            return
        frames = len(parts) + (selection is not None and parts[0].start > 0)  # and the records asked for
        threading.Thread(target=self._receive, args=(frames,), name="qmkar-reader", daemon=True).start()

    def _receive(self, count: int) -> None:
        """The receiving thread: the reader's frames, in order (an empty one for a part whose
        reading raised there), then None for what it did not send."""
        assert self.process is not None and self.process.stdout is not None
        stream = self.process.stdout
        try:
            if not offload.greeted(stream):
                return  # it did not start, or runs another copy of qmkar
            for _ in range(count):
                body = read_frame(stream)
                if body is None:
                    return
                self.replies.put(body)
        except (OSError, ValueError):  # closed under it: the command has ended
            return
        finally:
            self.replies.put(None)

    def _next(self) -> bytes | None:
        """The next part's frame: empty for a part whose reading raised there (the reader
        goes on with the next), None once the reader has ended (for every part after it too)."""
        return self.stashed.popleft() if self.stashed else self._received()

    def _received(self) -> bytes | None:
        body = self.replies.get()
        if body is None:
            self.replies.put(None)
        return body

    def take(self) -> Reply | None:
        """The next part's reading, or None when it is to be read here."""
        body = self._next()
        return msgspec.msgpack.decode(body, type=Reply) if body else None

    def take_tallied(self) -> Tallied | None:
        """The next part's counting, or None when it is to be read here."""
        body = self._next()
        return msgspec.msgpack.decode(body, type=Tallied) if body else None

    def release(self) -> None:
        """Tell the reader that the first part's records it holds will not be asked for: it
        lets them go and ends once it has sent every part."""
        assert self.process is not None and self.process.stdin is not None
        try:
            write_frame(self.process.stdin, b"")
        except (OSError, ValueError):  # it has ended
            pass

    def take_held(self, later: int) -> Reply | None:
        """The records of the first part, whose counting was taken last: asked for, and sent
        once the reader has sent the `later` parts' counting (kept for take_tallied); None
        when they are to be read here."""
        assert self.process is not None and self.process.stdin is not None and not self.stashed
        try:
            write_frame(self.process.stdin, ASK)
        except (OSError, ValueError):  # it has ended
            return None
        self.stashed.extend([self._received() for _ in range(later)])
        body = self._received()
        return msgspec.msgpack.decode(body, type=Reply) if body else None

    def close(self) -> None:
        """Stop the reader at once, whether or not it has sent everything: what it has not
        sent is no longer wanted."""
        process, self.process = self.process, None
        if process is None:
            return
        offload.stop(process, kill=True)
        if process.stdout is not None:
            process.stdout.close()


def _records(reply: Reply) -> list[SlimRecord]:
    conditions = [Condition.model_validate_json(text) for text in reply.conditions]
    scores = [Score.model_validate_json(text) for text in reply.scores]
    errors = [CallError.model_validate_json(text) for text in reply.errors]
    items = [msgspec.structs.replace(item, task=sys.intern(item.task)) for item in reply.items]
    return [SlimRecord(sys.intern(w.model), w.label and sys.intern(w.label), items[w.item],
                       conditions[w.condition], sys.intern(w.condition_id), w.sample,
                       None if w.error < 0 else errors[w.error], None if w.score < 0 else scores[w.score],
                       bool(w.flags & 1), bool(w.flags & 2), bool(w.flags & 4), bool(w.flags & 8), w.usage,
                       w.extra, w.run_id and sys.intern(w.run_id)) for w in reply.records]


def _reply(records: Iterable[SlimRecord], regraded: int, torn_bytes: int) -> bytes:
    """The reader's side: one part's latest records as a Reply."""
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
                  r.truncated | r.refused << 1 | r.unparsed << 2 | r.has_answer << 3, r.usage, r.extra,
                  r.run_id)
             for r in records]
    items, conditions, scores, errors = ([value for _, value in table.values()] for table in shared)
    dumped = [[value.__pydantic_serializer__.to_json(value) for value in table]
              for table in (conditions, scores, errors)]
    return msgspec.msgpack.encode(Reply(items, dumped[0], dumped[1], dumped[2], wires, regraded, torn_bytes))


class Elsewhere(Exception):
    """The part's answers are mostly to items written before it."""


def _own_items(reading: SlimReading, check_every: int) -> Iterator[SlimRecord]:
    """The part's records, given up (Elsewhere) as soon as more than a fifth of its answers
    (counted every `check_every`: the command's CHECK_EVERY) were to items written before the
    part (a second model's answers at the end of a transcript): the reader would decode those
    items again, as the command already does, and hold them twice; the command reads such a
    part faster itself."""
    for count, record in enumerate(reading, start=1):
        if count % check_every == 0 and reading.looked_up * 5 > count:
            raise Elsewhere
        yield record


def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """The reader process (after offload's greeting): read each part asked for and send it
    back, or an empty frame when its reading raised (the command reads that part itself)."""
    job = read_frame(source)
    if job is None:
        return
    parts, contents, check_every, selection = pickle.loads(job)
    held = None  # a counted first part's latest records, which the command may ask for
    for path, start in parts:
        reading = SlimReading(Path(path), contents)
        try:
            if start:
                reading.index(start)
            # A torn last line with no good line before it in this part raises (SlimReading):
            # whether it is torn or bad depends on the lines before, read by the command.
            kept = latest(_own_items(reading, check_every))
            if selection is None:
                body = _reply(kept.values(), reading.regraded, reading.torn_bytes)
            else:
                found = pickle.dumps(tallies(selection.kept(list(kept.values()))), pickle.HIGHEST_PROTOCOL)
                body = msgspec.msgpack.encode(Tallied(len(kept), list(kept) if start else None, found,
                                                      reading.regraded, reading.torn_bytes))
                held = kept if start else held
        except Exception:  # noqa: BLE001 - whatever it was, the command's own reading meets it again
            body = b""
        write_frame(sink, body)
    if held is not None and read_frame(source) == ASK:
        write_frame(sink, _reply(held.values(), 0, 0))

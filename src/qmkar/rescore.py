"""`qmkar rescore`: grade every stored answer again with its task's current rules (asks no model).

The transcript is read line by line in file order (a Pass; written a batch of lines at a
time) into its new version, which replaces the output only when complete
(outputs.replacing). Run, template and item lines are copied as they are. Each answer is
graded again: a line whose parsed answer and score come out as it holds them (written as a
record writes them) is copied as it is, any other is written with the new ones, and a record
of schema 1 in today's shape (its item on a line of its own). Items are kept in memory only
a few at a time: one read again from the file when a later answer needs it; their pairs are
decoded only for an answer whose grade reads them (Items). A large
transcript is split at a line (halves.py): a worker process rescores the second part
(`serve`, a WorkerPass) while this one reads the first, and the output is what one pass
writes, byte for byte. A command's progress (readprogress.ReadProgress) counts the bytes
read here, and the worker's part whole when it is done.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec
from pydantic import ValidationError

from qmkar import halves
from qmkar.errors import OutputError, TranscriptError, UsageError
from qmkar.offload import read_frame, write_frame
from qmkar.outputs import probe, reason, replacing
from qmkar.parse import ParsedAnswer
from qmkar.readprogress import ReadProgress, Told
from qmkar.records import SCHEMA_VERSION, ItemLine, Record, RunHeader, TemplateLine, item_of_line
from qmkar.score import Score
from qmkar.shapes import NULL, context_rows, decode_parsed, decode_regraded, decode_slim_item
from qmkar.tasks import family
from qmkar.tasks.base import Item, TaskParams
from qmkar.tasks.datasets import trusted_item
from qmkar.tasks.family import Graded
from qmkar.transcript import bad_line, item_offsets, kind_of, newer_error
from qmkar.writer import lock

KEPT_ITEMS = 512  # items held at a time; an answer to another reads its line again from the file
PLAIN_MODELS = (ParsedAnswer, Score)  # see _fields
WRITE_BATCH = 1 << 18  # bytes of lines gathered before each write

decode_json = msgspec.json.Decoder().decode
encode_into = msgspec.json.Encoder().encode_into


class Rescored(NamedTuple):
    records: int
    changed: int


class Held:
    """An item line as rescore holds it, and the items built from it: `light` (its pairs
    counted from their text, not decoded: Item.pairs None, dropped_size their number) where the
    line allows, `whole` once something asks for the pairs."""

    __slots__ = ("line", "light", "whole")

    def __init__(self, line: bytes, light: Item | None, whole: Item | None) -> None:
        self.line, self.light, self.whole = line, light, whole


class Items:
    """The items of a transcript by id: where each item line starts, and the last few used.

    An answer is graded from its item's light form when its task's parse and score do not read
    the pairs (TaskFamily.parse_reads_context, score_reads_context: a recall answer without
    false positives); its pairs are decoded only for the rest. Decoding 50 pairs cost a rescore
    more than grading the answer."""

    def __init__(self, path: Path, unscanned: int = 0) -> None:
        self.path = path
        self.handle = path.open("rb")
        self.offsets: dict[str, int] = {}
        self.kept: OrderedDict[str, Held] = OrderedDict()
        self.params: dict[tuple[str, bytes], TaskParams] = {}
        self.unscanned = unscanned  # a worker's: bytes before its part, looked through when needed

    def add(self, line: bytes, offset: int) -> str:
        item_id, held = self._read(line)
        self.offsets[item_id] = offset
        self._keep(item_id, held)
        return item_id

    def held(self, item_id: str) -> Held | None:
        """The item `item_id` as held, read again from the file when it is no longer kept."""
        if item_id in self.kept:
            self.kept.move_to_end(item_id)
            return self.kept[item_id]
        offset = self.offsets.get(item_id)
        if offset is None and self.unscanned:
            self._scan()
            offset = self.offsets.get(item_id)
        if offset is None:
            return None
        self.handle.seek(offset)
        item_id, held = self._read(self.handle.readline())
        self._keep(item_id, held)
        return held

    def get(self, item_id: str) -> Item | None:
        """The whole item (what Record's validation looks an answer's item up with)."""
        held = self.held(item_id)
        return None if held is None else self.whole(held)

    def whole(self, held: Held) -> Item:
        if held.whole is None:
            held.whole = self.decode(held.line)
        return held.whole

    def _read(self, line: bytes) -> tuple[str, Held]:
        light = self._light(line)
        if light is not None:
            return light.id, Held(line, light, None)
        whole = self.decode(line)
        return whole.id, Held(line, None, whole)

    def _light(self, line: bytes) -> Item | None:
        """The item of a line whose pairs are written as qmkar writes them (shapes.context_rows),
        its params checked as decode checks them; None for any other line (decode reads it)."""
        try:
            shape = decode_slim_item(line).item
            pairs, size = context_rows(shape.pairs, 2)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
        if pairs is None or bytes(shape.values) != NULL:
            return None
        try:
            return trusted_item(shape, self.params, dropped_size=size)
        except ValueError:  # an unknown task or bad params: decode says which
            return None

    def _keep(self, item_id: str, held: Held) -> None:
        self.kept[item_id] = held
        if len(self.kept) > KEPT_ITEMS:
            self.kept.popitem(last=False)

    def _scan(self) -> None:
        """Where the item lines before a worker's part start (transcript.item_offsets; an item
        met in the part, later in the file, keeps its own offset)."""
        self.offsets = item_offsets(self.path, self.unscanned) | self.offsets
        self.unscanned = 0

    def decode(self, line: bytes) -> Item:
        """The whole item of an item line (records.item_of_line), its params checked once per
        distinct params."""
        return item_of_line(line, self.params)

    def close(self) -> None:
        self.handle.close()


def _check_output(source: Path, output: Path, force: bool) -> None:
    if not source.is_file():
        raise UsageError(f"{source} does not exist")
    if probe(output) == "folder":
        raise OutputError(f"cannot write {output}: it is a folder; give a file name")
    if probe(output) == "file" and not force:
        same = output.resolve() == source.resolve()
        raise UsageError(
            f"{output} exists" + (" and is the transcript being rescored" if same else "")
            + "; choose another --output or pass --force to overwrite it"
        )


def rescore(source: Path, output: Path, force: bool = False,
            progress: ReadProgress | None = None) -> Rescored:
    """Grade every stored answer of `source` again into `output`, telling `progress` the
    source's size, then the bytes read.

    Refuses to overwrite `output` (even when it is `source`) unless `force`, and an output a
    running qmkar is appending to."""
    _check_output(source, output, force)
    held = None
    if probe(output) == "file":
        held = os.open(output, os.O_RDONLY)
    try:
        if held is not None:
            lock(held, output)
        items = Items(source)
        try:
            with replacing(output) as out:
                return _rescore(source, items, out, output.parent, progress)
        finally:
            items.close()
    finally:
        if held is not None:
            os.close(held)


def _rescore(source: Path, items: Items, out: IO[bytes], folder: Path,
             progress: ReadProgress | None) -> Rescored:
    reading = Pass(source, items, out, progress=progress)
    second = halves.second_part(source, folder)
    if progress is not None:
        progress.start(source.stat().st_size if second is None else second.size)
    if second is None:
        reading.feed(_lines(source))
    else:
        try:
            reading.feed(_lines(source, stop=second.start))
            done = second.result()
            if done is None:  # the worker left the rest to this pass
                reading.feed(_lines(source, start=second.start))
            else:
                reading.flush()
                second.append_to(out)
                if progress is not None:
                    progress.advance(second.size - second.start)
                reading.records += done[0]
                reading.changed += done[1]
        finally:
            second.close()
    reading.flush()
    return Rescored(reading.records, reading.changed)


class Pass:
    """Rescoring in file order: what has been counted, the items met, the lines waiting to be
    written, and where in the file the next line starts. `feed` takes lines in order; a second
    call goes on with the lines that follow. `progress` is told the bytes read."""

    def __init__(self, source: Path, items: Items, out: IO[bytes], offset: int = 0,
                 progress: ReadProgress | None = None) -> None:
        self.source, self.items, self.out, self.progress = source, items, out, progress
        self.records = self.changed = 0
        self.written: set[str] = set()  # ids of the items written (a schema-1 record adds its own)
        self.number = 0  # lines read (an error names the line by it)
        self.offset = offset
        self.good = 0  # lines read without error: a torn last line after one is left out
        self.pending = bytearray()  # lines written a batch at a time: one write per line cost more

    def feed(self, lines: Iterable[bytes]) -> None:
        source, items, out, pending, written = self.source, self.items, self.out, self.pending, self.written
        records, changed, number, good = self.records, self.changed, self.number, self.good
        offset = self.offset
        told = Told(self.progress, offset)
        mark = told.mark
        try:
            for line in lines:
                number += 1
                if len(pending) >= WRITE_BATCH:
                    out.write(pending)
                    pending.clear()
                start, offset = offset, offset + len(line)
                if offset >= mark:
                    mark = told.tell(offset)
                if not line or line.isspace():
                    continue
                name = kind_of(line)
                try:
                    if name == b"answer" and (fresh := _answer(line, items, pending)) is not None:
                        records += 1
                        changed += fresh
                    elif name == b"item":
                        written.add(items.add(line, start))
                        _copy(line, pending)
                    elif name == b"template":
                        TemplateLine.model_validate_json(line)
                        _copy(line, pending)
                    elif name == b"run":
                        header = RunHeader.model_validate_json(line)
                        if header.schema_version > SCHEMA_VERSION:
                            raise newer_error(source, number, header.schema_version)
                        _copy(line, pending)
                    else:
                        whole, different = self.whole_answer(line, number)
                        pending += whole
                        records += 1
                        changed += different
                except ValidationError as exc:
                    if not line.endswith(b"\n") and good:
                        break  # a torn last line: left out, as readers skip it
                    raise bad_line(source, number, line, exc.errors()[0]["msg"]) from None
                good += 1
        finally:
            self.records, self.changed, self.number, self.offset, self.good = (
                records, changed, number, offset, good)
            told.tell(offset)

    def whole_answer(self, line: bytes, number: int) -> tuple[bytes, bool]:
        return _whole_answer(line, number, self.source, self.items, self.written)

    def flush(self) -> None:
        self.out.write(self.pending)
        self.pending.clear()


class Fallback(Exception):
    """A line a worker cannot rescore as the whole pass would."""


class WorkerPass(Pass):
    """A worker's pass over the second part: a line for the whole record (schema 1, an answer
    whose item is unknown, a line of no kind) needs the whole pass's `written`, and ends the
    worker's (Fallback), as does any error. Its line numbers count from its part's start: its
    errors are never shown."""

    def whole_answer(self, line: bytes, number: int) -> tuple[bytes, bool]:
        if not line.endswith(b"\n"):  # the last line, torn perhaps: left out as the whole pass would
            Record.model_validate_json(line, context={"items": self.items})
        raise Fallback


def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """The worker's side of halves.py: rescore from the line at `start` to the end into the
    file `part`, and send back the counts; None, when it met anything it cannot rescore as the
    whole pass would (WorkerPass, or any error), leaves the part to the caller."""
    job = read_frame(source)
    if job is None:
        return
    path, start, part = pickle.loads(job)
    finished = threading.Event()
    threading.Thread(target=_end_with_caller, args=(source, part, finished), daemon=True).start()
    try:
        done: tuple[int, int] | None = _second_part(path, start, part)
    except Exception:  # the caller reads the part itself, and says what is wrong with it
        done = None
    finished.set()
    write_frame(sink, pickle.dumps(done))


def _second_part(source: Path, start: int, part: Path) -> tuple[int, int]:
    items = Items(source, unscanned=start)
    try:
        with part.open("r+b") as out:  # not created again if the caller has removed it
            reading = WorkerPass(source, items, out, start)
            reading.feed(_lines(source, start))
            reading.flush()
    finally:
        items.close()
    return reading.records, reading.changed


def _end_with_caller(source: IO[bytes], part: Path, finished: threading.Event) -> None:
    """The caller closing the worker's stdin, or dying, before the part is done ends the
    worker, and removes the part. Read from the descriptor: a thread blocked in the buffered
    stream would hold its lock, and the worker's exit would wait for it."""
    while os.read(source.fileno(), 1 << 16):
        pass
    if not finished.is_set():
        part.unlink(missing_ok=True)
        os._exit(0)


def _copy(line: bytes, pending: bytearray) -> None:
    pending += line
    if not line.endswith(b"\n"):
        pending += b"\n"


def _lines(source: Path, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
    """The source's lines from byte `start` (a line's start) to `stop` (another's, or the end);
    a read error is the source's, not the output's."""
    try:
        with source.open("rb") as handle:
            handle.seek(start)
            if stop is None:
                yield from handle
                return
            left = stop - start
            for line in handle:
                yield line
                left -= len(line)
                if left <= 0:
                    return
    except OSError as exc:
        raise TranscriptError(f"cannot read {source}: {reason(exc)}") from None


def _answer(line: bytes, items: Items, pending: bytearray) -> bool | None:
    """A schema-2 answer graded again, added to `pending` as a line, and whether its grade
    changed; None (nothing added) when it needs the whole record's checks."""
    try:
        typed = decode_regraded(line)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    held = items.held(typed.item_id)
    if held is None or typed.schema_version != SCHEMA_VERSION:
        return None
    before = bytes(typed.parsed)
    if typed.answer is None or bytes(typed.error) != NULL:
        if before != NULL and not _parsed_fits(before):
            return None
        _copy(line, pending)
        return False
    graded = _grade(held, items, typed.answer)
    if (bytes(typed.score) == graded.score.__pydantic_serializer__.to_json(graded.score)
            and before == graded.parsed.__pydantic_serializer__.to_json(graded.parsed)):
        # The same grade, written as a record writes it: the line as it is. Decoding the whole
        # line and encoding it again took about a fifth of a rescore that changed nothing.
        _copy(line, pending)
        return False
    if not _parsed_fits(before):
        return None
    parsed, score = _fields(graded.parsed), _fields(graded.score)
    data: dict[str, Any] = decode_json(line)  # valid JSON: decode_regraded read it
    different = data.get("parsed") != parsed or data.get("score") != score
    data["parsed"], data["score"] = parsed, score
    encode_into(data, pending, -1)
    pending += b"\n"
    return different


def _parsed_fits(text: bytes) -> bool:
    """Whether an answer line's parsed answer, read as JSON text (RegradedShape), is what
    AnswerShape takes: a line whose parsed answer is not goes through the whole record's
    checks, as one that does not fit AnswerShape does. A parsed answer written as the new
    grade writes it needs no check."""
    try:
        decode_parsed(text)
    except msgspec.ValidationError:
        return False
    return True


def _grade(held: Held, items: Items, text: str) -> Graded:
    """family.grade of the answer, from the item's light form where parse and score do not read
    its pairs (tests/test_rescore.py holds the two grades equal)."""
    light = held.light
    chosen = family((light or items.whole(held)).task)
    if light is None or chosen.parse_reads_context:
        return chosen.grade(items.whole(held), text)
    parsed = chosen.parse(light, text)
    scored = items.whole(held) if chosen.score_reads_context(light, parsed) else light
    return Graded(parsed, chosen.score(scored, parsed))


def _fields(model: ParsedAnswer | Score) -> dict[str, Any]:
    """model_dump(mode="json") of a parsed answer or score. Their fields hold only JSON's own
    types (bool, int, str, None, lists and dicts of them), so for the classes themselves that
    is a copy of the fields as validated (tests/test_rescore.py holds the two equal)."""
    if type(model) in PLAIN_MODELS:
        return dict(model.__dict__)
    return model.model_dump(mode="json")


def _whole_answer(line: bytes, number: int, source: Path, items: Items,
                  written: set[str]) -> tuple[bytes, bool]:
    """Any other answer line (schema 1 among them), through the whole Record."""
    record = Record.model_validate_json(line, context={"items": items})
    if record.schema_version > SCHEMA_VERSION:
        raise newer_error(source, number, record.schema_version)
    before = (record.parsed, record.score)
    if record.answer is not None and record.error is None:
        graded = family(record.item.task).grade(record.item, record.answer)
        record.parsed, record.score = graded.parsed, graded.score
    lines = []
    if record.item_id not in written:
        lines.append(ItemLine(item=record.item).model_dump_json())
        written.add(record.item_id)
    lines.append(record.model_dump_json())
    return ("\n".join(lines) + "\n").encode(), before != (record.parsed, record.score)

"""Generated questions made ahead, in a worker process, while the run sends.

Generating a question (its pairs drawn, its id hashed) costs about a quarter of the CPU
the SDK spends sending it (docs/performance.md), and in the run's own process that work
sits on the event loop, in front of every request. `ahead(spec, n, seed)` yields exactly
what `tasks.generate(spec, n, seed)` yields, in the same order, while a worker process
(`python -m qmkar.worker`) generates them CHUNK at a time, at most WINDOW chunks ahead of
the run, so memory stays bounded. A run's models read the same questions and share one
worker (`Sharing`, given by the run): each model's reading asks it for the chunks that
reading will need and also takes those made for a model ahead of it, kept for the slower
readings up to KEEP chunks. With each item it makes the item's transcript line and
its prompt's fields (records.make_ahead), which the run would otherwise write on its main
thread; told the run's template (records.Prompting), the prompt itself, and its tokens
counted for --max-cost, which takes about as much CPU as the SDK's sending. It sends that
text alone, and the run builds each item from its line (records.item_of_line): that costs
the run what unpickling the item cost it, and spares the worker pickling it. A chunk the
worker has not sent back when the run needs it is generated here instead: the run does not
wait for the worker, but for a run that counts prompts (--max-cost), which waits up to
WAIT seconds for each chunk so that it never loads a tokenizer's tables itself; once a
chunk has not come within WAIT (a worker alive but stuck), it waits no more. When the
worker cannot start, fails, dies or its frames arrive damaged, the rest is simply
generated here. `outlines` names a plan's questions for a resume, the worker making the
second half while the run makes the first. Fewer than AHEAD_MIN questions of one spec (a
plan sized in tokens has one spec per size, each with a worker of its own), and machines
with one CPU, generate here from the start: a worker would cost more than it saves.

The worker is offload.py's (`python -m qmkar.worker qmkar.ahead`): Ctrl-C in the terminal
reaches the run alone (runner.Stopping handles it), and the worker ends when the run
closes its stdin or dies.
"""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any

from qmkar import offload
from qmkar.offload import FRAME, read_frame, write_frame
from qmkar.readprogress import ReadProgress
from qmkar.records import Prompting, item_of_line, make_ahead
from qmkar.tasks import TaskSpec, generate
from qmkar.tasks.base import Item, Outline, TaskParams, keep_made_ahead, outline_of

CHUNK = 32  # questions a worker request asks for
WINDOW = 8  # chunks asked of the worker ahead of the one the run is reading
KEEP = 4 * WINDOW  # chunks kept for a run's slower readings of the same questions (Sharing)
AHEAD_MIN = 256  # fewer questions are generated in the run's own process
# Seconds a run that waits for the worker's chunks (--max-cost) waits for one, and after one
# chunk that did not come, for none (Ctrl-C waits too).
WAIT = 10.0
POLL = 0.05  # seconds between looks at whether a waited-for worker came up or failed
REQUEST = struct.Struct("<qq")  # start, stop of a chunk (-1, -1: the first frame, the job)


def ahead(spec: TaskSpec, n: int, seed: int, prompting: Prompting | None = None,
          chunks: Sequence[int] | None = None, sharing: SharedReading | None = None) -> Iterator[Item]:
    """tasks.generate(spec, n, seed), its items made ahead by a worker process where that helps
    (with `prompting`, their prompts too: records.make_ahead). `chunks`: only the items of
    these chunks, in order (CHUNK items from each index given). With `sharing` (one model's
    share of its run's workers), the run's other models share one worker with this one."""
    chunks = range(0, n, CHUNK) if chunks is None else chunks
    if sum(min(CHUNK, n - first) for first in chunks) < AHEAD_MIN or offload.cpus() < 2:
        yield from generate_chunks(spec, n, seed, chunks)
        return
    if sharing is not None:
        yield from sharing.read(spec, n, seed, prompting, chunks)
        return
    maker = Ahead(spec, n, seed, prompting=prompting)
    try:
        yield from maker.read(chunks)
    finally:
        maker.close()


class Sharing:
    """The question workers of one run, one for each plan's questions and prompt, which every
    model of the run reads: a worker a model would make the same questions once for each.
    A model's reading asks the shared worker for the chunks it will need (at most WINDOW
    ahead of it), and takes what the worker sent, for itself or for a model ahead of it.
    Models that read at different paces share it as long as the chunks kept for the slower
    ones number fewer than KEEP; past that, a slower model asks for its chunks again. A
    worker stops once every model still asking has read its questions (a plan sized in
    tokens is read one spec after another) and none is reading them; a model done asking
    (`leave`: it finished, stopped, or had nothing to ask) is not waited for. `close` stops
    the rest (the run calls it when its models are done)."""

    def __init__(self, models: Iterable[str]) -> None:
        self.models = set(models)  # the models still asking
        self.makers: list[_Shared] = []

    def of(self, model: str) -> SharedReading:
        """What `ahead` reads through for one model."""
        return SharedReading(self, model)

    def read(self, model: str, spec: TaskSpec, n: int, seed: int, prompting: Prompting | None,
             chunks: Sequence[int]) -> Iterator[Item]:
        """The items of these chunks for `model`, from the worker making these questions with
        this prompting (started by the first model to read them)."""
        shared = next((made for made in self.makers if made.key == (spec, n, seed, prompting)), None)
        if shared is None:
            maker = Ahead(spec, n, seed, prompting=prompting)
            shared = _Shared((spec, n, seed, prompting), maker)
            self.makers.append(shared)
        shared.reading.add(model)
        try:
            yield from shared.maker.read(chunks)
        finally:
            shared.reading.discard(model)
            shared.done.add(model)
            self._stop_read()

    def leave(self, model: str) -> None:
        """`model` asks nothing more: no worker is kept for it."""
        self.models.discard(model)
        self._stop_read()

    def _stop_read(self) -> None:
        """Stop the workers that every model still asking has read, and none is reading."""
        for shared in [made for made in self.makers if not made.reading and self.models <= made.done]:
            self.makers.remove(shared)
            shared.maker.close()

    def close(self) -> None:
        for shared in self.makers:
            shared.maker.close()
        self.makers.clear()


@dataclasses.dataclass(frozen=True)
class SharedReading:
    """One model's way to a run's shared question workers (Sharing.of)."""

    sharing: Sharing
    model: str

    def read(self, spec: TaskSpec, n: int, seed: int, prompting: Prompting | None,
             chunks: Sequence[int]) -> Iterator[Item]:
        return self.sharing.read(self.model, spec, n, seed, prompting, chunks)


@dataclasses.dataclass(eq=False)
class _Shared:
    """One worker of a Sharing: what it makes, which models are reading it and which have."""

    key: tuple[TaskSpec, int, int, Prompting | None]
    maker: Ahead
    reading: set[str] = dataclasses.field(default_factory=set)
    done: set[str] = dataclasses.field(default_factory=set)


def generate_chunks(spec: TaskSpec, n: int, seed: int, chunks: Iterable[int]) -> Iterator[Item]:
    """The items of these chunks of tasks.generate(spec, n, seed), made here."""
    for first in chunks:
        yield from generate(spec, min(first + CHUNK, n), seed, first)


# The share of a plan's outlines the worker makes (the last ones) while the run makes the rest.
OUTLINE_SHARE = 0.5


def outlines(spec: TaskSpec, n: int, seed: int, progress: ReadProgress | None = None) -> list[Outline]:
    """The outline of each of tasks.generate(spec, n, seed)'s items, in order: what a resume
    needs to find which questions a transcript answers. They are generated whole (an id is a
    hash of the content); a worker makes the last OUTLINE_SHARE of them while this process
    makes the first part, so both CPUs generate and neither makes what the other did.
    `progress` is told n, then the questions named as they are (every `step` of them)."""
    if n < AHEAD_MIN or offload.cpus() < 2:
        return sharing_params(map(outline_of, generate(spec, n, seed)), n, progress)
    cut = n - int(n * OUTLINE_SHARE)
    maker = Ahead(spec, n, seed, start=cut, outline=True)
    try:
        return sharing_params(itertools.chain(map(outline_of, generate(spec, cut, seed)), maker.outlines()),
                               n, progress, maker.waiting)
    finally:
        maker.close()


def sharing_params(found: Iterable[Outline], n: int, progress: ReadProgress | None,
                    waiting: Callable[[], int] = lambda: 0) -> list[Outline]:
    """The outlines, equal params made one object as they come (so many questions cost about
    150 bytes each, not a params model each). `progress` is told n, then every `step`
    questions how many of them are named: those here and those the worker sent that wait to
    be read (`waiting`), so a bar moves at the pace of both processes."""
    if progress is not None:
        progress.start(n)
    kept: list[Outline] = []
    params: TaskParams | None = None
    told, mark = 0, progress.step if progress is not None else sys.maxsize
    for question in found:
        if params is None or question.params != params:
            params = question.params
        kept.append(question._replace(params=params))
        if len(kept) >= mark:
            assert progress is not None
            mark = len(kept) + progress.step
            # A chunk made here may still wait among the worker's for a moment: never past the total.
            named = min(n, len(kept) + waiting())
            if named > told:
                progress.advance(named - told)
                told = named
    if progress is not None and len(kept) > told:
        progress.advance(len(kept) - told)
    return kept


class Ahead:
    """One plan's items or outlines, chunk by chunk: the worker's when it has sent them, else
    made here. Items are read by `read(chunks)`, as often as there are readings (one; or, in
    a Sharing, one per model): each chunk the worker sends is kept until every reading that
    will take it has passed it, or, beyond KEEP kept chunks, only for the one ahead. A maker
    of outlines (`outline=True`) makes those of items start..n-1 for its one reading,
    `outlines()`."""

    def __init__(self, spec: TaskSpec, n: int, seed: int, start: int = 0, outline: bool = False,
                 prompting: Prompting | None = None) -> None:
        self.spec, self.n, self.seed = spec, n, seed
        self.outline = outline
        # Outlines are small: the worker is asked for all of them (items start..n-1, CHUNK at a
        # time) as soon as it is up. Items are asked WINDOW chunks ahead of each reading, so
        # memory stays bounded.
        self.chunks = range(start, n, CHUNK)
        self.window = len(self.chunks) if outline else WINDOW
        self.asked: set[int] = set()  # chunks (by first index) asked of the worker and not dropped
        self.pending: set[int] = set()  # chunks asked and not sent back yet
        self.ready: dict[int, memoryview] = {}  # chunk -> what the worker sent for it, pickled
        self.needed: dict[int, int] = {}  # chunk -> readings that have not passed it yet
        self.up = False  # the worker said hello: asking it is worth it
        self.failed = False
        self.from_worker = 0  # chunks the worker made (the rest were made here)
        self.params: dict[tuple[str, bytes], TaskParams] = {}  # the worker's items' params, checked once
        # A --max-cost run waits for the worker's chunks, which come with their prompts' tokens
        # counted: counting here would load the tokenizer's tables (about 80 MB) into the run.
        self.wait = prompting is not None and bool(prompting.counters)
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)  # told when a chunk comes
        if outline:  # its one reading, counted before the worker sends what it was asked
            self._need(self.chunks)
        self.process: subprocess.Popen[bytes] | None = None
        self.reader: threading.Thread | None = None
        self.process = offload.start("qmkar.ahead", pickle.dumps((spec, seed, outline, prompting)))
        if self.process is None:  # no worker: every chunk is made here
            self.failed = True
            return
        self.reader = threading.Thread(target=self._read, name="qmkar-ahead", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        """The reader thread: the worker's frames, kept by chunk until the run takes them."""
        assert self.process is not None and self.process.stdout is not None
        stream = self.process.stdout
        if not offload.greeted(stream):
            self.failed = True  # it did not start, or runs another copy of qmkar
            return
        self.up = True
        if self.outline:
            self._ask(self.chunks)
        while (body := read_frame(stream)) is not None:
            start = FRAME.unpack(body[:FRAME.size])[0]
            with self.lock:
                if start not in self.pending:  # not a chunk it was asked for: trust none of what it sends
                    break
                self.pending.discard(start)
                if self.needed.get(start, 0) > 0:  # else every reading made it meanwhile
                    self.ready[start] = memoryview(body)[FRAME.size:]  # not a copy
                else:
                    self.asked.discard(start)
                self.arrived.notify_all()
        self.failed = True  # the worker ended before the run closed it

    def _ask(self, chunks: Iterable[int]) -> None:
        """Ask the worker for these chunks, but those it was asked already (it is asked
        nothing until it is up)."""
        if not self.up or self.failed or self.process is None or self.process.stdin is None:
            return
        requests = b""
        with self.lock:
            for start in chunks:
                if start not in self.asked:
                    requests += REQUEST.pack(start, min(start + CHUNK, self.n))
                    self.asked.add(start)
                    self.pending.add(start)
        if requests:
            try:
                self.process.stdin.write(requests)
                self.process.stdin.flush()
            except (OSError, ValueError):
                self.failed = True

    def waiting(self) -> int:
        """How many questions the worker has sent that the run has not read yet."""
        with self.lock:
            return sum(min(CHUNK, self.n - start) for start in self.ready)

    def read(self, chunks: Sequence[int]) -> Iterator[Item]:
        """The items of these chunks (first indexes, in order) for one reading: the worker's,
        else made here. The reading is counted now, before the first item is asked for."""
        assert not self.outline
        self._need(chunks)
        return self._items(chunks)

    def _items(self, chunks: Sequence[int]) -> Iterator[Item]:
        for start, body in self._chunks(chunks):
            if body is None:
                yield from generate_chunks(self.spec, self.n, self.seed, [start])
                continue
            for made in pickle.loads(body):
                item = item_of_line(made.line, self.params)
                keep_made_ahead(item, made)
                yield item

    def outlines(self) -> Iterator[Outline]:
        """The items' outlines (with outline=True): the worker's, else made here."""
        for start, body in self._chunks(self.chunks):
            if body is not None:
                yield from pickle.loads(body)
            else:
                yield from map(outline_of, generate_chunks(self.spec, self.n, self.seed, [start]))

    def _chunks(self, chunks: Sequence[int]) -> Iterator[tuple[int, memoryview | None]]:
        """Each chunk's first index and what the worker sent for it (None: to be made here).
        The worker is asked for the next WINDOW chunks of this reading (and, when it is waited
        for, this one), never for one this reading has passed. A chunk passed here is kept for
        the readings that still need it, while fewer than KEEP are kept."""
        passed = 0
        try:
            for position, start in enumerate(chunks):
                if self.wait:
                    self._wait_for(chunks, position)
                self._ask(chunks[position + 1:position + 1 + self.window])
                with self.lock:
                    body = self.ready.get(start)
                    self._pass(start)
                    passed += 1
                if body is not None:
                    self.from_worker += 1
                yield start, body
        finally:  # a reading that stops early needs none of the rest
            with self.lock:
                for start in chunks[passed:]:
                    self._pass(start)

    def _need(self, chunks: Iterable[int]) -> None:
        """One more reading will take these chunks."""
        with self.lock:
            for start in chunks:
                self.needed[start] = self.needed.get(start, 0) + 1

    def _pass(self, start: int) -> None:
        """One reading is past this chunk: it is dropped once none needs it, or when KEEP
        chunks are kept already (a reading behind asks for it again). Holding the lock."""
        left = self.needed.pop(start, 0) - 1
        if left > 0:
            self.needed[start] = left
        if start in self.ready and (left <= 0 or len(self.ready) > KEEP):
            del self.ready[start]
            self.asked.discard(start)

    def _wait_for(self, chunks: Sequence[int], position: int) -> None:
        """Wait until the worker has sent chunk chunks[position], asking it first; give up (the
        chunk is then made here) when the worker fails or has not sent it within WAIT seconds. A
        worker that let WAIT pass is waited for no more: alive but stuck, it would cost WAIT a
        chunk. Its chunks are still taken when they are there; the others are made here."""
        start = chunks[position]
        deadline = time.monotonic() + WAIT
        while not self.failed and (left := deadline - time.monotonic()) > 0:
            self._ask(chunks[position:position + 1 + self.window])  # nothing until the worker is up
            with self.arrived:
                if start in self.ready:
                    return
                # Woken by the chunk; a worker coming up or failing is seen within POLL.
                self.arrived.wait(min(POLL, left))
        self.wait = False

    def close(self) -> None:
        """Stop the worker (offload.stop) and forget what it made."""
        self.failed = True
        process, self.process = self.process, None
        if process is None:
            return
        offload.stop(process)
        if self.reader is not None:
            self.reader.join(timeout=1)
        if process.stdout is not None:
            process.stdout.close()


def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """The worker's side (after offload.serve's hello): read the job, then answer each request
    with the chunk's items until the run closes the stream."""
    job = read_frame(source)
    if job is None:
        return
    spec, seed, outline, prompting = pickle.loads(job)
    while len(request := source.read(REQUEST.size)) == REQUEST.size:
        start, stop = REQUEST.unpack(request)
        items = generate(spec, stop, seed, start)
        made: list[Any] = ([outline_of(item) for item in items] if outline
                           else [make_ahead(item, prompting) for item in items])
        write_frame(sink, FRAME.pack(start), pickle.dumps(made, protocol=pickle.HIGHEST_PROTOCOL))

"""A run: a plan of questions asked of one or more models, every answer written as it arrives.

`Run` owns what happens between the CLI's options and the transcript: resume (the
questions a transcript already answered are skipped; a transcript another run wrote
between reading and locking it is read again), one concurrent loop per model
(asking.run_model), progress callbacks, and stopping: on Ctrl-C or SIGTERM it stops
sending, gives questions in flight a grace period to finish and be written, then
reports the run as interrupted. Items are streamed, never all held in memory; the send
loops read generated ones made ahead by a worker process (ahead.py). What a run asks and
how it sends are plans.py's; one request's retries and pacing are retry.py's and limits.py's.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import uuid
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from qmkar import __version__, ahead
from qmkar.ahead import CHUNK
from qmkar.asking import Conditions, RunStats, Sending, run_model, too_many_tokens
from qmkar.ceiling import Paid
from qmkar.condition import Condition, differences
from qmkar.errors import TranscriptError, UsageError
from qmkar.plans import DatasetPlan, GeneratedPlan, Plan, SendOptions, concurrency_for
from qmkar.providers.base import ModelRequest, Provider
from qmkar.readprogress import ReadProgress, begin, file_size
from qmkar.records import Prompting
from qmkar.render import Template, render
from qmkar.score import Score
from qmkar.slim import SlimReading, SlimRecord, slim_item, slim_of
from qmkar.tally import Tallies, Tally
from qmkar.tasks.base import Item, Outline, outline_of
from qmkar.transcript import Record, RunHeader, TranscriptWriter
from qmkar.writer import Changed

# New objects between two young collections while a run sends (Run.execute): enough for
# the items of many questions in flight, few enough that garbage in cycles goes soon.
YOUNG_OBJECTS = 20_000

__all__ = ["Answered", "DatasetPlan", "GeneratedPlan", "Plan", "Progress", "Run", "RunResult", "SendOptions"]


class Progress(Protocol):
    """What the runner tells whoever shows progress (the CLI's bars, a test's list)."""

    def start(self, model: str, total: int, done: int) -> None: ...

    def advance(self, model: str, failed: bool = False) -> None: ...


class Answered:
    """What a transcript needs no more of: each (question, condition, sample) answered, or
    failed in a way asking again cannot fix. Records from before conditions were recorded
    count for a condition they match in every field they know. Only keys are kept, and
    records are read in file order: the last record of a key decides."""

    def __init__(self, records: Iterable[Record | SlimRecord] = ()) -> None:
        self.keys: set[tuple[str, str, int]] = set()
        self.legacy: dict[tuple[str, int], list[Condition]] = {}
        for record in records:
            self.note(record)

    def note(self, record: Record | SlimRecord) -> None:
        """Take the latest record of its key into account."""
        if record.done:
            self.add(record)
            return
        self.keys.discard(record.key)
        old = self.legacy.get((record.item_id, record.sample), [])
        if record.condition.inferred and record.condition in old:
            old.remove(record.condition)

    def add(self, record: Record | SlimRecord) -> None:
        self.keys.add(record.key)
        if record.condition.inferred:
            self.legacy.setdefault((record.item_id, record.sample), []).append(record.condition)

    def has(self, item_id: str, condition: Condition, sample: int) -> bool:
        if (item_id, condition.key(), sample) in self.keys:
            return True
        return any(old.matches(condition) for old in self.legacy.get((item_id, sample), ()))


@dataclass
class RunResult:
    """What a run did."""

    path: Path
    stats: RunStats
    interrupted: bool = False  # SIGINT or SIGTERM: answers received so far are in the transcript
    signal: int | None = None  # which of them stopped it
    sendings: dict[str, Sending] = field(default_factory=dict)

    @property
    def conditions(self) -> set[str]:
        """The ids of every condition this run asked (or found answered) under."""
        return {key for keys in self.stats.conditions.values() for key in keys}


class Stopping:
    """SIGINT and SIGTERM while a run's event loop runs, handled by the loop itself.

    The first signal stops sending: the run's main task is cancelled, so each model's loop
    starts no new question, its retries make no further attempts, and questions in flight
    have GRACE_SECONDS to be answered and written. A second signal ends that grace at once:
    every task still waiting is cancelled. Either way every answer already received is in
    the transcript, because writing follows receiving with no wait in between, and no
    signal raises in the middle of the code (as Python's own SIGINT handler would)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signal: int | None = None  # the first signal received
        self.count = 0

    async def run(self, work: Coroutine[Any, Any, None]) -> None:
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        previous = {number: signal.getsignal(number) for number in self.SIGNALS}

        def received(number: int) -> None:
            self.count += 1
            if self.signal is None:
                self.signal = number
                if main is not None:
                    main.cancel()
                return
            for task in asyncio.all_tasks(loop):
                if task is not main:
                    task.cancel()

        installed = []
        try:
            for number in self.SIGNALS:
                try:
                    loop.add_signal_handler(number, received, number)
                except (ValueError, RuntimeError):  # not the main thread (a test's worker)
                    continue
                installed.append(number)
            await work
        finally:
            for number in installed:
                loop.remove_signal_handler(number)
                signal.signal(number, previous[number])


class Run:
    """A plan asked of providers into one transcript, resuming what it already answered.

    Resume matches a question, its condition and its sample: the same command again
    skips what it answered; a changed condition (another endpoint, template, setting or
    option) asks afresh and its answers are kept apart."""

    def __init__(
        self,
        plan: Plan,
        providers: list[Provider],
        path: Path,
        templates: Callable[[str], Template],
        settings: dict[str, Any],
        concurrency: int | None = None,
        sendings: dict[str, Sending] | None = None,
        *,
        samples: int = 1,
        labels: dict[str, str] | None = None,
        command: list[str] | None = None,
        reading: ReadProgress | None = None,
    ) -> None:
        self.plan, self.providers, self.path = plan, providers, path
        self.templates, self.settings, self.concurrency = templates, settings, concurrency
        self.sendings = sendings or {}
        self.samples, self.labels, self.command = samples, labels or {}, command or []
        self._already: dict[tuple[str, frozenset[str] | None], int] = {}  # already_answered's counts
        self._outline: list[Outline] | None = None  # the plan's questions without contexts (outline())
        # While the models are asked, their question workers: one for each plan's questions and
        # prompt, not one a model (ahead.Sharing).
        self._sharing: ahead.Sharing | None = None
        # This run's answers counted per (task, condition) as they arrive (tally.py), none of
        # them kept, for the summary, when the transcript held none before (else the summary
        # reads it back, earlier answers counting too, or takes what the first pass counted
        # when nothing was written: first_summary).
        self.tallies: dict[tuple[str, str], Tally] | None = None
        self.first = next(iter(plan.items()), None)
        self.ceiling = next((s.ceiling for s in self.sendings.values() if s.ceiling is not None), None)
        self._read(reading)

    def _read(self, progress: ReadProgress | None = None) -> None:
        """One pass over the transcript, keeping keys, conditions, token sums and each
        condition's answers counted (first_summary), not records; `progress` (the first
        pass's: a resume reads the whole transcript) is told the bytes."""
        begin(progress, [self.path])
        reading, self.answered, paid = SlimReading(self.path, progress=progress), Answered(), Paid()
        self.previous: dict[str, list[Condition]] = {}  # model name -> conditions it was asked under
        # What the summary may need (first_summary). Not with --samples: each question's counts,
        # kept for every condition the transcript holds, would grow with it.
        counted = Tallies(per_question=False) if self.samples == 1 else None
        for record in reading:
            self.answered.note(record)
            paid.add(record)
            if record.item.task == self.plan.task and \
                    record.condition not in self.previous.get(record.model, []):
                self.previous.setdefault(record.model, []).append(record.condition)
            if counted is not None:
                counted.add(record)
        # Records graded again at the end of the reading were counted with their old score.
        self.counted = counted if not reading.regraded else None
        self.seen = reading.size
        self.torn_bytes = reading.torn_bytes  # a line cut by an earlier crash, dropped on writing
        self.items_written, self.templates_written = set(reading.items), reading.templates
        self.tallies = {} if not self.items_written else None  # an item line precedes its first answer
        self._already.clear()
        self.paid = paid  # what earlier runs into this transcript spent: execute() counts it

    def first_summary(self, conditions: set[str], wanted: set[str]) -> list[Tally] | None:
        """The end-of-run summary's tallies as the first pass counted them, without reading the
        transcript again (a rerun of 100k answered questions read it twice, about 3 s each):
        when nothing was written to it since, and each tally of `conditions` counted only the
        latest record of each key (its records' keys all differ: an error and a later answer
        to one question are two records, one key) and only questions `wanted`. None: read it
        again (transcript.run_records), as a run with --samples always does."""
        if self.counted is None or file_size(self.path) != self.seen:
            return None
        found = [tally for tally in self.counted.values() if tally.condition_id in conditions]
        keys = {tally.condition_id: set(tally.error_keys) for tally in found}
        for key in self.answered.keys:
            if key[1] in keys:
                keys[key[1]].add(key)
        for tally in found:
            held = keys[tally.condition_id]
            if len(held) != tally.records or any(item_id not in wanted for item_id, _, _ in held):
                return None
        return found

    def outline(self, progress: ReadProgress | None = None) -> Iterable[Outline]:
        """Every question of the plan by id, task and params, its context dropped: what counting
        a model's answered questions needs. A generated plan's (unsized: one spec) is made once, by two
        processes (ahead.outlines, telling `progress` the questions named), and kept for every model
        and the send loops (_to_ask): equal params shared, about 150 bytes a question. A dataset's
        is the one its plan kept while checking the file (DatasetPlan.outlines), so nothing is read
        again (a rerun with every question answered once read the dataset for each model's count
        and each send loop, and later once more to make this). A plan sized in tokens is made again
        each time and nothing is kept."""
        plan = self.plan
        if self._outline is None and isinstance(plan, GeneratedPlan) and plan.sizing is None:
            self._outline = ahead.outlines(plan.spec, plan.n, plan.seed, progress)
        elif self._outline is None and isinstance(plan, DatasetPlan):
            self._outline = plan.outlines()
        return self._outline if self._outline is not None else map(outline_of, plan.items())

    def name_questions(self, progress: ReadProgress | None) -> None:
        """Make the outline now, telling `progress`, when this run will need it: the transcript
        holds answers (resume lines, --max-cost's spending, the send loop). A generated plan's
        takes seconds at tens of thousands of questions, so the CLI shows a bar for it before
        the run's bars; a fresh transcript needs no outline and makes none."""
        if self.answered.keys or self.answered.legacy:
            self.outline(progress)

    def condition_ids(self) -> set[str]:
        """The ids of every condition this run asks under."""
        ids: set[str] = set()
        for provider in self.providers:
            conditions = Conditions(provider, provider.settings_for(self.settings), self.templates)
            ids.update(conditions.of(question).key() for question in self.outline())
        return ids

    def condition_of(self, provider: Provider, item: Item) -> Condition:
        return Conditions(provider, provider.settings_for(self.settings), self.templates).of(item)

    def already_answered(self, provider: Provider, ids: set[str] | None = None) -> int:
        """How many of the plan's (question, sample)s the transcript holds for `provider`'s
        condition (for the resume line; from the outline, not made at all when the transcript
        holds no answers)."""
        settings = provider.settings_for(self.settings)  # refuses what the model does not take, first
        if not self.answered.keys and not self.answered.legacy:
            return 0
        memo = (provider.name, None if ids is None else frozenset(ids))
        if memo not in self._already:
            conditions = Conditions(provider, settings, self.templates)
            self._already[memo] = sum(1 for question in self.outline() if ids is None or question.id in ids
                                      for sample in range(self.samples)
                                      if self.answered.has(question.id, conditions.of(question), sample))
        return self._already[memo]

    def check_pacing(self) -> None:
        """Refuse, before anything is written, a --tpm below what the plan's first request
        needs: the limiter would wait for days (ask() refuses a later, larger one the same way)."""
        if self.first is None:
            return
        for provider in self.providers:
            sending = self.sendings.get(provider.name)
            bucket = sending.limiter.tokens if sending is not None and sending.limiter is not None else None
            if bucket is None:
                continue
            request = ModelRequest(messages=render(self.first, self.templates(self.first.task)),
                                   settings=provider.settings_for(self.settings))
            if why := too_many_tokens(request, bucket.per_minute):
                raise UsageError(f"{provider.name}: {why}")

    def changed(self, provider: Provider) -> list[str]:
        """When the transcript holds this model's answers only under other conditions: what
        differs from the newest of them ('temperature: 0 -> 1.0'); else nothing."""
        before = self.previous.get(provider.name)
        if not before or self.first is None:
            return []
        now = self.condition_of(provider, self.first)
        if any(old.matches(now) for old in before):
            return []
        return differences(before[-1], now)

    def execute(self, progress: Progress | None = None) -> RunResult:
        """Ask every model every unanswered question; on SIGINT or SIGTERM return an
        interrupted result that names the signal (see Stopping)."""
        writer = self._writer()  # may read the transcript again: then whether it held answers is known
        if self.ceiling is not None and self.paid.sums:  # what earlier runs spent counts too
            self.ceiling.count(self.paid.of(self.condition_ids()))
        stats = RunStats(item_ids=set() if self.tallies is None else None)
        result = RunResult(self.path, stats, sendings=self.sendings)
        header = RunHeader(run_id=uuid.uuid4().hex[:12], started_at=datetime.now(UTC),
                           qmkar_version=__version__, command=self.command)
        stopping = Stopping()
        # What exists now (modules, the plan, the resume index) lives as long as the run:
        # frozen, the collector stops scanning it again and again as records come and go.
        gc.freeze()
        # Each question's item holds its pairs (500 tuples at qmkar's defaults) from when the
        # run builds it until its record is written. At the interpreter's threshold of 700
        # new objects, each item set off a young collection or so, which scanned the items
        # in flight, moved them to the older generations and scanned them there again: about
        # 1,700 collections and 0.4 s in a run of 2,000 questions (docs/performance.md). At
        # YOUNG_OBJECTS the same run made 11 (0.05 s), and garbage held in cycles is still
        # collected once that many new objects have come.
        thresholds = gc.get_threshold()
        if thresholds[0]:  # 0: whoever runs this turned the collector off; leave it off
            gc.set_threshold(max(YOUNG_OBJECTS, thresholds[0]), *thresholds[1:])
        try:
            writer.header(header)
            asyncio.run(stopping.run(self._all(writer, stats, progress, header.run_id)))
        except (KeyboardInterrupt, asyncio.CancelledError):
            result.interrupted = True
            result.signal = stopping.signal or signal.SIGINT
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
            writer.close()
        return result

    def _writer(self) -> TranscriptWriter:
        """The transcript's writer, holding its lock. The transcript was read before the lock
        was taken; if another run wrote it in between (it then held the lock), it is read
        again, so what that run answered is not asked twice."""
        for _ in range(3):
            try:
                # In a fresh transcript every item gets one answer per model and sample.
                per_item = len(self.providers) * self.samples if self.tallies is not None else None
                return TranscriptWriter(self.path, self.torn_bytes, self.items_written,
                                        self.templates_written, seen=self.seen, answers_per_item=per_item)
            except Changed:
                self._read()
        raise TranscriptError(f"{self.path} keeps changing while it is read (is another program writing "
                              "it?); run the command again when it is done")

    async def _all(self, writer: TranscriptWriter, stats: RunStats, progress: Progress | None,
                   run_id: str) -> None:
        async def one_model(provider: Provider) -> None:
            if progress is not None:
                total = self.plan.count * self.samples
                progress.start(provider.name, total, self.already_answered(provider))
            try:
                await self.ask_model(provider, writer, stats, progress, run_id)
            finally:
                if self._sharing is not None:
                    self._sharing.leave(provider.name)
                await provider.aclose()

        self._sharing = ahead.Sharing(p.name for p in self.providers)
        try:
            await asyncio.gather(*(one_model(p) for p in self.providers))
        finally:
            self._sharing.close()
            self._sharing = None

    def _shared(self, provider: Provider) -> ahead.SharedReading | None:
        """The model's share of the run's question workers (None outside `execute`)."""
        return self._sharing.of(provider.name) if self._sharing is not None else None

    def _to_ask(self, provider: Provider, stats: RunStats) -> Iterable[Item]:
        """The plan's items for the send loop; a generated plan's made ahead with their prompts
        (records.Prompting: the template, and the tokenizers of the models' --max-cost
        estimates), by the worker the run's models share (ahead.Sharing).
        In a resume, the chunks of questions (ahead.CHUNK) this model has answered whole are not
        generated (or read from the dataset) again: the outline names them, they are counted as
        run_model counts a skipped question, and only the other chunks are made (a dataset, or a
        generated plan of one spec: its item i is the outline's i). A chunk with one question
        left is made whole; run_model skips the rest of it."""
        plan, outline = self.plan, self._outline
        prompting = None
        if isinstance(plan, GeneratedPlan):
            # The worker renders the prompts too, and counts their tokens for --max-cost: with
            # every model's tokenizer, so that the models share it (each reads its own count).
            ceiling = self.ceiling
            counters = tuple(sorted({name for p in self.providers for name in ceiling.tokenizers(p.name)})) \
                if ceiling is not None else ()
            prompting = Prompting(self.templates(plan.task), counters)
            if outline is None:  # kept for a generated plan of one spec, when it holds answers
                return plan.items(ahead=True, prompting=prompting, sharing=self._shared(provider))
        elif outline is None:  # kept for a dataset, when the transcript holds answers
            return plan.items(ahead=True)
        conditions = Conditions(provider, provider.settings_for(self.settings), self.templates)
        samples = range(self.samples)
        chunks: list[int] = []
        done, keys, ids = 0, set[str](), list[str]()
        for first in range(0, len(outline), CHUNK):
            part = outline[first:first + CHUNK]
            found = [conditions.of(question) for question in part]
            if all(self.answered.has(question.id, condition, sample)
                   for question, condition in zip(part, found, strict=True) for sample in samples):
                done += len(part)
                keys.update(condition.key() for condition in found)
                ids += [question.id for question in part]
            else:
                chunks.append(first)
        name = provider.name
        stats.skipped[name] = stats.skipped.get(name, 0) + done * self.samples
        stats.conditions.setdefault(name, set()).update(keys)
        if stats.item_ids is not None:
            stats.item_ids.update(ids)
        if isinstance(plan, GeneratedPlan):
            return plan.items(ahead=True, prompting=prompting, chunks=chunks, sharing=self._shared(provider))
        assert isinstance(plan, DatasetPlan)  # the plans that keep an outline
        return plan.items(chunks=chunks)

    async def ask_model(self, provider: Provider, writer: TranscriptWriter, stats: RunStats,
                        progress: Progress | None, run_id: str) -> None:
        """Ask one model the plan's unanswered questions, one request each (batch.BatchRun
        sends them as batches instead)."""
        counted = self.tallies
        scores: dict[bytes, Score] = {}
        per_question = self.samples > 1  # the clustered interval needs each question's counts

        def on_record(record: Record) -> None:
            if counted is not None:
                # Not fingerprinted: a run's own answers are counted, never paired.
                slim = slim_of(record, slim_item(record.item, contents=False), scores=scores)
                key = (slim.item.task, slim.condition_id)
                tally = counted.get(key)
                if tally is None:
                    tally = counted[key] = Tally(slim.item.task, slim, per_question)
                tally.add(slim)
            if progress is not None:
                progress.advance(provider.name, record.error is not None)

        await run_model(
            provider, self._to_ask(provider, stats), self.templates, self.settings, writer, self.answered,
            stats, concurrency_for(self.concurrency, provider), on_record=on_record,
            sending=self.sendings.get(provider.name), samples=self.samples, run_id=run_id,
            label=self.labels.get(provider.name),
        )

"""BatchRun: a run whose models are asked in batches, collected into ordinary records.

For each model, in order: a submission whose reply was lost is looked for at the provider; batches
already at the provider are checked once and collected if they ended; the questions still unanswered
(and in no live batch) are answered from the response cache or packed into batches split at the
provider's limits, each written to the state file before it is sent; then, unless --no-wait, every
live batch is polled (the wait grows to a minute; a status call is retried under the run's retry
policy, and one that still fails is tried at the next poll, for up to BATCH_STATUS_OUTAGE) and
collected as it ends. Collected answers go through asking.make_record like any other (marked
extra["batch"]); a request the batch did not answer becomes an error record, and the next run
submits only those. Ctrl-C (or SIGTERM) stops waiting and never cancels a batch.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from qmkar.asking import Conditions, RunStats, Sending, make_record, sample_settings
from qmkar.batch.state import (
    Abandoned,
    Batch,
    BatchState,
    Collected,
    Question,
    Submitted,
    Submitting,
    state_path,
)
from qmkar.condition import Condition
from qmkar.defaults import BATCH_POLL, BATCH_POLL_MAX, BATCH_STATUS_OUTAGE
from qmkar.errors import ProviderCallError
from qmkar.providers.base import BatchResult, BatchStatus, ModelRequest, ModelResponse, Provider
from qmkar.render import render
from qmkar.retry import call_error, send
from qmkar.runner import Progress, Run
from qmkar.tasks.base import Item
from qmkar.transcript import Attempt, CallError, Record, TemplateLine, TranscriptWriter

T = TypeVar("T")

# Why a request an ended batch has no line for got no answer, by the batch's status.
MISSING = {
    "expired": ("batch_expired", "the batch expired (24 h) before this request ran"),
    "cancelled": ("batch_cancelled", "the batch was cancelled before this request ran"),
    "canceled": ("batch_cancelled", "the batch was cancelled before this request ran"),
    "failed": ("batch_failed", "the provider refused the whole batch"),
}


class BatchRun(Run):
    """A Run that submits batches instead of sending one request per question.

    `wait` False (--no-wait) submits and returns; `poll` is the first wait between status
    checks; `options` say how to reach each provider again (for `qmkar batch`)."""

    def __init__(self, *args: Any, wait: bool = True, poll: float = BATCH_POLL,
                 options: dict[str, str | None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for provider in self.providers:
            if provider.batch_limits() is None:
                raise provider.no_batch_api()
        self.state = BatchState(state_path(self.path))
        self.wait, self.poll, self.options = wait, poll, options or {}
        self.notes: list[str] = []  # batches this command cannot collect, and why

    def live(self) -> list[Batch]:
        """The run's models' batches still at the provider, uncollected."""
        names = {p.name for p in self.providers}
        return [b for b in self.state.live() if b.submission.model in names]

    async def ask_model(self, provider: Provider, writer: TranscriptWriter, stats: RunStats,
                        progress: Progress | None, run_id: str) -> None:
        asking = ModelBatches(self, provider, writer, stats, progress, run_id)
        try:
            await asking.find_lost()
            await asking.collect(wait=False)
            await asking.submit_unanswered()
            if self.wait:
                await asking.collect(wait=True)
        except ProviderCallError as exc:
            why = str(exc)
            if any(b.live for b in asking.batches):
                why += (f"; its batches are kept at the provider (and in {self.state.path}): run the same "
                        "command again to collect them")
            stats.stopped[provider.name] = why


class ModelBatches:
    """One model's part of a batch run."""

    def __init__(self, run: BatchRun, provider: Provider, writer: TranscriptWriter, stats: RunStats,
                 progress: Progress | None, run_id: str) -> None:
        self.run, self.provider, self.writer, self.stats = run, provider, writer, stats
        self.progress, self.run_id = progress, run_id
        self.name = provider.name
        self.settings = provider.settings_for(run.settings)
        self.conditions = Conditions(provider, self.settings, run.templates)
        self.sending = run.sendings.get(self.name) or Sending()
        self.ceiling = self.sending.ceiling
        self.endpoint = provider.identity().endpoint
        for counts in (stats.answered, stats.errors, stats.skipped):
            counts.setdefault(self.name, 0)
        self.mine = {self.conditions.of(item).key() for item in run.plan.items()}
        stats.conditions.setdefault(self.name, set()).update(self.mine)
        self.failed_now: set[Question] = set()  # collected as errors this run: the next run resubmits
        self.batches: list[Batch] = []
        for batch in run.state.of(self.name):
            if batch.submission.endpoint != self.endpoint or batch.closed:
                continue
            if not self.mine & set(batch.submission.conditions):
                run.notes.append(f"batch {batch.batch_id or batch.id} of {self.name} holds questions of "
                                 "another condition; to collect it, run the command that submitted it: "
                                 f"{shlex.join(batch.submission.command)}")
                continue
            self.batches.append(batch)
        self.held: dict[str, float] = {}  # batch -> what the ceiling holds for it
        if self.ceiling is not None:  # batches from earlier runs are in flight too
            for batch in self.batches:
                estimate = batch.submission.estimate
                self.held[batch.id] = self.estimate_of(batch) if estimate is None else estimate
                self.ceiling.hold(self.held[batch.id])

    def estimate_of(self, batch: Batch) -> float:
        """The batch price of a batch submitted without --max-cost (so with no estimate kept)."""
        assert self.ceiling is not None
        questions = set(batch.questions())
        return sum(self.ceiling.estimate(self.name, self.request(item, sample), batch=True)
                   for item in self.run.plan.items() for sample in range(self.run.samples)
                   if Question(item.id, self.conditions.of(item).key(), sample) in questions)

    def request(self, item: Item, sample: int) -> ModelRequest:
        return ModelRequest(messages=render(item, self.run.templates(item.task)),
                            settings=sample_settings(self.settings, sample))

    # ---- talking to the provider, under the run's retry policy ------------------------------

    async def call(self, make: Callable[[], Awaitable[T]], *, whole: bool = False) -> T:
        """A provider call retried like a question; `whole` lifts the per-attempt timeout (an
        upload or a download of up to a few hundred MB). Raises its last error."""
        policy = replace(self.sending.policy, timeout=None) if whole else self.sending.policy
        outcome = await send(make, policy, halted=lambda: self.sending.halted)
        if outcome.error is not None:
            error = outcome.error
            raise ProviderCallError(error.message, kind=error.kind, status=error.status,
                                    retryable=not error.permanent)
        return cast(T, outcome.response)  # what the call returned, None included (find_batch)

    def note(self, text: str) -> None:
        shown = getattr(self.progress, "note", None)
        if shown is not None:
            shown(self.name, text)

    async def find_lost(self) -> None:
        """Submissions written but never confirmed (a kill mid-submit): found at the provider,
        or abandoned so that their questions are submitted again."""
        for batch in self.batches:
            if not batch.in_doubt:
                continue
            submission = batch.submission
            found = await self.call(lambda: self.look_for(submission))  # noqa: B023 (awaited here)
            now = datetime.now(UTC)
            if found is not None:
                self.run.state.write(Submitted(id=batch.id, batch_id=found.id,
                                               input_file_id=found.input_file_id, at=now, found=True))
            else:
                self.run.state.write(Abandoned(id=batch.id, at=now, reason="its submission was cut short "
                                               "and the provider holds no such batch"))
                if self.ceiling is not None:
                    self.ceiling.settle(self.held.pop(batch.id, 0.0), 0.0)

    async def look_for(self, submission: Submitting) -> Any:
        known = {b.batch_id for b in self.run.state.batches.values() if b.batch_id}
        since = submission.at.timestamp() - 120  # the provider's clock may run behind ours
        return await self.provider.find_batch(submission.id, len(submission.requests),
                                              datetime.fromtimestamp(since, UTC), known)

    # ---- submitting ---------------------------------------------------------------------

    async def submit_unanswered(self) -> None:
        """Every question not answered, not in a live batch and not failed in this run: from
        the cache, or into batches; stops at the --max-cost ceiling."""
        run = self.run
        limits = self.provider.batch_limits()
        assert limits is not None  # BatchRun refused providers without a batch API
        busy = {q for b in self.batches if b.live for q in b.questions()} | self.failed_now
        chunk = Chunk()
        for item in run.plan.items():
            condition = self.conditions.of(item)
            for sample in range(run.samples):
                question = Question(item.id, condition.key(), sample)
                if run.answered.has(item.id, condition, sample):
                    self.stats.skipped[self.name] += 1
                    continue
                if question in busy:
                    continue
                request = self.request(item, sample)
                cached = self.from_cache(request, sample)
                if cached is not None:
                    self.write(item, condition, sample, datetime.now(UTC), 0.0, cached, None)
                    continue
                estimate = self.ceiling.estimate(self.name, request, batch=True) if self.ceiling else 0.0
                if self.ceiling is not None and not self.ceiling.reserve(estimate):
                    why = self.ceiling.why(self.name, estimate)
                    self.write(item, condition, sample, datetime.now(UTC), 0.0, None,
                               CallError(kind="max_cost", message=why, retryable=True))
                    self.stats.stopped[self.name] = why
                    await self.submit(chunk)
                    return
                line = self.provider.batch_request(chunk.custom_id(), request)
                size = len(json.dumps(line, separators=(",", ":"))) + 1
                if chunk.requests and (len(chunk.requests) >= limits.requests
                                       or chunk.size + size > limits.bytes):
                    await self.submit(chunk)
                    chunk = Chunk()
                    line = self.provider.batch_request(chunk.custom_id(), request)
                chunk.add(line, size, question, condition, estimate)
        await self.submit(chunk)

    def from_cache(self, request: ModelRequest, sample: int) -> ModelResponse | None:
        cache, who = self.sending.cache, self.provider.cache_identity()
        if cache is None or who is None or not (request.settings.get("temperature") == 0
                                                or self.sending.reuse_sampled):
            return None
        cached = cache.get(cache.key(who, request, sample))
        if cached is not None:
            cached.extra = {**cached.extra, "cache": "hit"}
        return cached

    async def submit(self, chunk: Chunk) -> None:
        """One batch: written to the state file, sent, and its id written, each durable
        before the next step. A failed reply is looked for before sending again."""
        if not chunk.requests:
            return
        state = self.run.state
        submission = Submitting(
            id=chunk.token, model=self.name, endpoint=self.endpoint, options=self.run.options,
            at=datetime.now(UTC), command=self.run.command, estimate=chunk.estimate if self.ceiling else None,
            conditions=chunk.conditions, requests=chunk.requests)
        state.write(submission)

        async def attempt() -> Any:
            try:
                return await self.provider.submit_batch(chunk.lines, chunk.token)
            except ProviderCallError as exc:
                if exc.retryable and (found := await self.look_for(submission)) is not None:
                    return found  # the batch was made; only the reply was lost
                raise

        try:
            ref = await self.call(attempt, whole=True)
        except ProviderCallError as exc:
            state.write(Abandoned(id=chunk.token, at=datetime.now(UTC), reason=str(exc)))
            if self.ceiling is not None:
                self.ceiling.settle(chunk.estimate, 0.0)
            raise
        self.held[chunk.token] = chunk.estimate
        state.write(Submitted(id=chunk.token, batch_id=ref.id, input_file_id=ref.input_file_id,
                              at=datetime.now(UTC)))
        batch = state.batches[chunk.token]
        self.batches.append(batch)
        self.note(f"submitted {ref.id} ({len(chunk.requests)} questions)")

    # ---- waiting and collecting -----------------------------------------------------------

    async def collect(self, wait: bool) -> None:
        """Collect every live batch that has ended; with `wait`, poll until all have."""
        interval = self.run.poll
        failing_since: dict[str, datetime] = {}  # batch id -> when its status checks began failing
        while True:
            for batch in [b for b in self.batches if b.live]:
                batch_id = batch.batch_id
                assert batch_id is not None
                try:
                    status = await self.call(lambda: self.provider.batch_status(batch_id))  # noqa: B023
                except ProviderCallError as exc:
                    # The batch runs on at the provider whatever its status endpoint does: a
                    # waiting run outlasts an outage rather than ending on one question's budget.
                    started = failing_since.setdefault(batch_id, datetime.now(UTC))
                    outage = (datetime.now(UTC) - started).total_seconds()
                    if not (wait and exc.retryable) or outage > BATCH_STATUS_OUTAGE:
                        raise
                    self.note(f"{batch_id}: status check failed ({exc}); checking again")
                    continue
                failing_since.pop(batch_id, None)
                waited = int((datetime.now(UTC) - batch.submission.at).total_seconds())
                self.note(f"{batch_id} {status.status}, {status.done} of {status.total or '?'} done "
                          f"({waited // 3600}h{waited // 60 % 60:02d}m{waited % 60:02d}s since submitted)")
                if status.ended:
                    await self.collect_one(batch, status)
            if not wait or not any(b.live for b in self.batches):
                return
            await asyncio.sleep(interval)
            interval = min(interval * 1.5, BATCH_POLL_MAX)

    async def collect_one(self, batch: Batch, status: BatchStatus) -> None:
        """An ended batch's results as records, in the plan's order; the batch is closed once
        every request has its record."""
        batch_id = status.id

        async def download() -> dict[str, BatchResult]:
            return {r.custom_id: r async for r in self.provider.batch_results(batch_id)}

        results = await self.call(download, whole=True)
        wanted = {question: custom_id for custom_id, question in batch.submission.requests.items()}
        answered = errors = 0
        spent = 0.0
        for item in self.run.plan.items():
            condition = self.conditions.of(item)
            for sample in range(self.run.samples):
                custom_id = wanted.pop(Question(item.id, condition.key(), sample), None)
                if custom_id is None or self.run.answered.has(item.id, condition, sample):
                    continue  # not in this batch, or recorded by a collection cut short
                result = results.get(custom_id)
                response, error = self.outcome(result, status)
                record = self.write(item, condition, sample, batch.submission.at, None, response, error,
                                    batch_id=batch_id)
                if record.error is None:
                    answered += 1
                else:
                    errors += 1
                    self.failed_now.add(Question(item.id, condition.key(), sample))
                if self.ceiling is not None:
                    spent += self.ceiling.answer_cost(self.name, response, 0.0, batch=True)
        if self.ceiling is not None:
            self.ceiling.settle(self.held.pop(batch.id, 0.0), spent)
        if wanted:
            self.run.notes.append(f"batch {batch_id} of {self.name} holds {len(wanted)} questions this "
                                  "command does not ask; to collect them, run the command that submitted it: "
                                  f"{shlex.join(batch.submission.command)}")
            return
        self.run.state.write(Collected(id=batch.id, at=datetime.now(UTC), status=status.status,
                                       answered=answered, errors=errors))

    def outcome(self, result: BatchResult | None, status: BatchStatus) -> tuple[ModelResponse | None,
                                                                                 CallError | None]:
        if result is None:  # no line in the results: the batch never ran it
            kind, text = MISSING.get(status.status, ("batch_missing", "the batch returned no result for it"))
            if status.message:
                text = f"{text}: {status.message}"
            return None, CallError(kind=kind, message=text, retryable=True)
        if result.error is not None:
            return None, call_error(result.error)
        return result.response, None

    def write(self, item: Item, condition: Condition, sample: int, started: datetime, seconds: float | None,
              response: ModelResponse | None, error: CallError | None, batch_id: str | None = None) -> Record:
        """One question's record, written (with the cache entry of an answer from a batch)."""
        template = self.run.templates(item.task)
        if seconds is None:
            seconds = (datetime.now(UTC) - started).total_seconds()
        attempts = [Attempt(started_at=started, seconds=seconds, error=error)] if batch_id else []
        record = make_record(self.name, item, template, condition, started, seconds, attempts, response,
                             error, sample=sample, run_id=self.run_id, label=self.run.labels.get(self.name))
        if batch_id is not None:
            record.extra = {**record.extra, "batch": batch_id}
            cache, who = self.sending.cache, self.provider.cache_identity()
            if response is not None and cache is not None and who is not None:
                cache.put(cache.key(who, self.request(item, sample), sample), response)
        self.writer.write(record, TemplateLine(id=condition.template, task=item.task, origin=template.origin,
                                               text=template.text))
        if record.done:
            self.run.answered.add(record)
        if error is None:
            self.stats.answered[self.name] += 1
        else:
            self.stats.errors[self.name] += 1
        if self.progress is not None:
            self.progress.advance(self.name, record.error is not None)
        return record


class Chunk:
    """Requests gathered for one batch."""

    def __init__(self) -> None:
        self.token = "qb" + uuid.uuid4().hex[:10]  # names the submission; custom_ids start with it
        self.lines: list[dict[str, Any]] = []
        self.requests: dict[str, Question] = {}
        self.conditions: dict[str, Condition] = {}
        self.size = 0
        self.estimate = 0.0

    def custom_id(self) -> str:
        """The next request's id: unique, and valid for both APIs (^[a-zA-Z0-9_-]{1,64}$)."""
        return f"{self.token}-{len(self.requests)}"

    def add(self, line: dict[str, Any], size: int, question: Question, condition: Condition,
            estimate: float) -> None:
        self.requests[self.custom_id()] = question
        self.lines.append(line)
        self.conditions.setdefault(condition.key(), condition)
        self.size += size
        self.estimate += estimate

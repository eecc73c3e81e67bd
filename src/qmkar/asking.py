"""The send path of a run: each question rendered, asked (from the cache, or with retries
and pacing), recorded, parsed, scored and written, at most --concurrency at a time.

`run_model` is the loop for one model; `ask` is one question. Retries and the wait
between attempts are retry.py's, the in-flight limit and rate buckets limits.py's; the
Run object (runner.py) decides which questions are still to ask.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from qmkar.cache import ResponseCache
from qmkar.ceiling import Ceiling
from qmkar.condition import Condition
from qmkar.defaults import CONCURRENCY, GRACE_SECONDS, MAX_ANSWER_CHARS
from qmkar.errors import TranscriptError
from qmkar.limits import Limiter
from qmkar.pricing import tokens_per_request
from qmkar.providers.base import ModelRequest, ModelResponse, Provider
from qmkar.render import Template, render
from qmkar.retry import RetryPolicy, send
from qmkar.tasks import family
from qmkar.tasks.base import Item, Outline, TaskParams
from qmkar.transcript import Attempt, CallError, Record, TemplateLine, TranscriptWriter, text_key

if TYPE_CHECKING:
    from qmkar.runner import Answered


@dataclass
class Sending:
    """How one model is asked: retries, pacing and the response cache (None: no cache)."""

    policy: RetryPolicy = field(default_factory=RetryPolicy)
    limiter: Limiter | None = None
    cache: ResponseCache | None = None
    reuse_sampled: bool = False  # serve sampled requests (temperature not 0) from the cache too
    halted: bool = False  # set on SIGINT/SIGTERM: questions in flight make no further attempts
    ceiling: Ceiling | None = None  # --max-cost, shared by every model of the run
    max_answer: int = MAX_ANSWER_CHARS  # characters of an answer (and of its reasoning) kept


@dataclass
class RunStats:
    """What one run did, per model."""

    answered: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    stopped: dict[str, str] = field(default_factory=dict)  # model -> why its run stopped early
    conditions: dict[str, set[str]] = field(default_factory=dict)  # model -> condition ids asked under
    # Every question of the plan the models reached, when kept: a run into a transcript that held
    # answers before, whose summary reads this run's back (a fresh one keeps its own records).
    item_ids: set[str] | None = None
    interrupted: bool = False


def make_record(
    provider_name: str,
    item: Item,
    template: Template,
    condition: Condition,
    started_at: datetime,
    seconds: float,
    attempts: list[Attempt],
    response: ModelResponse | None,
    error: CallError | None,
    *,
    sample: int = 0,
    run_id: str | None = None,
    label: str | None = None,
) -> Record:
    """The transcript record of one question, parsed and scored when it was answered."""
    record = Record(
        run_id=run_id, model=provider_name, label=label, item_id=item.id, item=item,
        condition=condition, condition_id=condition.key(), sample=sample, template=template.origin,
        started_at=started_at, seconds=seconds, attempts=attempts, error=error,
    )
    if response is not None:
        record.answer = response.text
        record.reasoning = response.reasoning
        record.response_model = response.model
        record.usage = response.usage
        record.truncated = response.truncated
        record.extra = response.extra
        record.parsed, record.score = family(item.task).grade(item, response.text)
    return record


def cache_readable(settings: dict[str, Any], sending: Sending) -> bool:
    """Whether an answer may come from the cache: only a greedy request (temperature 0 sent)
    repeats its answer; a sampled one is asked afresh unless the user allows reuse."""
    return settings.get("temperature") == 0 or sending.reuse_sampled


async def ask(
    provider: Provider, item: Item, request: ModelRequest, sending: Sending | None = None, sample: int = 0,
) -> tuple[ModelResponse | None, list[Attempt], CallError | None, bool]:
    """One question: (response, attempts, error, fatal), from the cache or with retries."""
    sending = sending or Sending()
    cache = sending.cache
    who = provider.cache_identity() if cache is not None else None
    key = cache.key(who, request, sample) if cache is not None and who is not None else None
    if cache is not None and key is not None and cache_readable(request.settings, sending):
        cached = cache.get(key)
        if cached is not None:
            cached.extra = {**cached.extra, "cache": "hit"}
            return cached, [], None, False
    ceiling, reserved = sending.ceiling, 0.0
    if ceiling is not None:
        reserved = ceiling.estimate(provider.name, request, item=item)
        if not ceiling.reserve(reserved):
            return None, [], CallError(kind="max_cost", message=ceiling.why(provider.name, reserved),
                                       retryable=True), True
    tokens = tokens_per_request(request.messages, request.settings.get("max_tokens"))
    bucket = sending.limiter.tokens if sending.limiter is not None else None
    if bucket is not None and (why := too_many_tokens(request, bucket.per_minute)):
        if ceiling is not None:
            ceiling.settle(reserved, 0.0)
        return None, [], CallError(kind="tpm", retryable=True, message=why), True
    outcome = await send(lambda: provider.generate(item, request), sending.policy, sending.limiter, tokens,
                         lambda: sending.halted)
    response = bounded(outcome.response, sending.max_answer) if outcome.response is not None else None
    if ceiling is not None:
        kind = outcome.error.kind if outcome.error else None
        spent = ceiling.answer_cost(provider.name, response, reserved, error_kind=kind)
        ceiling.settle(reserved, spent)
    if response is not None and cache is not None and key is not None:
        cache.put(key, response)
    return response, outcome.attempts, outcome.error, outcome.fatal


def too_many_tokens(request: ModelRequest, tpm: float) -> str | None:
    """Why a request cannot be sent within --tpm (more tokens than a minute allows), or None."""
    tokens = tokens_per_request(request.messages, request.settings.get("max_tokens"))
    if tokens <= tpm:
        return None
    return (f"--tpm {tpm:g} is below the {tokens:,} tokens one request needs (its prompt and the "
            f"answer's allowance, estimated); raise --tpm to at least {tokens} or lower --max-tokens")


def bounded(response: ModelResponse, limit: int) -> ModelResponse:
    """The response with its answer and its reasoning cut to `limit` characters each, so a
    runaway answer is not kept whole in the transcript and the cache; a cut one records how
    long it was in `extra["cut"]` ({"answer": characters, "reasoning": characters})."""
    cut: dict[str, int] = {}
    if len(response.text) > limit:
        cut["answer"] = len(response.text)
        response.text = response.text[:limit]
    if response.reasoning is not None and len(response.reasoning) > limit:
        cut["reasoning"] = len(response.reasoning)
        response.reasoning = response.reasoning[:limit]
    if cut:
        response.extra = {**response.extra, "cut": cut}
    return response


class Conditions:
    """The condition of each question a provider is asked (a few per run: one per task
    and set of options), built once each."""

    def __init__(self, provider: Provider, settings: dict[str, Any],
                 templates: Callable[[str], Template]) -> None:
        self.identity = provider.identity()
        self.settings, self.templates = settings, templates
        self._made: dict[tuple[str, str], Condition] = {}
        # The last params object seen (params are frozen) and its condition: a resume's outline
        # shares one params object among its questions, so each is looked up in a few ns, not
        # dumped to JSON (about 20 us).
        self._last: tuple[TaskParams, str, Condition] | None = None

    def of(self, item: Item | Outline) -> Condition:
        last = self._last
        if last is not None and last[0] is item.params and last[1] == item.task:
            return last[2]
        chosen = family(item.task)
        params = chosen.condition_params(item.params)
        key = (item.task, json.dumps(params, sort_keys=True))
        if key not in self._made:
            provider, endpoint, model = self.identity
            self._made[key] = Condition(
                provider=provider, endpoint=endpoint, model=model, settings=self.settings,
                template=text_key(self.templates(item.task).text), task=item.task, params=params)
        self._last = (item.params, item.task, self._made[key])
        return self._made[key]


def unreachable(attempts: list[Attempt]) -> bool:
    """Whether a question failed to reach its server at every try, more than once: retried
    until its retries or budget ran out. When that is how a model's first question to end in
    a run ended, its server is taken to be down or its address wrong, and the model is
    stopped, not asked the rest of its questions at a minute of retries each."""
    return len(attempts) > 1 and all(a.error is not None and a.error.kind == "connection" for a in attempts)


def sample_settings(settings: dict[str, Any], sample: int) -> dict[str, Any]:
    """Sample k's settings: the seed moved on by k, so providers that take one sample anew."""
    if sample and "seed" in settings:
        return {**settings, "seed": settings["seed"] + sample}
    return settings


async def run_model(
    provider: Provider,
    items: Iterable[Item],
    templates: Callable[[str], Template],
    settings: dict,
    writer: TranscriptWriter,
    done: Answered,
    stats: RunStats,
    concurrency: int = CONCURRENCY,
    on_record: Callable[[Record], None] | None = None,
    sending: Sending | None = None,
    *,
    samples: int = 1,
    run_id: str | None = None,
    label: str | None = None,
) -> None:
    """Ask `provider` every (item, sample) whose (id, condition, sample) is not in `done`,
    at most `concurrency` at a time. A transcript that cannot be written (a full disk) stops
    the sending: the questions in flight end, then its error goes up, once."""
    name = provider.name
    # Hosted providers say which settings they really send (no temperature for o1...).
    settings = provider.settings_for(settings)
    conditions = Conditions(provider, settings, templates)
    stats.answered.setdefault(name, 0)
    stats.errors.setdefault(name, 0)
    stats.skipped.setdefault(name, 0)
    stats.conditions.setdefault(name, set())
    slots = asyncio.Semaphore(concurrency)
    in_flight: set[asyncio.Task[None]] = set()
    stop = asyncio.Event()
    unwritten: list[TranscriptError] = []  # a write failed (a full disk): nothing more is sent

    async def one(item: Item, condition: Condition, sample: int) -> None:
        try:
            template = templates(item.task)
            request = ModelRequest(messages=render(item, template),
                                   settings=sample_settings(settings, sample))
            started = datetime.now(UTC)
            clock = time.perf_counter()
            response, attempts, error, fatal = await ask(provider, item, request, sending, sample)
            record = make_record(
                name, item, template, condition, started, time.perf_counter() - clock,
                attempts, response, error, sample=sample, run_id=run_id, label=label,
            )
            try:
                writer.write(record, TemplateLine(id=condition.template, task=item.task,
                                                  origin=template.origin, text=template.text))
            except TranscriptError as exc:
                unwritten.append(exc)
                stop.set()
                return
            if error is None:
                stats.answered[name] += 1
            else:
                stats.errors[name] += 1
                if fatal:
                    stats.stopped[name] = error.message
                    stop.set()
                elif stats.answered[name] == 0 and unreachable(attempts):
                    stats.stopped[name] = (
                        f"{error.message}, and no question of this run has been answered: is the "
                        f"server at {condition.endpoint} running, and is the address right? Run the "
                        "same command again once it answers")
                    stop.set()
            if on_record is not None:
                on_record(record)
        finally:
            slots.release()

    try:
        for item in items:
            condition = conditions.of(item)
            stats.conditions[name].add(condition.key())
            if stats.item_ids is not None:
                stats.item_ids.add(item.id)
            for sample in range(samples):
                if done.has(item.id, condition, sample):
                    stats.skipped[name] += 1
                    continue
                await slots.acquire()
                if stop.is_set():
                    slots.release()
                    break
                task = asyncio.create_task(one(item, condition, sample))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
            if stop.is_set():
                break
        if in_flight:
            await asyncio.gather(*in_flight)
        if unwritten:
            raise unwritten[0]
    except (Exception, asyncio.CancelledError) as exc:
        # Stopped by a signal, or the questions' source or the transcript failed: the questions
        # still in flight have GRACE_SECONDS to be answered and written, and no task outlives
        # the run (the provider's client is closed next).
        if isinstance(exc, asyncio.CancelledError):
            stats.interrupted = True
            if sending is not None:
                sending.halted = True
        if in_flight:
            await asyncio.wait(set(in_flight), timeout=GRACE_SECONDS)
        for task in in_flight:
            task.cancel()
        raise

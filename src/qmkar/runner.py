"""A run: a plan of questions asked of one or more models, every answer written as it arrives.

`Run` owns what happens between the CLI's options and the transcript: resume (the
questions a transcript already answered are skipped), one concurrent loop per model,
progress callbacks, and Ctrl-C (stop sending, give questions in flight a grace period
to finish and be written, then report the run as interrupted). Items are streamed,
never all held in memory. Retries and pacing of one request are retry.py's and
limits.py's; the runner decides what to ask and records what came back.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from qmkar import __version__
from qmkar.cache import ResponseCache, default_directory
from qmkar.ceiling import Ceiling
from qmkar.condition import Condition, differences
from qmkar.defaults import (
    API_SEED,
    BATCH_POLL,
    CONCURRENCY,
    GRACE_SECONDS,
    MAX_RETRIES,
    MAX_TOKENS,
    REASONING_MAX_TOKENS,
    RETRY_BUDGET,
    TEMPERATURE,
    TIMEOUT,
)
from qmkar.errors import UsageError
from qmkar.limits import Limiter
from qmkar.pricing import load_prices, tokens_per_request
from qmkar.providers.base import ModelRequest, ModelResponse, Provider
from qmkar.render import Template, render
from qmkar.retry import RetryPolicy, send
from qmkar.sizing import Sizing
from qmkar.tasks import TaskSpec, check_count, family, generate
from qmkar.tasks.base import Item
from qmkar.tasks.datasets import read_items
from qmkar.transcript import (
    Attempt,
    CallError,
    Reading,
    Record,
    RunHeader,
    TemplateLine,
    TranscriptWriter,
    latest,
    text_key,
)


class SendOptions(BaseModel):
    """How a run sends: connection, generation settings, retries, pacing, cache and prices.

    The CLI offers each field as an option (`--base-url`...), its description as help."""

    model_config = ConfigDict(frozen=True)

    base_url: str | None = Field(None, description="OpenAI-compatible endpoint to send to (any model "
                                 "name then works).")
    api_key_env: str | None = Field(None, description="Environment variable holding the key for "
                                    "--base-url (or instead of the usual one).")
    endpoints: Path | None = Field(None, description="TOML file of your named endpoints "
                                   "[$QMKAR_ENDPOINTS or ~/.config/qmkar/endpoints.toml].")
    temperature: float | None = Field(None, description=f"Sampling temperature [{TEMPERATURE:g} "
                                      "where the model allows it].")
    max_tokens: int | None = Field(None, ge=1, description=f"Answer token limit [{MAX_TOKENS}; "
                                   f"{REASONING_MAX_TOKENS} for reasoning models].")
    reasoning_effort: str | None = Field(None, description="OpenAI reasoning models: low, medium or high.")
    thinking_budget: int | None = Field(None, ge=1, description="Anthropic: turn on extended thinking "
                                        "with this many tokens.")
    timeout: float = Field(TIMEOUT, ge=0.001, description="Seconds per attempt.")
    max_retries: int = Field(MAX_RETRIES, ge=0, description="Retries per question after the first try.")
    retry_budget: float = Field(RETRY_BUDGET, ge=0.001, description="Seconds one question may take, "
                                "all attempts and waits together.")
    rpm: float | None = Field(None, ge=0.001, description="At most this many requests per minute per model.")
    tpm: float | None = Field(None, ge=1, description="At most this many tokens per minute per model.")
    no_cache: bool = Field(False, description="Neither read nor write the response cache.")
    cache_dir: Path | None = Field(None, description="Response cache folder "
                                   "[$QMKAR_CACHE_DIR or ~/.cache/qmkar/responses].")
    prices: Path | None = Field(None, description="TOML file of prices overriding the shipped table "
                                "[$QMKAR_PRICES].")
    concurrency: int = Field(CONCURRENCY, ge=1, description="Questions in flight at once per model.")
    samples: int = Field(1, ge=1, description="Ask each question this many times (sample k sends seed "
                         "+ k); reports pool them, with an interval that allows for their correlation.")
    reuse_sampled: bool = Field(False, description="Serve sampled requests (temperature not 0) from the "
                                "response cache too; by default only greedy ones are.")
    max_cost: float | None = Field(None, ge=0, description="Most this run may cost, in USD, over every "
                                   "rerun into its transcript (price table estimates; cache hits free, "
                                   "batches half price): nothing is sent that could pass it.")
    batch: bool = Field(False, description="Send each model's unanswered questions as a batch (OpenAI Batch "
                        "API, Anthropic Message Batches): half price, answers within 24 h.")
    no_wait: bool = Field(False, description="With --batch: submit, print the command that collects, exit.")
    batch_poll: float = Field(BATCH_POLL, ge=0.001, description="With --batch: seconds before the first "
                              "status check; the wait grows to a minute.")

    def provider_options(self) -> dict[str, Any]:
        """What registry.resolve passes to a provider's factory."""
        return {"base_url": self.base_url, "api_key_env": self.api_key_env,
                "endpoints_file": self.endpoints, "timeout": self.timeout}

    def settings(self) -> dict[str, Any]:
        """Generation settings: only those set are recorded; providers fill in their own defaults."""
        given = {"temperature": self.temperature, "max_tokens": self.max_tokens,
                 "reasoning_effort": self.reasoning_effort, "thinking_budget": self.thinking_budget}
        return {"seed": API_SEED, **{k: v for k, v in given.items() if v is not None}}

    def sendings(self, providers: list[Provider]) -> dict[str, Sending]:
        """Each model's retry policy, pacing and the response cache; the run's --max-cost
        ceiling, shared."""
        policy = RetryPolicy(max_retries=self.max_retries, budget=self.retry_budget, timeout=self.timeout)
        # Only a model whose answers are cached needs the folder (a home folder may not exist).
        needed = not self.no_cache and any(p.cache_identity() is not None for p in providers)
        cache = ResponseCache(self.cache_dir or default_directory()) if needed else None
        ceiling = (None if self.max_cost is None else
                   Ceiling.for_providers(self.max_cost, providers, load_prices(self.prices)))
        return {p.name: Sending(policy, Limiter(self.concurrency, self.rpm, self.tpm), cache,
                                reuse_sampled=self.reuse_sampled, ceiling=ceiling) for p in providers}


class Plan(Protocol):
    """What a run asks: its items (re-readable, streamed), how many, of which task, and
    the name of its default transcript."""

    task: str
    count: int
    name: str

    def items(self) -> Iterator[Item]: ...


class GeneratedPlan:
    """n seeded items of one task; with `sizing`, n of each token target (sizing.py), the
    smallest first."""

    def __init__(self, spec: TaskSpec, n: int, seed: int, sizing: Sizing | None = None) -> None:
        check_count(n)
        self.spec, self.n, self.seed, self.sizing = spec, n, seed, sizing
        self.fits = sizing.fits(spec, seed) if sizing is not None else []
        self.specs = [fit.spec for fit in self.fits] or [spec]
        self.task = spec.task
        self.count = n * len(self.specs)
        # Every option, given or default, so the same questions always name the same
        # transcript and a rerun resumes it.
        options: dict[str, Any] = {name: str(getattr(spec.params, name))
                                   for name in type(spec.params).model_fields}
        if sizing is not None:
            options["context_tokens"] = [sizing.targets, sizing.counter.name]
        digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:8]
        self.name = f"{self.task}-n{n}-seed{seed}-{digest}"

    def items(self) -> Iterator[Item]:
        for spec in self.specs:
            for item in generate(spec, self.n, self.seed):
                yield self.sizing.annotate(item) if self.sizing is not None else item


class DatasetPlan:
    """The items of a dataset file (qmkar JSONL or a blog JSON file), or its first `limit`."""

    def __init__(self, path: Path, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise UsageError(f"-n must be at least 1, not {limit}")
        self.path, self.limit = path, limit
        first = next(iter(read_items(path)), None)
        if first is None:
            raise UsageError(f"dataset {path} holds no items")
        self.task = first.task
        self.count = sum(1 for _ in self.items())
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
        self.name = f"{path.stem}-{digest}"

    def items(self) -> Iterator[Item]:
        return itertools.islice(read_items(self.path), self.limit)


@dataclass
class Sending:
    """How one model is asked: retries, pacing and the response cache (None: no cache)."""

    policy: RetryPolicy = field(default_factory=RetryPolicy)
    limiter: Limiter | None = None
    cache: ResponseCache | None = None
    reuse_sampled: bool = False  # serve sampled requests (temperature not 0) from the cache too
    halted: bool = False  # set on Ctrl-C: questions in flight make no further attempts
    ceiling: Ceiling | None = None  # --max-cost, shared by every model of the run


@dataclass
class RunStats:
    """What one run did, per model."""

    answered: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    stopped: dict[str, str] = field(default_factory=dict)  # model -> why its run stopped early
    conditions: dict[str, set[str]] = field(default_factory=dict)  # model -> condition ids asked under
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
        reserved = ceiling.estimate(provider.name, request)
        if not ceiling.reserve(reserved):
            return None, [], CallError(kind="max_cost", message=ceiling.why(provider.name, reserved),
                                       retryable=True), True
    outcome = await send(
        lambda: provider.generate(item, request), sending.policy, sending.limiter,
        tokens_per_request(request.messages, request.settings.get("max_tokens")),
        lambda: sending.halted,
    )
    if ceiling is not None:
        kind = outcome.error.kind if outcome.error else None
        spent = ceiling.answer_cost(provider.name, outcome.response, reserved, error_kind=kind)
        ceiling.settle(reserved, spent)
    if outcome.response is not None and cache is not None and key is not None:
        cache.put(key, outcome.response)
    return outcome.response, outcome.attempts, outcome.error, outcome.fatal


class Conditions:
    """The condition of each question a provider is asked (a few per run: one per task
    and set of options), built once each."""

    def __init__(self, provider: Provider, settings: dict[str, Any],
                 templates: Callable[[str], Template]) -> None:
        self.identity = provider.identity()
        self.settings, self.templates = settings, templates
        self._made: dict[tuple[str, str], Condition] = {}

    def of(self, item: Item) -> Condition:
        chosen = family(item.task)
        params = chosen.condition_params(item.params)
        key = (item.task, json.dumps(params, sort_keys=True))
        if key not in self._made:
            provider, endpoint, model = self.identity
            self._made[key] = Condition(
                provider=provider, endpoint=endpoint, model=model, settings=self.settings,
                template=text_key(self.templates(item.task).text), task=item.task, params=params)
        return self._made[key]


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
    at most `concurrency` at a time."""
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
            writer.write(record, TemplateLine(id=condition.template, task=item.task, origin=template.origin,
                                              text=template.text))
            if error is None:
                stats.answered[name] += 1
            else:
                stats.errors[name] += 1
                if fatal:
                    stats.stopped[name] = error.message
                    stop.set()
            if on_record is not None:
                on_record(record)
        finally:
            slots.release()

    try:
        for item in items:
            condition = conditions.of(item)
            stats.conditions[name].add(condition.key())
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
    except asyncio.CancelledError:
        stats.interrupted = True
        if sending is not None:
            sending.halted = True
        if in_flight:
            await asyncio.wait(set(in_flight), timeout=GRACE_SECONDS)
        for task in in_flight:
            task.cancel()
        raise


class Progress(Protocol):
    """What the runner tells whoever shows progress (the CLI's bars, a test's list)."""

    def start(self, model: str, total: int, done: int) -> None: ...

    def advance(self, model: str, failed: bool = False) -> None: ...


class Answered:
    """What a transcript needs no more of: each (question, condition, sample) answered, or
    failed in a way asking again cannot fix. Records from before conditions were recorded
    count for a condition they match in every field they know."""

    def __init__(self, records: Iterable[Record] = ()) -> None:
        self.keys: set[tuple[str, str, int]] = set()
        self.legacy: dict[tuple[str, int], list[Condition]] = {}
        for record in latest(records).values():
            if record.done:
                self.add(record)

    def add(self, record: Record) -> None:
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
    interrupted: bool = False  # Ctrl-C: answers received so far are in the transcript
    sendings: dict[str, Sending] = field(default_factory=dict)

    @property
    def conditions(self) -> set[str]:
        """The ids of every condition this run asked (or found answered) under."""
        return {key for keys in self.stats.conditions.values() for key in keys}


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
        concurrency: int = CONCURRENCY,
        sendings: dict[str, Sending] | None = None,
        *,
        samples: int = 1,
        labels: dict[str, str] | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.plan, self.providers, self.path = plan, providers, path
        self.templates, self.settings, self.concurrency = templates, settings, concurrency
        self.sendings = sendings or {}
        self.samples, self.labels, self.command = samples, labels or {}, command or []
        reading = Reading(path)
        records = list(reading)
        self.torn_bytes = reading.torn_bytes  # a line cut by an earlier crash, dropped on writing
        self.items_written, self.templates_written = set(reading.items), set(reading.templates)
        self.answered = Answered(records)
        self.previous: dict[str, list[Condition]] = {}  # model name -> conditions it was asked under
        for record in records:
            if record.item.task == plan.task and record.condition not in self.previous.get(record.model, []):
                self.previous.setdefault(record.model, []).append(record.condition)
        self.first = next(iter(plan.items()), None)
        self.ceiling = next((s.ceiling for s in self.sendings.values() if s.ceiling is not None), None)
        if self.ceiling is not None:  # what earlier runs into this transcript spent counts too
            asked = self.condition_ids()
            self.ceiling.count(record for record in records if record.condition_id in asked)

    def condition_ids(self) -> set[str]:
        """The ids of every condition this run asks under (reads the plan's items once per model)."""
        ids: set[str] = set()
        for provider in self.providers:
            conditions = Conditions(provider, provider.settings_for(self.settings), self.templates)
            ids.update(conditions.of(item).key() for item in self.plan.items())
        return ids

    def condition_of(self, provider: Provider, item: Item) -> Condition:
        return Conditions(provider, provider.settings_for(self.settings), self.templates).of(item)

    def already_answered(self, provider: Provider, ids: set[str] | None = None) -> int:
        """How many of the plan's (question, sample)s the transcript holds for `provider`'s
        condition (for the resume line; reads the plan's items once)."""
        conditions = Conditions(provider, provider.settings_for(self.settings), self.templates)
        return sum(1 for item in self.plan.items() if ids is None or item.id in ids
                   for sample in range(self.samples)
                   if self.answered.has(item.id, conditions.of(item), sample))

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
        """Ask every model every unanswered question; on Ctrl-C return an interrupted result."""
        stats = RunStats()
        result = RunResult(self.path, stats, sendings=self.sendings)
        writer = TranscriptWriter(self.path, self.torn_bytes, self.items_written, self.templates_written)
        header = RunHeader(run_id=uuid.uuid4().hex[:12], started_at=datetime.now(UTC),
                           qmkar_version=__version__, command=self.command)
        try:
            writer.header(header)
            asyncio.run(self._all(writer, stats, progress, header.run_id))
        except KeyboardInterrupt:
            result.interrupted = True
        finally:
            writer.close()
        return result

    async def _all(self, writer: TranscriptWriter, stats: RunStats, progress: Progress | None,
                   run_id: str) -> None:
        async def one_model(provider: Provider) -> None:
            if progress is not None:
                total = self.plan.count * self.samples
                progress.start(provider.name, total, self.already_answered(provider))
            try:
                await self.ask_model(provider, writer, stats, progress, run_id)
            finally:
                await provider.aclose()

        await asyncio.gather(*(one_model(p) for p in self.providers))

    async def ask_model(self, provider: Provider, writer: TranscriptWriter, stats: RunStats,
                        progress: Progress | None, run_id: str) -> None:
        """Ask one model the plan's unanswered questions, one request each (batch.BatchRun
        sends them as batches instead)."""
        await run_model(
            provider, self.plan.items(), self.templates, self.settings, writer, self.answered,
            stats, self.concurrency,
            on_record=((lambda record: progress.advance(provider.name, record.error is not None))
                       if progress else None),
            sending=self.sendings.get(provider.name), samples=self.samples, run_id=run_id,
            label=self.labels.get(provider.name),
        )

"""What a run asks and how it sends, as typed objects the CLI builds from its options.

A Plan is the questions (generated from a seed, or read from a dataset file), streamed and
re-readable; SendOptions is every option about sending (connection, generation settings,
retries, pacing, cache, prices, batches) and builds each model's `asking.Sending`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ConfigDict, Field

from qmkar.ahead import CHUNK, SharedReading, generate_chunks, sharing_params
from qmkar.ahead import ahead as made_ahead
from qmkar.cache import ResponseCache, default_directory
from qmkar.ceiling import Ceiling
from qmkar.defaults import (
    API_SEED,
    BATCH_POLL,
    CONCURRENCY,
    MAX_ANSWER_CHARS,
    MAX_RETRIES,
    MAX_TOKENS,
    REASONING_MAX_TOKENS,
    RETRY_BUDGET,
    SIM_CONCURRENCY,
    TEMPERATURE,
    TIMEOUT,
)
from qmkar.deferred import DeferredModel
from qmkar.errors import UsageError
from qmkar.pricing import load_prices
from qmkar.providers.base import Provider
from qmkar.readprogress import ReadProgress, begin
from qmkar.records import Prompting
from qmkar.sizing import Sizing
from qmkar.tasks import TaskSpec, check_count, generate
from qmkar.tasks.base import Item, Outline, outline_of
from qmkar.tasks.datasets import checked_items, read_items

if TYPE_CHECKING:
    from qmkar.asking import Sending


class SendOptions(DeferredModel):
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
    reasoning_effort: str | None = Field(None, description="Reasoning effort (low, medium, high...) where "
                                         "the model takes one: OpenAI o-series/gpt-5, newer Claude, Gemini, "
                                         "OpenRouter (docs/providers.md).")
    thinking_budget: int | None = Field(None, ge=1, description="Thinking tokens where the model takes a "
                                        "budget: Claude's extended thinking (at least 1,024), Gemini, "
                                        "OpenRouter.")
    timeout: float = Field(TIMEOUT, ge=0.001, description="Seconds per attempt, from sending to the "
                           "last byte of the reply.")
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
    concurrency: int | None = Field(None, ge=1, description="Questions in flight at once per model (fewer "
                                    "for a while after the server answers 429 or 529) "
                                    f"[{CONCURRENCY}; the simulated memories {SIM_CONCURRENCY}, which answer "
                                    "them as one batch].")
    max_answer_chars: int = Field(MAX_ANSWER_CHARS, ge=1, description="Characters of an answer (and of its "
                                  "reasoning) kept; a longer one is cut and its record says how long it was.")
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
        # The send path's own modules (asyncio, tenacity), imported only by what sends: a
        # command that reads transcripts imports this module for the plan types alone.
        from qmkar.asking import Sending
        from qmkar.limits import Limiter
        from qmkar.retry import RetryPolicy

        policy = RetryPolicy(max_retries=self.max_retries, budget=self.retry_budget, timeout=self.timeout)
        # Only a model whose answers are cached needs the folder (a home folder may not exist).
        needed = not self.no_cache and any(p.cache_identity() is not None for p in providers)
        cache = ResponseCache(self.cache_dir or default_directory()) if needed else None
        ceiling = (None if self.max_cost is None else
                   Ceiling.for_providers(self.max_cost, providers, load_prices(self.prices)))
        return {p.name: Sending(policy, Limiter(concurrency_for(self.concurrency, p), self.rpm, self.tpm),
                                cache, reuse_sampled=self.reuse_sampled, ceiling=ceiling,
                                max_answer=self.max_answer_chars) for p in providers}


def concurrency_for(concurrency: int | None, provider: Provider) -> int:
    """Questions asked of `provider` at once: --concurrency when given, else the provider's
    own default (Provider.default_concurrency)."""
    return provider.default_concurrency if concurrency is None else concurrency


class Plan(Protocol):
    """What a run asks: its items (re-readable, streamed), how many, of which task, and
    the name of its default transcript."""

    task: str
    count: int
    name: str

    def items(self, ahead: bool = False) -> Iterator[Item]:
        """The questions in order. `ahead`: the run's send loop is reading them, so generated
        ones may be made ahead in a worker process (ahead.py); the same items either way."""
        ...


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

    def items(self, ahead: bool = False, prompting: Prompting | None = None,
              chunks: Sequence[int] | None = None,
              sharing: SharedReading | None = None) -> Iterator[Item]:
        """The items; made ahead, their prompts too with `prompting` (records.make_ahead), by a
        worker the run's models share (`sharing`, when given). `chunks` (a plan of one spec: a
        sized plan has several): only the items of these chunks, ahead.CHUNK from each index
        given."""
        if chunks is not None and len(self.specs) > 1:
            raise ValueError("a plan sized in tokens has one spec per size: it has no chunks")
        for spec in self.specs:
            if ahead:
                made = made_ahead(spec, self.n, self.seed, prompting=prompting, chunks=chunks,
                                  sharing=sharing)
            else:
                made = generate(spec, self.n, self.seed) if chunks is None else \
                    generate_chunks(spec, self.n, self.seed, chunks)
            for item in made:
                yield self.sizing.annotate(item) if self.sizing is not None else item


class DatasetPlan:
    """The items of a dataset file (qmkar JSONL or a blog JSON file), or its first `limit`.
    Every item is checked once, when the plan is made: `progress` is told the file's bytes,
    then the bytes read (a dataset of 100k questions takes seconds). That pass also keeps each
    question's outline (id, task, params; equal params one object, ahead.sharing_params,
    about 150 bytes a question): what a rerun counts its answers by, without reading the file again."""

    def __init__(self, path: Path, limit: int | None = None, progress: ReadProgress | None = None) -> None:
        if limit is not None and limit < 1:
            raise UsageError(f"-n must be at least 1, not {limit}")
        self.path, self.limit = path, limit
        first = next(iter(read_items(path)), None)
        if first is None:
            raise UsageError(f"dataset {path} holds no items")
        self.task = first.task
        self._checked: str | None = None
        digest = _digest(path)  # taken before the checked pass: a change during it shows later
        begin(progress, [path])
        # every item checked against its task, once
        self._outlines = sharing_params(map(outline_of, itertools.islice(read_items(path, progress), limit)),
                                        0, None)
        self.count = len(self._outlines)
        self._checked = digest
        self.name = f"{path.stem}-{(digest or '')[:8]}"

    def outlines(self) -> list[Outline]:
        """Every question of the plan by id, task and params, as the checked pass read them."""
        return self._outlines

    def items(self, ahead: bool = False, chunks: Sequence[int] | None = None) -> Iterator[Item]:
        """The plan's items; after the first pass, read without checks while the file's
        content is the one checked (its digest costs a few percent of a checked reading).
        `chunks`: only the items of these chunks, CHUNK from each index given (none: the
        file is not read)."""
        if chunks is not None and not chunks:
            return iter(())
        fast = self._checked is not None and self._checked == _digest(self.path)
        found = itertools.islice((checked_items if fast else read_items)(self.path), self.limit)
        if chunks is None:
            return found
        wanted = set(chunks)
        return (item for index, item in enumerate(found) if index - index % CHUNK in wanted)


def _digest(path: Path) -> str | None:
    """The sha256 of a file's content, read a MiB at a time; None when it cannot be read."""
    found = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                found.update(block)
    except OSError:
        return None
    return found.hexdigest()

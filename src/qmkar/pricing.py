"""Token counts and cost estimates: usage totals per model, --dry-run before sending, and
the --max-cost ceiling a run keeps under.

Returns data and the lines the CLI prints; it never prints itself. Answers that came in a
batch (extra["batch"]) are priced at BATCH_DISCOUNT.

Prices are USD per million tokens from a table dated PRICES_DATE; they change, so every
figure computed here is labelled an estimate, and a user's TOML file can override them:

    [prices."gpt-4o"]
    input = 2.50
    output = 10.00
    cached_input = 1.25
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from pydantic import ConfigDict, Field, ValidationError

from qmkar import tokens
from qmkar.deferred import DeferredModel
from qmkar.errors import QmkarError, UsageError
from qmkar.providers import registry
from qmkar.providers.endpoints import shape_error, toml_table
from qmkar.slim import SlimRecord
from qmkar.tally import Spent, Tally
from qmkar.tasks.base import Item, made_ahead
from qmkar.transcript import Record

PRICES_DATE = "2025-06-01"
PRICES_ENV = "QMKAR_PRICES"
# OpenAI's Batch API and Anthropic's Message Batches charge half the usual price.
BATCH_DISCOUNT = 0.5


class Price(NamedTuple):
    input: float  # USD per million prompt tokens
    output: float  # USD per million completion tokens (reasoning included)
    cached_input: float | None = None  # USD per million prompt tokens read from a cache


# Matched by the longest prefix of the model id (lower case), then of its last '/' part.
PRICES: dict[str, Price] = {
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4-turbo": Price(10.00, 30.00),
    "o1-mini": Price(1.10, 4.40, 0.55),
    "o1": Price(15.00, 60.00, 7.50),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o3": Price(2.00, 8.00, 0.50),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "claude-3-5-sonnet": Price(3.00, 15.00, 0.30),
    "claude-3-7-sonnet": Price(3.00, 15.00, 0.30),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08),
    "claude-3-haiku": Price(0.25, 1.25, 0.03),
    "claude-3-opus": Price(15.00, 75.00, 1.50),
    "claude-opus-4": Price(15.00, 75.00, 1.50),
    "deepseek-chat": Price(0.27, 1.10, 0.07),
    "deepseek-reasoner": Price(0.55, 2.19, 0.14),
    "gemini-1.5-pro": Price(1.25, 5.00),
    "gemini-1.5-flash": Price(0.075, 0.30),
    "gemini-2.0-flash": Price(0.10, 0.40),
    "gemini-2.5-pro": Price(1.25, 10.00),
    "minimax-text-01": Price(0.20, 1.10),
    "meta-llama/meta-llama-3.1-405b-instruct": Price(3.50, 3.50),
    "meta-llama/llama-3.1-405b-instruct": Price(0.80, 0.80),
}


USD = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class PriceEntry(DeferredModel):
    """One [prices."MODEL"] table of a user's prices file."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: USD
    output: USD
    cached_input: USD | None = None


class PricesFile(DeferredModel):
    """A user's prices file: [prices."MODEL"] tables and nothing else."""

    model_config = ConfigDict(extra="forbid", strict=True)

    prices: dict[str, PriceEntry] = {}


PRICES_HINT = ('each model is a table [prices."MODEL"] with input = and output = (and optionally '
               "cached_input =), in USD per million tokens")


def load_prices(path: Path | str | None = None) -> dict[str, Price]:
    """The shipped table with the user's overrides (a TOML file) on top."""
    table = dict(PRICES)
    file = Path(path) if path else (Path(os.environ[PRICES_ENV]) if os.environ.get(PRICES_ENV) else None)
    if file is None:
        return table
    data = toml_table(file, "prices file", UsageError)
    try:
        parsed = PricesFile.model_validate(data)
    except ValidationError as exc:
        raise UsageError(shape_error(exc, file, "prices file", PRICES_HINT)) from None
    for model, entry in parsed.prices.items():
        table[model.lower()] = Price(entry.input, entry.output, entry.cached_input)
    return table


def price_for(model: str, table: dict[str, Price]) -> Price | None:
    """The price of a model id (the part after 'provider:'), or None when unknown."""
    for candidate in (model.lower(), model.lower().rsplit("/", 1)[-1]):
        best = max((p for p in table if candidate.startswith(p)), key=len, default=None)
        if best is not None:
            return table[best]
    return None


def cost(price: Price, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
    cached_rate = price.cached_input if price.cached_input is not None else price.input
    fresh = max(0, input_tokens - cached_tokens)
    return (fresh * price.input + cached_tokens * cached_rate + output_tokens * price.output) / 1e6


# ---- counting prompt tokens before sending -------------------------------------------

PER_MESSAGE = 4  # tokens a chat format adds around each message
PER_PROMPT = 3  # and once per prompt (the reply's priming)


class TokenCounter:
    """Counts a request's prompt tokens the way the model's family does (tokens.py): exact
    for OpenAI models, a labelled approximation elsewhere; chat formats add a few per message."""

    def __init__(self, provider: str, model: str) -> None:
        # The tokenizer's name (tokens.counter's): what the question worker is asked to count
        # with. Its tables (about 80 MB for OpenAI's) are loaded when this process first counts.
        self.name = tokens.preferred(provider, model) or tokens.DEFAULT
        self._loaded: tokens.Counter | None = None

    @property
    def _counter(self) -> tokens.Counter:
        if self._loaded is None:
            self._loaded = tokens.counter(self.name)
        return self._loaded

    @property
    def exact(self) -> bool:
        return self._counter.exact

    @property
    def note(self) -> str:
        return self._counter.note

    def count(self, messages: list[dict[str, str]], item: Item | None = None) -> int:
        """The prompt tokens of `messages`; when they are `item`'s prompt as the question worker
        rendered it (the very string) and it counted that with this tokenizer, its count."""
        made = made_ahead(item) if item is not None else None
        if made is not None and made.prompted is not None and len(messages) == 1 \
                and messages[0]["content"] is made.prompted.text:
            counted = made.prompted.tokens.get(self.name)
            if counted is not None:
                return counted + PER_MESSAGE + PER_PROMPT
        return sum(self._counter.count(m["content"]) + PER_MESSAGE for m in messages) + PER_PROMPT


# ---- summaries ---------------------------------------------------------------------------


class UsageTotal(NamedTuple):
    model: str
    answered: int
    errors: int
    cache_hits: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cached_tokens: int
    cost: float | None  # USD, an estimate; None when the model has no price


def record_cost(record: Record | SlimRecord, price: Price) -> float:
    """What one answer cost by its reported usage (half for an answer from a batch); an
    error costs nothing."""
    usage = record.usage
    if record.error is not None or usage is None:
        return 0.0
    spent = cost(price, usage.input_tokens or 0, usage.output_tokens or 0, usage.cached_tokens or 0)
    return spent * (BATCH_DISCOUNT if record.extra.get("batch") else 1.0)


def tally_cost(tally: Tally, price: Price) -> float:
    """What a tally's answers cost by their reported usage, as record_cost sums it."""
    def at(spent: Spent) -> float:
        return cost(price, spent.fresh + spent.cached, spent.output, spent.cached)
    return at(tally.spent) + BATCH_DISCOUNT * at(tally.spent_batched)


def usage_totals(found: Iterable[Tally], table: dict[str, Price],
                 model_ids: dict[str, str]) -> list[UsageTotal]:
    """Token and cost totals per model over tallies of the latest record of each question."""
    sums: dict[str, list[int]] = {}
    costs: dict[str, float] = {}
    for tally in found:
        row = sums.setdefault(tally.model, [0] * 7)
        counts = (tally.answered, tally.error_count, tally.cache_hits, tally.input_tokens,
                  tally.output_tokens, tally.reasoning_tokens, tally.cached_tokens)
        for index, value in enumerate(counts):
            row[index] += value
        price = price_for(model_ids.get(tally.model, tally.model), table)
        if price is not None:
            costs[tally.model] = costs.get(tally.model, 0.0) + tally_cost(tally, price)
    totals = []
    for model, (answered, errors, hits, inp, outp, reasoning, cached) in sums.items():
        estimate = costs.get(model, 0.0) if price_for(model_ids.get(model, model), table) else None
        totals.append(UsageTotal(model, answered, errors, hits, inp, outp, reasoning, cached, estimate))
    return totals


class DryRunRow(NamedTuple):
    model: str
    questions: int
    prompt_tokens: int
    counted_by: str
    output_tokens_assumed: int
    cost: float | None


ASSUMED_OUTPUT_TOKENS = 50  # a list of a few numbers; reasoning models spend far more


def dry_run_row(name: str, provider: str, model: str, prompts: Iterable[list[dict[str, str]]],
                table: dict[str, Price]) -> DryRunRow:
    counter = TokenCounter(provider, model)
    questions = tokens = 0
    for messages in prompts:
        questions += 1
        tokens += counter.count(messages)
    output = questions * ASSUMED_OUTPUT_TOKENS
    price = price_for(model or name, table)
    estimate = cost(price, tokens, output) if price is not None else None
    return DryRunRow(name, questions, tokens, counter.note, output, estimate)


def format_cost(value: float | None) -> str:
    if value is None:
        return "no price"
    return f"~${value:.4f}" if value < 1 else f"~${value:,.2f}"


def tokens_per_request(messages: list[dict[str, str]], max_tokens: int | None) -> int:
    """A cheap token estimate for --tpm pacing: the prompt plus the answer's allowance."""
    return sum(math.ceil(len(m["content"]) / 3) for m in messages) + (max_tokens or 0)


def model_id(name: str, options: dict[str, Any]) -> tuple[str, str]:
    """(provider, model id) of a model name, for prices; the name itself when it does not resolve."""
    try:
        return registry.canonical(name, options)
    except QmkarError:
        return name, name


def dry_run(models: list[str], options: dict[str, Any], prompts: Callable[[], Iterable[list[dict[str, str]]]],
            table: dict[str, Price], batch: bool = False, samples: int = 1) -> list[str]:
    """What a run would send, per model, as lines to print; builds no client and sends nothing.
    Each question is asked `samples` times; with `batch`, each line gives the batch price too."""
    for name in models:
        registry.canonical(name, options)  # an unknown name is an error here too
    lines = [f"dry run: nothing sent. Costs are estimates from prices dated {PRICES_DATE}, assuming "
             f"{ASSUMED_OUTPUT_TOKENS} output tokens per question (reasoning models spend more)."]
    for name in models:
        provider, model = model_id(name, options)
        row = dry_run_row(name, provider, model, prompts(), table)
        cost = None if row.cost is None else row.cost * samples
        asked = f"{row.questions * samples} questions" + (f" ({row.questions} x {samples} samples)"
                                                          if samples > 1 else "")
        line = (f"{row.model}: {asked}, {row.prompt_tokens * samples:,} prompt tokens "
                f"({row.counted_by}), estimated cost {format_cost(cost)}")
        if batch and cost is not None:
            line += f"; as a batch {format_cost(cost * BATCH_DISCOUNT)}"
        lines.append(line)
    return lines


def usage_lines(found: list[Tally], options: dict[str, Any], table: dict[str, Price],
                rate_limited: dict[str, int]) -> list[str]:
    """One line per model that reported tokens: tokens in and out, cost, cache hits, 429s."""
    ids = {tally.model: model_id(tally.model, options)[1] for tally in found}
    batched: dict[str, int] = {}
    for tally in found:
        batched[tally.model] = batched.get(tally.model, 0) + tally.batched
    lines = []
    for total in usage_totals(found, table, ids):
        if not (total.input_tokens or total.output_tokens):
            continue
        parts = [f"{total.input_tokens:,} in", f"{total.output_tokens:,} out"]
        if total.reasoning_tokens:
            parts.append(f"{total.reasoning_tokens:,} reasoning")
        if total.cached_tokens:
            parts.append(f"{total.cached_tokens:,} cached")
        note = f", {total.cache_hits} from the response cache" if total.cache_hits else ""
        if batched.get(total.model):
            note += f", {batched[total.model]} from batches at {100 * (1 - BATCH_DISCOUNT):g}% off"
        if rate_limited.get(total.model):
            note += f", {rate_limited[total.model]} rate-limit (429) replies this run"
        lines.append(f"usage {total.model}: {', '.join(parts)} tokens; cost {format_cost(total.cost)} "
                     f"(estimate, prices of {PRICES_DATE}){note}")
    return lines


"""--max-cost: the most a run may cost, kept to before anything is sent or submitted.

A run's cost is what the transcript's answers under the run's conditions cost (their
reported usage at the price table's prices; answers from the response cache are free,
answers from a batch half price) plus an estimate of every request in flight (its prompt
tokens and its whole --max-tokens allowance, so the estimate is rarely short). Before a
request is sent, or a batch submitted, its estimate is reserved; one that would take the
total past the ceiling is not sent. When its answer comes, the reservation gives way to
what it really cost. Reruns into the same transcript count what earlier ones spent.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from qmkar.errors import UsageError
from qmkar.pricing import BATCH_DISCOUNT, Price, TokenCounter, cost, format_cost, price_for, record_cost
from qmkar.providers.base import ModelRequest, ModelResponse, Provider
from qmkar.shapes import SlimUsage
from qmkar.slim import SlimRecord
from qmkar.tasks.base import Item
from qmkar.transcript import Record


class Ceiling:
    """The whole run's ceiling in USD, shared by every model of the run."""

    def __init__(self, limit: float, prices: dict[str, Price | None],
                 counters: dict[str, TokenCounter] | None = None) -> None:
        self.limit = limit
        self.prices = prices  # model name -> its price; None: answered on this machine, free
        self.counters = counters or {}
        self.spent = 0.0
        self.in_flight = 0.0
        self.earlier = 0.0  # of `spent`, what the transcript's answers cost before this run

    @classmethod
    def for_providers(cls, limit: float, providers: Iterable[Provider], table: dict[str, Price]) -> Ceiling:
        """The ceiling for these models; a hosted model without a price is a mistake to fix
        before anything is sent."""
        prices: dict[str, Price | None] = {}
        counters = {}
        for provider in providers:
            prefix, endpoint, model = provider.identity()
            if endpoint is None:
                prices[provider.name] = None
                continue
            price = price_for(model, table)
            if price is None:
                raise UsageError(f"--max-cost needs the price of {provider.name}, and the price table has "
                                 f"none; give it in a prices file (--prices FILE with [prices.\"{model}\"] "
                                 "input = ... and output = ..., USD per million tokens)")
            prices[provider.name] = price
            counters[provider.name] = TokenCounter(prefix, model)
        return cls(limit, prices, counters)

    def count(self, records: Iterable[Record | SlimRecord]) -> None:
        """What earlier answers under this run's conditions cost (cache hits free); counted
        again (the transcript read again), the new sum replaces the old."""
        earlier = 0.0
        for record in records:
            price = self.prices.get(record.model)
            if price is not None and record.extra.get("cache") != "hit":
                earlier += record_cost(record, price)
        self.spent += earlier - self.earlier
        self.earlier = earlier

    def estimate(self, model: str, request: ModelRequest, batch: bool = False,
                 item: Item | None = None) -> float:
        """What a request may cost at most: its prompt and its whole answer allowance. Given the
        request's item, the prompt's tokens may have been counted by the question worker."""
        price = self.prices.get(model)
        if price is None:
            return 0.0
        counter = self.counters.get(model) or TokenCounter("", model)
        allowance = int(request.settings.get("max_tokens") or 0)
        prompt = counter.count(request.messages, item)
        return cost(price, prompt, allowance) * (BATCH_DISCOUNT if batch else 1.0)

    def tokenizers(self, model: str) -> tuple[str, ...]:
        """The tokenizer `model`'s estimates count with (none for a free model: it has no
        counter), for the question worker to count with too."""
        counter = self.counters.get(model)
        return (counter.name,) if counter is not None else ()

    def hold(self, amount: float) -> None:
        """Count `amount` as in flight whatever the ceiling says (a batch already submitted)."""
        self.in_flight += amount

    def reserve(self, amount: float) -> bool:
        """Hold `amount` for a request about to go; False (nothing held) when it would pass
        the ceiling."""
        if self.spent + self.in_flight + amount > self.limit + 1e-12:
            return False
        self.in_flight += amount
        return True

    def settle(self, reserved: float, spent: float) -> None:
        """A request came back: its reservation gives way to what it cost."""
        self.in_flight = max(0.0, self.in_flight - reserved)
        self.spent += spent

    def answer_cost(self, model: str, response: ModelResponse | None, reserved: float, *,
                    batch: bool = False, error_kind: str | None = None) -> float:
        """What an outcome cost: its usage; nothing for an error, except a timeout, which the
        provider may have billed (its estimate then); the estimate when usage is unknown."""
        price = self.prices.get(model)
        if price is None:
            return 0.0
        if response is None:
            return reserved if error_kind == "timeout" else 0.0
        usage = response.usage
        if usage is None or usage.input_tokens is None:
            return reserved
        spent = cost(price, usage.input_tokens, usage.output_tokens or 0, usage.cached_tokens or 0)
        return spent * (BATCH_DISCOUNT if batch else 1.0)

    def why(self, model: str, amount: float) -> str:
        """The reason a model stopped, and how to go on."""
        return (f"--max-cost ${self.limit:g} reached: this run's answers cost {format_cost(self.spent)}, "
                f"{format_cost(self.in_flight)} is in flight, and the next request of {model} "
                f"(up to {format_cost(amount)}) would pass it. Every answer so far is kept; to continue, "
                "run the same command again with a higher --max-cost")


class Paid:
    """The tokens earlier answers were paid for, summed per model, condition and batch (cache
    hits and errors cost nothing): what a rerun's --max-cost counts as already spent."""

    def __init__(self) -> None:
        self.sums: dict[tuple[str, str, bool], list[int]] = {}
        self.first: dict[tuple[str, str, bool], SlimRecord] = {}

    def add(self, record: SlimRecord) -> None:
        usage = record.usage
        if record.error is not None or usage is None or record.extra.get("cache") == "hit":
            return
        key = (record.model, record.condition_id, bool(record.extra.get("batch")))
        cached = usage.cached_tokens or 0
        sums = self.sums.setdefault(key, [0, 0, 0])
        sums[0] += max(0, (usage.input_tokens or 0) - cached)
        sums[1] += cached
        sums[2] += usage.output_tokens or 0
        self.first.setdefault(key, record)

    def of(self, conditions: set[str]) -> list[SlimRecord]:
        """One record per sum under these conditions, its usage the sum (a cost is linear in
        tokens once each answer's cached tokens are taken out of its prompt tokens)."""
        return [msgspec.structs.replace(self.first[key], usage=SlimUsage(fresh + cached, output, None,
                                                                         cached))
                for key, (fresh, cached, output) in self.sums.items() if key[1] in conditions]

"""Simulated models: associative memories that read the prompt and answer as text.

`sim:MEMORY?option=value&...` (for example `sim:delta?d=256&beta=1`). The provider
reads the rendered prompt (never the item's answer; sim_prompt.py), writes the pairs into
the memory in context order, reads it with the query key and decodes every candidate
value; see docs/theory.md for the model and sim_memory.py for the update rules.

Recall questions are answered in batches: the questions the runner has in flight at once
(up to --concurrency; without it, defaults.SIM_CONCURRENCY) wait for one another, then each
is read through its own memory and all their read-outs are decoded with one product of the
shared value codebook (built once and kept, like the key codebooks). Decoding is where a
question's time went: every candidate value (9,000 of them at qmkar's defaults) is scored,
so a batch reads the codebook once instead of once per question. An answer never depends on
its batch. The products are done on one BLAS thread (`one_blas_thread`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController

from qmkar.defaults import SIM_CONCURRENCY
from qmkar.errors import ProviderCallError, ProviderError, UsageError
from qmkar.providers import sim_memory, sim_tasks
from qmkar.providers.base import Identity, ModelRequest, ModelResponse, Provider
from qmkar.providers.sim_memory import MEMORIES, KeyMix, MemoryOptions
from qmkar.providers.sim_prompt import Prompt, read_prompts
from qmkar.providers.sim_prompt import read_prompt as read_prompt  # SimModel.answer takes what it reads
from qmkar.tasks import family
from qmkar.tasks.base import IntRange, Item, parse_range


class Option(NamedTuple):
    """One sim option: its type, its default, what it means, which memories take it."""

    kind: type
    default: Any
    help: str
    memories: tuple[str, ...] = MEMORIES
    memory_defaults: tuple[tuple[str, Any], ...] = ()  # (memory, default) where it differs

    def default_for(self, memory: str) -> Any:
        return dict(self.memory_defaults).get(memory, self.default)


# The simulated models' options and their defaults: the one place either is written.
OPTIONS: dict[str, Option] = {
    "d": Option(int, 256, "vector dimension"),
    "seed": Option(int, 0, "seed of the key and value codebooks"),
    "threshold": Option(float, 0.5, "answer every candidate scoring at least this x the best"),
    "near": Option(float, 0.2, "share of a key vector given to closeness (keys within ~2)"),
    "digits": Option(float, 0.2, "share of a key vector given to its digits"),
    "values": Option(str, "", "candidate value range LOW..HIGH [the context's smallest..largest]"),
    "temperature": Option(float, 0.05, "softmax temperature", ("softmax", "window", "hybrid")),
    "decay": Option(float, 0.99, "decay per write (gla, gated-delta; hybrid's linear layers default 1)",
                    ("gla", "gated-delta", "hybrid"), (("hybrid", 1.0),)),
    "beta": Option(float, 1.0, "delta-rule write strength", ("delta", "gated-delta")),
    "w": Option(int, 64, "pairs the window sees (the last w)", ("window",)),
    "layers": Option(int, 7, "linear layers beside the one softmax layer", ("hybrid",)),
}
ALIASES = {"thr": "threshold", "temp": "temperature", "window": "w"}
# The options that shape a memory's update and read, by their MemoryOptions field name.
MEMORY_FIELDS = {"temperature": "temperature", "decay": "decay", "beta": "beta", "w": "window",
                 "layers": "layers"}


class SimConfig(NamedTuple):
    """A simulated model's memory and every option, resolved."""

    memory: str
    options: dict[str, Any]

    @property
    def canonical_name(self) -> str:
        shown = "&".join(f"{k}={v}" for k, v in self.options.items() if v != "")
        return f"sim:{self.memory}?{shown}"


def _convert(memory: str, name: str, text: str, option: Option) -> Any:
    if option.kind is str:
        return text
    wanted = "a whole number" if option.kind is int else "a finite number"
    try:
        value = option.kind(text)
    except ValueError:
        raise ProviderError(f"sim:{memory}: option {name}={text!r} must be {wanted}") from None
    if not math.isfinite(value):
        raise ProviderError(f"sim:{memory}: option {name}={text!r} must be {wanted}")
    return value


def _check(memory: str, options: dict[str, Any]) -> None:
    def bad(message: str) -> None:
        raise ProviderError(f"sim:{memory}: {message}")

    if not 1 <= options["d"] <= 4096:
        bad(f"d must be between 1 and 4096, not {options['d']}")
    if not 0 < options["threshold"] <= 1:
        bad(f"threshold must be in (0, 1], not {options['threshold']}")
    if options["near"] < 0 or options["digits"] < 0 or options["near"] + options["digits"] >= 1:
        bad("near and digits must be >= 0 and sum to less than 1 (the rest is each key's own part)")
    if options["seed"] < 0:
        bad(f"seed must be a whole number >= 0, not {options['seed']}")
    if options["values"]:
        try:
            span = parse_range(options["values"], "values")
        except UsageError as exc:
            bad(str(exc))
        if span.size * options["d"] > MAX_TABLE_FLOATS:
            bad(f"values={options['values']} holds {span.size:,} candidate values, more than sim keeps "
                f"at d={options['d']} ({MAX_TABLE_FLOATS // options['d']:,}); use a narrower range or d")
    if "temperature" in options and options["temperature"] <= 0:
        bad(f"temperature must be positive, not {options['temperature']}")
    if "decay" in options and not 0 < options["decay"] <= 1:
        bad(f"decay must be in (0, 1], not {options['decay']}")
    if "beta" in options and not 0 < options["beta"] <= 2:
        bad(f"beta must be in (0, 2] (larger makes the delta rule diverge), not {options['beta']}")
    if "w" in options and options["w"] < 1:
        bad(f"w must be at least 1, not {options['w']}")
    if "layers" in options and not 0 <= options["layers"] <= 64:
        bad(f"layers must be between 0 and 64, not {options['layers']}")


def parse_name(model: str, extra: dict[str, Any] | None = None) -> SimConfig:
    """'delta?d=256&beta=1' -> SimConfig; raise ProviderError naming what is wrong."""
    memory, _, query = model.partition("?")
    memory = memory.strip()
    if memory not in MEMORIES:
        raise ProviderError(
            f"unknown simulated memory {memory!r}; write sim:MEMORY with MEMORY one of: "
            f"{', '.join(MEMORIES)} (e.g. sim:delta?d=256)"
        )
    accepted = {name: opt for name, opt in OPTIONS.items() if memory in opt.memories}
    resolved = {name: opt.default_for(memory) for name, opt in accepted.items()}
    given: list[tuple[str, str]] = []
    for part in filter(None, query.split("&")):
        name, sep, text = part.partition("=")
        if not sep or not text.strip():
            raise ProviderError(f"sim:{memory}: option {part!r} must look like name=value")
        given.append((name.strip(), text.strip()))
    given += [(str(k), str(v)) for k, v in (extra or {}).items()]
    for name, text in given:
        name = ALIASES.get(name, name)
        if name not in accepted:
            raise ProviderError(
                f"sim:{memory} has no option {name!r}; it accepts: {', '.join(accepted)} "
                "(docs/theory.md describes them)"
            )
        resolved[name] = _convert(memory, name, text, accepted[name])
    _check(memory, resolved)
    return SimConfig(memory, resolved)


# --- answering ---------------------------------------------------------------------


# A codebook holds a vector for every number up to the largest it must know; a question
# that would need more floats than this (256 MB) in one codebook fails before any is built.
MAX_TABLE_FLOATS = 2**26


class Answer(NamedTuple):
    text: str
    details: dict[str, Any]


class _Recall(NamedTuple):
    """A recall prompt read through the memory: its read-outs, where its candidates are."""

    readouts: np.ndarray
    page: sim_memory.ValuePage
    span: IntRange


class SimModel:
    """One configured memory: prompt -> answer text. Pure and deterministic."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        o = config.options
        self.d, self.seed = o["d"], o["seed"]
        self.mix = KeyMix(near=o["near"], digits=o["digits"])
        # Every option this memory takes was resolved from OPTIONS; the fields it does not
        # take keep MemoryOptions' neutral values, which its update rule never reads.
        self.memory_options = MemoryOptions(
            **{field: o[name] for name, field in MEMORY_FIELDS.items() if name in o}
        )
        self.layers = 1 + self.memory_options.layers  # key codebooks: one, plus hybrid's linear layers

    def _fits(self, rows: int, what: str) -> None:
        if rows * self.d > MAX_TABLE_FLOATS:
            raise ProviderCallError(
                f"sim would need a vector for each of {rows:,} {what} at d={self.d}, more than "
                f"it allows ({MAX_TABLE_FLOATS // self.d:,} at this d); use smaller numbers or d",
                kind="too_large", fatal=True)

    def _read(self, keys: Sequence[int] | np.ndarray, values: np.ndarray, queries: list[int]) -> np.ndarray:
        keys = np.asarray(keys)
        top = max(int(keys.max()), max(queries))
        tables = [sim_memory.key_table(self.seed, self.d, self.mix, top, layer)
                  for layer in range(self.layers)]
        if self.config.memory in sim_memory.DELTA_RULES:
            return sim_memory.read(self.config.memory, [np.take(table, keys, axis=0) for table in tables],
                                   [table[queries] for table in tables], values, self.memory_options)
        # The other memories need only each query's similarity to each key: from the whole
        # codebook when it has fewer rows than the context has keys to gather.
        if len(tables[0]) <= 2 * len(keys):
            similarities = [(table[queries] @ table.T)[:, keys] for table in tables]
        else:
            similarities = [table[queries] @ table[keys].T for table in tables]
        return sim_memory.read_weighted(self.config.memory, similarities, values, self.memory_options)

    def answer(self, task: str, prompt: Prompt) -> Answer:
        """The answer to a prompt read by read_prompt: a count for a list, values for pairs."""
        answer = self.answer_many([prompt])[0]
        if isinstance(answer, ProviderCallError):
            raise answer
        return answer

    def answer_many(self, prompts: list[Prompt]) -> list[Answer | ProviderCallError]:
        """The answer to each prompt (or why it has none). The recall read-outs of all of
        them are decoded together: one product per value table instead of one per prompt."""
        results: list[Answer | ProviderCallError] = []
        recalls: dict[int, _Recall] = {}  # position in results -> its read-outs, to decode
        for prompt in prompts:
            try:
                if prompt.values:
                    results.append(self._count(prompt))
                else:
                    recalls[len(results)] = self._recall(prompt)
                    results.append(Answer("", {}))
            except ProviderCallError as exc:
                results.append(exc)
        by_page: dict[int, list[tuple[int, _Recall]]] = {}
        for position, recall in recalls.items():
            by_page.setdefault(id(recall.page.table), []).append((position, recall))
        for group in by_page.values():
            page = group[0][1].page
            spans = [(r.span.low - page.first, r.span.high + 1 - page.first)
                     for _, r in group for _ in r.readouts]
            decoded = iter(sim_memory.decode_many(
                np.concatenate([r.readouts for _, r in group]), page.table, spans,
                [low + page.first for low, _ in spans], self.config.options["threshold"], page.columns))
            for position, recall in group:
                answered: list[int] = []
                best = []
                for one in itertools.islice(decoded, len(recall.readouts)):
                    answered += [v for v in one.values if v not in answered]
                    best.append(round(one.best, 4))
                text = ", ".join(str(v) for v in answered) if answered else "none"
                results[position] = Answer(text, {"candidates": str(recall.span), "best_score": best})
        return results

    def _value_range(self, low: int, high: int) -> IntRange:
        if self.config.options["values"]:
            return parse_range(self.config.options["values"], "values")
        return IntRange(low, high)

    def _recall(self, prompt: Prompt) -> _Recall:
        keys, written = prompt.keys, prompt.written
        low, high = int(written.min()), int(written.max())
        span = self._value_range(low, high)
        # Every check comes before the first codebook is built: a question the model cannot
        # answer fails at once, not after hundreds of megabytes of vectors.
        if low < span.low or high > span.high:
            raise ProviderCallError(
                f"sim option values={span} does not hold every value in the context "
                f"({low}..{high})", kind="bad_option", fatal=True)
        self._fits(span.size, f"candidate values {span}")
        self._fits(max(int(keys.max()), max(prompt.query)) + 1, "keys 0..largest key")
        page = sim_memory.value_page(self.seed, self.d, span.low, span.high)
        values = np.take(page.table, written - page.first, axis=0)  # a copy as [] makes, sooner
        readouts = self._read(keys, values, prompt.query)
        return _Recall(readouts, page, span)

    def _count(self, prompt: Prompt) -> Answer:
        # Every element writes its number's key with the same "one more" value; the count
        # is the read-out's projection on that value, in units of what a context holding
        # the queried number once reads as.
        self._fits(max(prompt.values + prompt.query) + 1, "keys 0..largest key")
        unit = sim_memory.unit_value(self.seed, self.d)
        values = np.tile(unit, (len(prompt.values), 1))
        readout = self._read(prompt.values, values, prompt.query)[0]
        once = self._read(prompt.query, unit[None, :], prompt.query)[0]
        raw = float(readout @ unit) / float(once @ unit)
        count = max(0, int(np.floor(raw + 0.5)))
        return Answer(str(count), {"raw_count": round(raw, 4)})


# The most questions one batch answers: the runner's --concurrency bounds it first.
MAX_BATCH = 256


@functools.cache
def _blas() -> ThreadpoolController:
    """The BLAS libraries numpy loaded (found once: it reads the process's loaded libraries)."""
    return ThreadpoolController()


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Do a sim's products on one BLAS thread, then give BLAS back its threads.

    A sim's products are small (a block of 64 writes, one question's keys), and a BLAS that
    splits each across threads spends more CPU handing them out than it saves. On a 2-core
    machine a whole `qmkar eval` of three sims took as long with BLAS's own threads, with 1.4x
    the CPU time, and 1.76x as long beside another busy process (docs/performance.md, the
    twenty-seventh pass).
    """
    with _blas().limit(limits=1, user_api="blas"):
        yield


class SimProvider(Provider):
    """A Provider around one SimModel, answering the questions in flight together.

    The runner asks one question per task, up to --concurrency at once (SIM_CONCURRENCY
    unless given: larger batches share the decoding more widely). A recall question
    waits while the event loop lets the other questions in flight arrive: the batch is
    answered as soon as one pass of the loop brings no new question, or when it holds
    MAX_BATCH. Its prompts are read together (sim_prompt.read_prompts; one the sim cannot
    read fails alone), each question's memory is read alone, and the batch shares the
    decoding, one product of the value table with every read-out. Answers do not depend on
    the batch (sim_memory.decode_many decides on exact scores), so --concurrency changes
    only the speed.
    """

    default_concurrency = SIM_CONCURRENCY

    def __init__(self, config: SimConfig) -> None:
        self.name = config.canonical_name
        self.canonical_name = config.canonical_name  # every response's model (the registry may rename self)
        self.config = config
        self.model = SimModel(config)
        self.waiting: list[tuple[str, str, asyncio.Future[Answer]]] = []  # task, prompt text, answer
        self.batch_sizes: collections.Counter[int] = collections.Counter()  # size -> batches answered

    def identity(self) -> Identity:
        # Every option spelled out, so sim:delta and sim:delta?d=256 are one model.
        return Identity("sim", None, self.config.canonical_name.removeprefix("sim:"))

    async def generate(self, item: Item, request: ModelRequest) -> ModelResponse:
        text = "\n".join(m["content"] for m in request.messages if m.get("role") == "user")
        if family(item.task).sim_reads in sim_tasks.READERS:
            with one_blas_thread():
                answer = sim_tasks.answer(self.model, item.task, text)
        else:
            answer = await self._in_batch(item.task, text)
        return ModelResponse(
            text=answer.text,
            model=self.canonical_name,
            extra={"memory": self.config.memory, "options": self.config.options, **answer.details},
        )

    def _in_batch(self, task: str, text: str) -> asyncio.Future[Answer]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()
        self.waiting.append((task, text, future))
        if len(self.waiting) >= MAX_BATCH:
            self._answer_waiting()
        elif len(self.waiting) == 1:
            loop.call_soon(self._when_settled, 0)
        return future

    def _when_settled(self, seen: int) -> None:
        """Answer the waiting questions once a pass of the event loop added none."""
        if len(self.waiting) > seen:
            asyncio.get_running_loop().call_soon(self._when_settled, len(self.waiting))
        elif self.waiting:
            self._answer_waiting()

    def _answer_waiting(self) -> None:
        batch, self.waiting = self.waiting, []
        self.batch_sizes[len(batch)] += 1
        answers: list[Answer | Exception]
        try:
            with one_blas_thread():
                answers = self._answer([(task, text) for task, text, _ in batch])
        except Exception as exc:  # a bug: every question of the batch fails with its traceback
            answers = [exc] * len(batch)
        for (_, _, future), answer in zip(batch, answers, strict=True):
            if future.done():  # cancelled: timed out, or the run stopped
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    def _answer(self, asked: list[tuple[str, str]]) -> list[Answer | Exception]:
        """The answer to each (task, prompt text), or why it has none."""
        answers: list[Answer | Exception] = [Answer("", {})] * len(asked)
        by_task: dict[str, list[int]] = {}
        for position, (task, _) in enumerate(asked):
            by_task.setdefault(task, []).append(position)
        readable: dict[int, Prompt] = {}
        for task, positions in by_task.items():
            for position, prompt in zip(positions, read_prompts(task, [asked[p][1] for p in positions]),
                                        strict=True):
                if isinstance(prompt, Prompt):
                    readable[position] = prompt
                else:
                    answers[position] = prompt
        for position, answer in zip(readable, self.model.answer_many(list(readable.values())), strict=True):
            answers[position] = answer
        return answers


def create(model: str, options: dict[str, Any]) -> SimProvider:
    if not model:
        raise ProviderError(f"write sim:MEMORY with MEMORY one of: {', '.join(MEMORIES)} (e.g. sim:delta)")
    return SimProvider(parse_name(model, options))

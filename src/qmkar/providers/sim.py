"""Simulated models: associative memories that read the prompt and answer as text.

`sim:MEMORY?option=value&...` (for example `sim:delta?d=256&beta=1`). The provider
reads the rendered prompt (never the item's answer), writes the pairs into the memory
in context order, reads it with the query key and decodes every candidate value; see
docs/theory.md for the model and sim_memory.py for the update rules.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

import numpy as np

from qmkar.errors import ProviderCallError, ProviderError, UsageError
from qmkar.providers import sim_memory, sim_tasks
from qmkar.providers.base import Identity, ModelRequest, ModelResponse, Provider
from qmkar.providers.sim_memory import MEMORIES, KeyMix, MemoryOptions
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


# --- reading the prompt ------------------------------------------------------------

PAIR = re.compile(r"\bk\s*:\s*(\d+)\s*,\s*v\s*:\s*(\d+)")
NUMBER = re.compile(r"\d+")
NUMBER_LIST = re.compile(r"\d+(?:[ \t]*,[ \t]*\d+)+")


class Prompt(NamedTuple):
    """What a simulated model reads from a prompt."""

    pairs: list[tuple[int, int]]  # recall: (key, value) in context order
    values: list[int]  # counting: the list
    query: list[int]  # queried key(s), or [the counted value]


def _outside(text: str, spans: list[tuple[int, int]]) -> list[int]:
    """The numbers of `text` outside the given spans."""
    kept, last = [], 0
    for start, end in spans:
        kept.append(text[last:start])
        last = end
    kept.append(text[last:])
    return [int(n) for n in NUMBER.findall(" ".join(kept))]


def read_prompt(task: str, text: str) -> Prompt:
    """Pairs (or the list) and the query from a prompt written like prompts/<task>.txt.

    The task's family says how its prompts read (`sim_reads`): pairs and queried keys
    (one key when each question has targets, several when it has queries), or a list
    and the value to count."""
    reads = family(task).sim_reads
    one_key = family(task).width_name == "targets"
    layout = {
        "pairs": "pairs written 'k: K, v: V', and the queried key"
                 + (" as the only other number" if one_key else "s as the only other numbers"),
        "list": "the values as one comma-separated list, and the counted value as the only other number",
    }

    def unreadable(why: str) -> ProviderCallError:
        return ProviderCallError(
            f"sim cannot read this {task} prompt: {why}. It reads prompts laid out like the "
            f"built-in template prompts/{task}.txt ({layout.get(reads or '', '')})",
            kind="unreadable_prompt",
            fatal=True,  # every prompt of the run shares the template, so stop at once
        )

    if reads == "pairs":
        matches = list(PAIR.finditer(text))
        if not matches:
            raise unreadable("it holds no 'k: K, v: V' pairs")
        query = _outside(text, [m.span() for m in matches])
        if not query or (one_key and len(query) != 1):
            raise unreadable(f"outside the pairs it holds {len(query)} numbers, not the queried key"
                             + ("" if one_key else "s"))
        return Prompt([(int(m[1]), int(m[2])) for m in matches], [], query)
    if reads == "list":
        lists = list(NUMBER_LIST.finditer(text))
        if not lists:
            raise unreadable("it holds no comma-separated list of numbers")
        longest = max(lists, key=lambda m: m.end() - m.start())
        query = _outside(text, [longest.span()])
        if len(query) != 1:
            raise unreadable(f"outside the list it holds {len(query)} numbers, not the one value to count")
        return Prompt([], [int(n) for n in NUMBER.findall(longest[0])], query)
    raise ProviderCallError(f"sim has no reader for task {task!r}", kind="unreadable_prompt")


# --- answering ---------------------------------------------------------------------


# A codebook holds a vector for every number up to the largest it must know; a question
# that would need more floats than this (256 MB) in one codebook fails before any is built.
MAX_TABLE_FLOATS = 2**26


class Answer(NamedTuple):
    text: str
    details: dict[str, Any]


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

    def _keys(self, numbers: list[int], top: int) -> list[np.ndarray]:
        index = np.asarray(numbers)
        return [sim_memory.key_table(self.seed, self.d, self.mix, top, layer)[index]
                for layer in range(self.layers)]

    def _read(self, keys: list[int], values: np.ndarray, queries: list[int]) -> np.ndarray:
        top = max(max(keys), max(queries))
        return sim_memory.read(self.config.memory, self._keys(keys, top), self._keys(queries, top),
                               values, self.memory_options)

    def answer(self, task: str, prompt: Prompt) -> Answer:
        """The answer to a prompt read by read_prompt: a count for a list, values for pairs."""
        if prompt.values:
            return self._count(prompt)
        return self._recall(prompt)

    def _value_range(self, values: list[int]) -> IntRange:
        if self.config.options["values"]:
            return parse_range(self.config.options["values"], "values")
        return IntRange(min(values), max(values))

    def _recall(self, prompt: Prompt) -> Answer:
        keys = [k for k, _ in prompt.pairs]
        written = [v for _, v in prompt.pairs]
        span = self._value_range(written)
        # Every check comes before the first codebook is built: a question the model cannot
        # answer fails at once, not after hundreds of megabytes of vectors.
        if min(written) < span.low or max(written) > span.high:
            raise ProviderCallError(
                f"sim option values={span} does not hold every value in the context "
                f"({min(written)}..{max(written)})", kind="bad_option", fatal=True)
        self._fits(span.size, f"candidate values {span}")
        self._fits(max(keys + prompt.query) + 1, "keys 0..largest key")
        table = sim_memory.value_table(self.seed, self.d, span.low, span.high)
        values = table[np.asarray(written) - span.low]
        readouts = self._read(keys, values, prompt.query)
        answered: list[int] = []
        best = []
        for readout in readouts:
            decoded = sim_memory.decode(readout, table, span.low, self.config.options["threshold"])
            answered += [v for v in decoded.values if v not in answered]
            best.append(round(decoded.best, 4))
        text = ", ".join(str(v) for v in answered) if answered else "none"
        return Answer(text, {"candidates": str(span), "best_score": best})

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


class SimProvider(Provider):
    """A Provider around one SimModel."""

    def __init__(self, config: SimConfig) -> None:
        self.name = config.canonical_name
        self.config = config
        self.model = SimModel(config)

    def identity(self) -> Identity:
        # Every option spelled out, so sim:delta and sim:delta?d=256 are one model.
        return Identity("sim", None, self.config.canonical_name.removeprefix("sim:"))

    async def generate(self, item: Item, request: ModelRequest) -> ModelResponse:
        text = "\n".join(m["content"] for m in request.messages if m.get("role") == "user")
        if family(item.task).sim_reads in sim_tasks.READERS:
            answer = sim_tasks.answer(self.model, item.task, text)
        else:
            answer = self.model.answer(item.task, read_prompt(item.task, text))
        return ModelResponse(
            text=answer.text,
            model=self.config.canonical_name,
            extra={"memory": self.config.memory, "options": self.config.options, **answer.details},
        )


def create(model: str, options: dict[str, Any]) -> SimProvider:
    if not model:
        raise ProviderError(f"write sim:MEMORY with MEMORY one of: {', '.join(MEMORIES)} (e.g. sim:delta)")
    return SimProvider(parse_name(model, options))

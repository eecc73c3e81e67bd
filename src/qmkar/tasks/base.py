"""The records every task family produces: the Item, its typed params, and integer ranges.

An item is one question: the context it asks about, what it queries and the exact
answer. Items are pydantic records so datasets round-trip through JSONL; an item's
`params` is its family's own typed params model (the registry in tasks/__init__.py
says which family reads which task name).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, NamedTuple

import msgspec
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from qmkar.deferred import DeferredModel
from qmkar.errors import UsageError
from qmkar.shapes import int_rows


class IntRange(NamedTuple):
    """An inclusive integer range such as 100..300."""

    low: int
    high: int

    @property
    def size(self) -> int:
        """How many integers the range holds."""
        return self.high - self.low + 1

    def __str__(self) -> str:
        return f"{self.low}..{self.high}"


# The largest number a range may hold: every JSON reader keeps numbers below 2^53 exact.
MAX_NUMBER = 10**15 - 1

# The longest context qmkar builds, in pairs, values or symbols: about 16 million prompt
# tokens of pairs, beyond every model's context window.
MAX_CONTEXT = 2_000_000
# Bytes one unit of context takes in memory (the item, its JSON and its prompt), roughly.
BYTES_PER_UNIT = {"pairs": 160, "values": 48, "symbols": 16}


def check_context(option: str, size: int, unit: str) -> None:
    """Refuse a context too long to build, with what it would take, before anything is made."""
    if size > MAX_CONTEXT:
        needed = size * BYTES_PER_UNIT.get(unit, 64)
        raise UsageError(
            f"{option} {size:,} cannot fit: one question of {size:,} {unit} would take about "
            f"{_bytes(needed)} of memory; qmkar builds contexts of at most {MAX_CONTEXT:,} {unit} "
            "(longer than any model reads)")


def _bytes(count: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if count < 1000:
            return f"{count:,.0f} {unit}"
        count //= 1000
    return f"{count:,} EB"


def parse_range(text: str, option: str) -> IntRange:
    """Read "100..300" or "100-300" (inclusive) into an IntRange; raise UsageError otherwise."""
    cleaned = text.strip()
    for sep in ("..", "-", ":", ","):
        if sep in cleaned:
            low_text, _, high_text = cleaned.partition(sep)
            break
    else:
        raise UsageError(f"{option} must look like LOW..HIGH (for example 100..300), not {text!r}")
    try:
        low, high = int(low_text), int(high_text)
    except ValueError:
        raise UsageError(
            f"{option} must look like LOW..HIGH with whole numbers (for example 100..300), "
            f"not {text!r}"
        ) from None
    if low < 0 or high < low:
        raise UsageError(f"{option} {text!r} is empty or negative: LOW must be >= 0 and <= HIGH")
    if high > MAX_NUMBER:
        raise UsageError(f"{option} {text!r}: numbers must be below 10^15 (every JSON reader keeps "
                         "them exact)")
    return IntRange(low, high)


def option_name(field: str) -> str:
    """The command-line spelling of a params field: key_range -> --key-range."""
    return "--" + field.replace("_", "-")


def from_text(reader: Any) -> BeforeValidator:
    """A validator that reads a string with `reader(text, option)` (the CLI's and a dataset's
    spelling alike); its UsageError becomes a ValueError so pydantic reports the field."""

    def read(value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return reader(value, option_name(info.field_name or "value"))
        except UsageError as exc:
            raise ValueError(str(exc)) from None

    return BeforeValidator(read)


def same_digits(width: int, first: int = 100) -> IntRange:
    """`width` consecutive whole numbers that all have the same number of digits, starting at
    the first power of ten from `first` up with room for them: 100.. while width <= 900,
    1000.. while width <= 9000, and so on (keys that grow with a context keep one digit count,
    so their length is no cue and each costs the same tokens)."""
    low = first
    while width > 9 * low:
        low *= 10
    return IntRange(low, low + width - 1)


# Keys a token-sized item's params carry besides its family's fields: the target
# (--context-tokens), the tokenizer that sized it, and the item's own prompt tokens.
SIZING_EXTRAS = ("context_tokens", "tokenizer", "prompt_tokens")

# A range field: "100..300" in JSON and on the command line, an IntRange in code.
Range = Annotated[IntRange, from_text(parse_range), PlainSerializer(str)]


class TaskParams(DeferredModel):
    """A task family's options: what its generator takes, and what each item records.

    Only the fields that were set are written, in declaration order. A generator sets
    exactly the fields it records (so generated datasets keep their bytes), and an item
    read from a file writes back what it held. A few keys that are not options are kept
    as they were: the blog files' own (num_pairs, num_values, t) and a sweep's cell label.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    KEPT_EXTRAS: ClassVar[frozenset[str]] = frozenset({"num_pairs", "num_values", "t", "cell",
                                                       *SIZING_EXTRAS})

    @model_validator(mode="after")
    def _known_keys_only(self) -> TaskParams:
        unknown = set(self.__pydantic_extra__ or {}) - self.KEPT_EXTRAS
        if unknown:
            raise ValueError(f"unknown params {sorted(unknown)}; this task takes "
                             f"{', '.join(type(self).model_fields)}")
        return self

    # No return annotation on purpose: pydantic would take it as the serialization schema.
    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler):
        data = handler(self)
        kept = self.model_fields_set | set(self.__pydantic_extra__ or {})
        return {name: value for name, value in data.items() if name in kept}

    def extra(self, name: str) -> Any:
        """A kept extra key (cell, num_pairs...), or None."""
        return (self.__pydantic_extra__ or {}).get(name)


# Task name -> its TaskFamily: the registry, filled in tasks/__init__.py (which every import
# of this module runs first), so an Item always finds its family's params type here.
REGISTRY: dict[str, Any] = {}


def params_type(task: str) -> type[TaskParams]:
    """The params model of a task; ValueError naming the known tasks otherwise."""
    found = REGISTRY.get(task)
    if found is None:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(REGISTRY)}")
    return found.params_type


class Item(DeferredModel):
    """One question of a dataset. This is the schema of a dataset JSONL line."""

    id: str = Field(description="Stable identifier: the same task, options and seed give the same id.")
    task: str = Field(
        description="Task family: 'qmkar', 'mqar', 'counting' or a variant task (docs/variants.md)."
    )
    pairs: list[tuple[int, int]] | None = Field(
        default=None, description="Key-value pairs in context order (qmkar, mqar)."
    )
    values: list[int] | None = Field(default=None, description="The list of values (counting).")
    query: list[int] = Field(
        description="Queried key(s) for qmkar/mqar, in question order; [queried value] for counting."
    )
    expected: list[int] = Field(
        description="The exact answer: target values in context order (qmkar), values in the "
        "order of the queried keys (mqar), or [count] (counting)."
    )
    target_positions: list[int] = Field(
        description="Index in the context of each expected value's pair (qmkar, mqar; parallel "
        "to `expected`); indices of the queried value's occurrences (counting)."
    )
    params: SerializeAsAny[TaskParams] = Field(
        default_factory=TaskParams, description="Options that generated it (the family's params)."
    )
    source: str = Field(default="generated", description="'generated' or 'blog:<file>#<problem_id>'.")
    # Optional fields added by later variants (see docs/variants.md). They are left out
    # of the JSON when unset, so datasets of the original tasks stay byte-identical.
    depths: list[float] | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="Depth (0 = start of the context, 1 = end) of each target occurrence, "
        "parallel to `target_positions`; set when --placement chose them. When unset, a "
        "depth is position / (size - 1).",
    )
    text: str | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="The context as symbols, for tasks whose context is not numbers (dyck)."
    )
    # A reader that drops the context to save memory keeps its size here; never written.
    dropped_size: int | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _typed_params(cls, data: Any) -> Any:
        if not isinstance(data, dict) or isinstance(data.get("params"), TaskParams):
            return data
        params = params_type(str(data.get("task"))).model_validate(data.get("params") or {})
        return {**data, "params": params}

    @property
    def size(self) -> int:
        """Number of pairs (or values, or symbols) in the context."""
        if self.dropped_size is not None:
            return self.dropped_size
        if self.pairs is not None:
            return len(self.pairs)
        if self.text is not None:
            return len(self.text)
        return len(self.values or [])

    def target_depths(self) -> list[float]:
        """Depth 0..1 of each target occurrence: recorded, else position / (size - 1)."""
        if self.depths is not None:
            return list(self.depths)
        last = max(self.size - 1, 1)
        return [position / last for position in self.target_positions]

    def pairs_as_written(self) -> tuple[str, int, int] | None:
        """int_pairs_json(self.pairs) where it is already written, as (text, start, end): kept
        when the item was made (TaskFamily.new_item), or within its made-ahead line; None when
        neither was kept. Searching this text reads one block of memory where walking the
        pairs reads each pair's objects (score.value_owners)."""
        kept = self.__dict__.get(WRITTEN_PAIRS)
        if kept is not None:
            return kept.decode(), 0, len(kept)
        made = made_ahead(self)
        if made is not None and made.pairs is not None:
            return made.line, *made.pairs
        return None

    # Text made from the item is kept in its __dict__ beside its fields, under MADE_AHEAD (the
    # question worker's MadeAhead) and WRITTEN_PAIRS (its pairs as new_item wrote them): not
    # fields, so pydantic never validates, writes or compares them. Changing a field, or
    # copying, drops them.
    def __setattr__(self, name: str, value: Any) -> None:
        _drop_made(self)
        super().__setattr__(name, value)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Item:
        copied = super().model_copy(update=update, deep=deep)
        _drop_made(copied)
        return copied


class Outline(NamedTuple):
    """A question known without its context: enough to name its condition and find its answers."""

    id: str
    task: str
    params: TaskParams


def outline_of(item: Item) -> Outline:
    return Outline(item.id, item.task, item.params)


MADE_AHEAD = "made_ahead"


class Prompted(NamedTuple):
    """An item's prompt rendered with the run's template, and its tokens as counted by each
    tokenizer the run's --max-cost ceiling counts with (tokens.py's names)."""

    template: str  # the text of the template it was rendered from
    text: str  # render.render_text(item, template)
    tokens: dict[str, int]  # tokens.counter(name).count(text), by tokenizer name


class MadeAhead(NamedTuple):
    """Text the question worker (ahead.py) makes from an item it generated, so that the run's
    main thread, whose CPU is what limits how fast a run sends, need not make it: the item's
    transcript line (with where its pairs are written in it, for score.value_owners) and its
    prompt's fields, which depend on the item alone, and, when the run told the worker its
    template, the prompt itself and its tokens counted."""

    line: str  # records.ItemLine(item=item).model_dump_json()
    fields: dict[str, str]  # family(item.task).prompt_fields(item)
    prompted: Prompted | None = None
    pairs: tuple[int, int] | None = None  # where int_pairs_json(item.pairs) sits in `line`


def made_ahead(item: Item) -> MadeAhead | None:
    """The text made ahead for `item`, if any (none for an item made in the run's process)."""
    return item.__dict__.get(MADE_AHEAD)


def keep_made_ahead(item: Item, made: MadeAhead) -> None:
    item.__dict__[MADE_AHEAD] = made


WRITTEN_PAIRS = "written_pairs"


def keep_pairs_json(item: Item, written: bytes) -> None:
    """Keep int_pairs_json(item.pairs), as its id was hashed from, for its line and prompt."""
    item.__dict__[WRITTEN_PAIRS] = written


def pairs_json(item: Item) -> bytes | None:
    """int_pairs_json(item.pairs): as kept when the item was made (TaskFamily.new_item), else
    written now; None when its pairs are not pairs of two ints."""
    kept = item.__dict__.get(WRITTEN_PAIRS)
    if kept is not None:
        return kept
    return int_pairs_json(item.pairs) if item.pairs else None


def _drop_made(item: Item) -> None:
    item.__dict__.pop(MADE_AHEAD, None)
    item.__dict__.pop(WRITTEN_PAIRS, None)


def item_id(task: str, index: int, content: dict[str, Any], pairs_written: bytes | None = None) -> str:
    """An id that names the task and index and changes whenever the content does
    (`pairs_written`: canonical_json's).

    The hash keeps two datasets made with different options from sharing ids, so a
    transcript can never mistake one for the other on resume.
    """
    digest = hashlib.sha256(canonical_json(content, pairs_written)).hexdigest()[:8]
    return f"{task}-{index:04d}-{digest}"


_PAIRS = "\x00pairs\x00"  # stands in for a context of pairs while the rest is encoded
_PAIRS_JSON = json.dumps(_PAIRS).encode()
_encode_json = msgspec.json.Encoder().encode


def canonical_json(content: dict[str, Any], pairs_written: bytes | None = None) -> bytes:
    """json.dumps(content, sort_keys=True, separators=(",", ":")).encode(), byte for byte, with
    a context of pairs of ints written by int_pairs_json instead of the encoder: a fraction of
    the cost for the hundreds of pairs a recall question holds (`pairs_written`: already
    written so, by the caller). Anything else in "pairs" (a number that is not an int, a pair
    of another length) is left to the encoder."""
    pairs = content.get("pairs")
    written = pairs_written
    if written is None and isinstance(pairs, list) and pairs:
        written = int_pairs_json(pairs)
    if written is not None:
        text = json.dumps({**content, "pairs": _PAIRS}, sort_keys=True, separators=(",", ":")).encode()
        return text.replace(_PAIRS_JSON, written, 1)
    return json.dumps(content, sort_keys=True, separators=(",", ":")).encode()


def int_pairs_json(pairs: list[Any]) -> bytes | None:
    """Pairs of two ints each as compact JSON, [[1,2],[3,4]], byte for byte what json.dumps
    writes with separators=(",", ":"); None when they are anything else (floats, bools, pairs
    of another length). msgspec writes them in about an eighth of the time of a bytes
    %-format (11 against 82 us at 500 pairs, inner timing), and the text says whether they
    were ints (shapes.int_rows), which was as costly to check one by one as to write."""
    try:
        text = _encode_json(pairs)
    except (TypeError, msgspec.EncodeError):
        return None
    return text if int_rows(text, 2) == len(pairs) else None


def require(condition: bool, message: str) -> None:
    """Raise a UsageError with `message` unless `condition` holds."""
    if not condition:
        raise UsageError(message)

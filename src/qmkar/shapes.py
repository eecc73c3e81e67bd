"""The shapes msgspec decodes transcript lines into, as records.py writes them.

slim.py reads reports' records with them and rescore.py regrades with them: a line that
does not fit (schema 1, a value of another type) goes through the pydantic records instead.
Fields are in records.py's order; see it for what each means.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import msgspec

NULL = b"null"


class SlimUsage(msgspec.Struct, gc=False):
    """Token counts of one answer (the fields of providers.base.Usage)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None


class _ItemFields(msgspec.Struct, kw_only=True):
    """An item's fields, in Item's order (datasets.trusted_item relies on it); each shape below
    reads the context (pairs, values) its own way."""

    id: str
    task: str
    pairs: Any = None
    values: Any = None
    query: list[int]
    expected: list[int]
    target_positions: list[int]
    params: msgspec.Raw = msgspec.Raw(b"{}")
    source: str = "generated"
    depths: list[float] | None = None
    text: str | None = None


class ItemShape(_ItemFields, kw_only=True):
    pairs: list[tuple[int, int]] | None = None
    values: list[int] | None = None


class ItemLineShape(msgspec.Struct):
    item: ItemShape


class DatasetItemShape(ItemShape, forbid_unknown_fields=True):
    """A dataset line as msgspec checks it first: the item's fields and no others."""


class ParsedShape(msgspec.Struct):
    values: list[int]
    refused: bool = False


class AttemptShape(msgspec.Struct, kw_only=True):
    started_at: datetime
    seconds: float
    waited: float = 0.0
    error: msgspec.Raw = msgspec.Raw(NULL)


class AnswerShape(msgspec.Struct, kw_only=True):
    schema_version: int
    run_id: str | None = None
    model: str
    label: str | None = None
    item_id: str
    condition: msgspec.Raw
    condition_id: str
    sample: int = 0
    template: str
    answer: str | None = None
    reasoning: str | None = None
    response_model: str | None = None
    usage: SlimUsage | None = None
    truncated: bool = False
    started_at: datetime
    seconds: float
    attempts: list[AttemptShape] = []
    error: msgspec.Raw = msgspec.Raw(NULL)
    parsed: ParsedShape | None = None
    score: msgspec.Raw = msgspec.Raw(NULL)
    extra: dict[str, Any] = {}


class SlimItemShape(_ItemFields, kw_only=True):
    """An item as a report reads it: its context left as JSON text (slim.py counts and checks
    it without building a number per value)."""

    pairs: msgspec.Raw = msgspec.Raw(NULL)
    values: msgspec.Raw = msgspec.Raw(NULL)


class SlimItemLineShape(msgspec.Struct):
    item: SlimItemShape


class RegradedShape(AnswerShape, kw_only=True):
    """An answer line as rescore reads it: its parsed answer left as the JSON text it was
    written as, which rescore compares with the new one's and checks as AnswerShape would
    (decode_parsed) only where they differ."""

    parsed: msgspec.Raw = msgspec.Raw(NULL)  # type: ignore[assignment]  # msgspec takes a subclass's type


decode_answer = msgspec.json.Decoder(AnswerShape).decode
decode_regraded = msgspec.json.Decoder(RegradedShape).decode
decode_parsed = msgspec.json.Decoder(ParsedShape | None).decode
decode_item = msgspec.json.Decoder(ItemLineShape).decode
decode_slim_item = msgspec.json.Decoder(SlimItemLineShape).decode


class KeyShape(msgspec.Struct):
    """An answer line's key, and nothing else."""

    item_id: str
    condition_id: str
    sample: int = 0


class ItemIdShape(msgspec.Struct):
    id: str


class ItemIdLineShape(msgspec.Struct):
    item: ItemIdShape


decode_key = msgspec.json.Decoder(KeyShape).decode
decode_item_id = msgspec.json.Decoder(ItemIdLineShape).decode


def int_rows(text: bytes, width: int) -> int | None:
    """How many rows of `width` integers a JSON array holds, counted from its text: [[1,2],[3,4]]
    holds 2 rows of 2, [5,6,7] 3 of 1. None unless it is that shape written compactly, as qmkar
    writes it. The text must be valid JSON (msgspec checked it): then once the digits and minus
    signs are gone, only the brackets and commas of that shape may be left."""
    if text == b"[]":
        return 0
    skeleton = text.translate(None, b"0123456789-")
    count = (len(skeleton) - 1) // (width + 2 if width > 1 else 1)  # a row "[,]" and its comma
    if count < 1 or skeleton != _skeleton(width, count):
        return None
    return count


@functools.lru_cache(maxsize=64)
def _skeleton(width: int, count: int) -> bytes:
    """What int_rows leaves of `count` rows of `width`: [[,],[,]] for 2 of 2, [,,] for 3 of 1
    (made once per shape: contexts of one size share it)."""
    row = b"[" + b"," * (width - 1) + b"]" if width > 1 else b""
    return b"[" + row + (b"," + row) * (count - 1) + b"]"


def context_rows(raw: msgspec.Raw, width: int) -> tuple[bytes | None, int | None]:
    """A context field of a SlimItemShape (pairs: width 2, values: width 1) as its JSON text
    and its rows, (None, None) when null. Counting rows from the text is what makes a report's
    reading cheap: decoding 50 pairs into numbers was most of its time. msgspec.ValidationError
    when the text is not written as qmkar writes it: the caller reads the whole item then."""
    text = bytes(raw)
    if text == NULL:
        return None, None
    rows = int_rows(text, width)
    if rows is None:
        raise msgspec.ValidationError(f"not {width}-integer rows written compactly")
    return text, rows

"""The item record every task produces and every later stage reads.

An item is one question: the context it asks about, what it queries and the exact
answer. Items are plain pydantic records so datasets round-trip through JSONL.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from qmkar.errors import UsageError


class Item(BaseModel):
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
    params: dict[str, Any] = Field(default_factory=dict, description="Options that generated it.")
    source: str = Field(default="generated", description="'generated' or 'blog:<file>#<problem_id>'.")
    # Optional fields added by later variants (see docs/variants.md). They are left out
    # of the JSON when unset, so datasets of the original tasks stay byte-identical.
    depths: list[float] | None = Field(
        default=None,
        description="Depth (0 = start of the context, 1 = end) of each target occurrence, "
        "parallel to `target_positions`; set when --placement chose them. When unset, a "
        "depth is position / (size - 1).",
    )
    text: str | None = Field(
        default=None, description="The context as symbols, for tasks whose context is not numbers (dyck)."
    )

    # No return annotation on purpose: pydantic would take it as the serialization
    # schema and lose the field list of model_json_schema(mode="serialization").
    @model_serializer(mode="wrap")
    def _drop_unset_optional(self, handler: SerializerFunctionWrapHandler):
        data = handler(self)
        for name in OPTIONAL_FIELDS:
            if data.get(name, 0) is None:
                del data[name]
        return data

    @property
    def size(self) -> int:
        """Number of pairs (or values, or symbols) in the context."""
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


# Item fields that are omitted from the JSON when None (see Item._drop_unset_optional).
OPTIONAL_FIELDS = ("depths", "text")


class IntRange(NamedTuple):
    """An inclusive integer range such as 100..300."""

    low: int
    high: int

    @property
    def count(self) -> int:
        return self.high - self.low + 1

    def __str__(self) -> str:
        return f"{self.low}..{self.high}"


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
    return IntRange(low, high)


def item_id(task: str, index: int, content: dict[str, Any]) -> str:
    """An id that names the task and index and changes whenever the content does.

    The hash keeps two datasets made with different options from sharing ids, so a
    transcript can never mistake one for the other on resume.
    """
    digest = hashlib.sha256(
        json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()[:8]
    return f"{task}-{index:04d}-{digest}"


def require(condition: bool, message: str) -> None:
    """Raise a UsageError with `message` unless `condition` holds."""
    if not condition:
        raise UsageError(message)

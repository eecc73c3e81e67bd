"""The item record every task produces and every later stage reads.

An item is one question: the context it asks about, what it queries and the exact
answer. Items are plain pydantic records so datasets round-trip through JSONL.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from qmkar.errors import UsageError


class Item(BaseModel):
    """One question of a dataset. This is the schema of a dataset JSONL line."""

    id: str = Field(description="Stable identifier: the same task, options and seed give the same id.")
    task: str = Field(description="Task family: 'qmkar', 'mqar' or 'counting'.")
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

    @property
    def size(self) -> int:
        """Number of pairs (or values) in the context."""
        if self.pairs is not None:
            return len(self.pairs)
        return len(self.values or [])


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

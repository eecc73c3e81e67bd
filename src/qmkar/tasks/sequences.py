"""What the sequence tasks (parity, parity-ones, dyck, copy) share: their lengths.

These tasks are asked at several lengths to draw length-generalisation curves: item
i of a dataset has length lengths[i % len(lengths)], so any n covers the lengths
evenly and item i still depends only on (options, seed, i). `--length L` is
`--lengths L`. Reports show accuracy per length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator

from qmkar.errors import UsageError
from qmkar.parse import ParsedAnswer, parse_label
from qmkar.score import Score, score_label
from qmkar.tasks.base import Item, TaskParams, check_context, from_text, require
from qmkar.tasks.family import TaskFamily

DEFAULT_LENGTHS = (32, 48, 64, 128, 256)


def parse_lengths(text: str, option: str = "--lengths") -> tuple[int, ...]:
    """Read "32,48,64" into (32, 48, 64); raise UsageError otherwise."""
    try:
        lengths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(
            f"--lengths must be whole numbers joined by commas (for example 32,48,64), not {text!r}"
        ) from None
    if not lengths or any(length < 1 for length in lengths):
        raise UsageError(f"--lengths {text!r}: give one or more lengths of at least 1, e.g. 32,64")
    return lengths


def _at_least_one(lengths: tuple[int, ...]) -> tuple[int, ...]:
    if not lengths or any(length < 1 for length in lengths):
        raise ValueError("--lengths: give one or more lengths of at least 1, e.g. 32,64")
    return lengths


# A lengths field: "32,48" on the command line, [32, 48] in JSON, a tuple in code.
Lengths = Annotated[tuple[int, ...], from_text(parse_lengths), AfterValidator(_at_least_one)]


def length_for(lengths: tuple[int, ...], index: int) -> int:
    """The length of item `index`."""
    return lengths[index % len(lengths)]


class SequenceParams(TaskParams):
    """`length` is an item's own length (recorded in items); `lengths` the option."""

    length: int | None = None
    lengths: Lengths = DEFAULT_LENGTHS


class SequenceFamily(TaskFamily):
    """A task asked at several context lengths and reported by length."""

    report = "lengths"
    size_unit = "symbols"
    # A dataset cycles through its lengths; reports show them apart without splitting it.
    per_item = TaskFamily.per_item | {"length"}

    def make_params(self, given: dict[str, Any]) -> TaskParams:
        given = dict(given)
        if "length" in given and "lengths" in given:
            raise UsageError("give --length or --lengths, not both")
        if "length" in given and "length" in self.options:
            given["lengths"] = (given.pop("length"),)
        return super().make_params(given)

    def check(self, params: Any) -> None:
        require(all(length >= 1 for length in params.lengths), "--lengths must all be at least 1")
        check_context("--length" if len(params.lengths) == 1 else "--lengths", max(params.lengths),
                      self.size_unit)

    def item_problem(self, item: Item) -> str | None:
        if item.query:
            return f"a {self.name} item asks about its whole sequence: its query is [], not {item.query[:5]}"
        return super().item_problem(item)

    def sized(self, params: Any, size: int) -> TaskParams | None:
        """One length, `size` symbols (rounded down to what the task allows)."""
        return self.resized(params, lengths=(self.allowed_length(size),))

    def allowed_length(self, size: int) -> int:
        return size


class LabelFamily(SequenceFamily):
    """A yes/no question about a sequence (parity, dyck), answered with a label word."""

    words: ClassVar[dict[str, int]]  # label word -> 1 (yes) or 0 (no), for parse rule 12
    labels: ClassVar[dict[int, str]]  # how the oracle writes 1 and 0

    def parse(self, item: Item, text: str) -> ParsedAnswer:
        return parse_label(text, self.words)

    def score(self, item: Item, parsed: ParsedAnswer) -> Score:
        return score_label(item, parsed)

    def is_right(self, expected: Sequence[int], values: Sequence[int]) -> bool:
        return bool(values) and values[0] == expected[0]

    def oracle_answer(self, item: Item) -> str:
        return self.labels[item.expected[0]]

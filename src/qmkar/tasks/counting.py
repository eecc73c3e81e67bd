"""Counting: how many times does one value occur in a long list of small numbers?"""

from __future__ import annotations

import random
from collections.abc import Sequence

from qmkar.parse import ParsedAnswer, parse_count
from qmkar.score import Score, score_count
from qmkar.tasks.base import IntRange, Item, Range, TaskParams, check_context, require
from qmkar.tasks.family import TaskFamily


class CountingParams(TaskParams):
    length: int = 500
    value_range: Range = IntRange(0, 50)
    seed: int | None = None


class Counting(TaskFamily):
    name = "counting"
    params_type = CountingParams
    options = {"length": "values in the list", "value_range": "values LOW..HIGH"}
    placeholders = {
        "values": "the values joined by ', '",
        "value": "the queried value",
    }
    report = "counting"
    size_unit = "values"
    sim_reads = "list"

    def check(self, params: CountingParams) -> None:
        require(params.length >= 1, f"--length must be at least 1, not {params.length}")
        check_context("--length", params.length, "values")

    def generate_one(self, params: CountingParams, seed: int, index: int) -> Item:
        """The queried value always occurs at least once."""
        rng = random.Random(f"counting/{seed}/{index}")
        low, high = params.value_range
        values = [rng.randint(low, high) for _ in range(params.length)]
        queried = rng.choice(values)
        positions = [i for i, v in enumerate(values) if v == queried]
        recorded = CountingParams(length=params.length, value_range=params.value_range, seed=seed)
        return self.new_item(
            index, recorded, ("values", "query"),
            values=values,
            query=[queried],
            expected=[len(positions)],
            target_positions=positions,
        )

    def content_problem(self, item: Item) -> str | None:
        if len(item.query) != 1:
            return f"a counting item queries one value, not {len(item.query)}"
        occurs = [i for i, v in enumerate(item.values or []) if v == item.query[0]]
        if item.target_positions != occurs:
            return (f"target_positions {item.target_positions[:5]} are not where the queried value "
                    f"{item.query[0]} occurs ({occurs[:5]})")
        if item.expected != [len(occurs)]:
            return (f"expected {item.expected[:5]} contradicts its context, where {item.query[0]} "
                    f"occurs {len(occurs)} times")
        return None

    def sized(self, params: CountingParams, size: int) -> TaskParams | None:
        return self.resized(params, length=size)

    def prompt_fields(self, item: Item) -> dict[str, str]:
        return {"values": ", ".join(str(v) for v in item.values or []), "value": str(item.query[0])}

    def value_ceiling(self, item: Item) -> int:
        # A count is at most the list's length.
        return item.size

    def parse(self, item: Item, text: str) -> ParsedAnswer:
        return parse_count(item, text, self.value_ceiling(item))

    def score(self, item: Item, parsed: ParsedAnswer) -> Score:
        return score_count(item, parsed)

    def is_right(self, expected: Sequence[int], values: Sequence[int]) -> bool:
        return bool(values) and values[0] == expected[0]


FAMILY = Counting()

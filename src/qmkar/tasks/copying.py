"""Copying: repeat a random sequence of numbers exactly (task copy).

From "Revisiting associative recall in modern recurrent models": a fixed-state model
cannot hold an arbitrary long sequence, a model with attention can look it up. Each
token is a number drawn from `value_range`; the answer is scored whole (exact) and
position by position (token accuracy).
"""

from __future__ import annotations

import random

from qmkar.parse import ParsedAnswer, parse_copy
from qmkar.score import Score, score_copy
from qmkar.tasks.base import IntRange, Item, Range
from qmkar.tasks.sequences import SequenceFamily, SequenceParams, length_for


class CopyParams(SequenceParams):
    value_range: Range = IntRange(10, 99)
    seed: int | None = None


class Copy(SequenceFamily):
    name = "copy"
    params_type = CopyParams
    options = {"length": "one length instead of --lengths",
               "lengths": "context lengths, item i gets the (i mod k)-th",
               "value_range": "token values LOW..HIGH"}
    placeholders = {"sequence": "the numbers joined by spaces"}
    optional_placeholders = {"length": "number of numbers"}
    sim_reads = "sequence"

    def generate_one(self, params: CopyParams, seed: int, index: int) -> Item:
        rng = random.Random(f"copy/{seed}/{index}")
        length = length_for(params.lengths, index)
        low, high = params.value_range
        tokens = [rng.randint(low, high) for _ in range(length)]
        recorded = CopyParams(length=length, lengths=params.lengths,
                              value_range=params.value_range, seed=seed)
        return self.new_item(
            index, recorded, ("values",),
            values=tokens,
            query=[],
            expected=tokens,
            target_positions=list(range(length)),
        )

    def content_problem(self, item: Item) -> str | None:
        if item.expected != item.values:
            return "a copy item's expected answer is its values, in order"
        if item.target_positions != list(range(item.size)):
            return "a copy item's target_positions are every position of its values, 0..size-1"
        return None

    def prompt_fields(self, item: Item) -> dict[str, str]:
        return {"sequence": " ".join(str(v) for v in item.values or []), "length": str(item.size)}

    def parse(self, item: Item, text: str) -> ParsedAnswer:
        return parse_copy(text, self.value_ceiling(item))

    def score(self, item: Item, parsed: ParsedAnswer) -> Score:
        return score_copy(item, parsed)

    def oracle_answer(self, item: Item) -> str:
        return " ".join(str(v) for v in item.expected)


FAMILY = Copy()

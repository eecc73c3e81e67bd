"""Copying: repeat a random sequence of numbers exactly (task copy).

From "Revisiting associative recall in modern recurrent models": a fixed-state model
cannot hold an arbitrary long sequence, a model with attention can look it up. Each
token is a number drawn from `value_range`; the answer is scored whole (exact) and
position by position (token accuracy).
"""

from __future__ import annotations

import random
from typing import NamedTuple

from qmkar.tasks.base import IntRange, Item, item_id, require
from qmkar.tasks.sequences import DEFAULT_LENGTHS, length_for


class CopyParams(NamedTuple):
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    value_range: IntRange = IntRange(10, 99)


def check(params: CopyParams) -> None:
    """Raise UsageError for options no dataset can satisfy."""
    require(all(length >= 1 for length in params.lengths), "--lengths must all be at least 1")


def generate_one(params: CopyParams, seed: int, index: int) -> Item:
    """Item `index` of the dataset for `seed`; independent of how many items are made."""
    rng = random.Random(f"copy/{seed}/{index}")
    length = length_for(params.lengths, index)
    low, high = params.value_range
    tokens = [rng.randint(low, high) for _ in range(length)]
    options = {"length": length, "lengths": list(params.lengths),
               "value_range": str(params.value_range), "seed": seed}
    content = {"values": tokens, "options": options}
    return Item(
        id=item_id("copy", index, content),
        task="copy",
        values=tokens,
        query=[],
        expected=tokens,
        target_positions=list(range(length)),
        params=options,
    )


def answer_text(item: Item) -> str:
    """A correct answer, as the oracle writes it."""
    return " ".join(str(v) for v in item.expected)

"""Counting: how many times does one value occur in a long list of small numbers?"""

from __future__ import annotations

import random
from typing import NamedTuple

from qmkar.tasks.base import IntRange, Item, item_id, require


class CountingParams(NamedTuple):
    length: int = 500
    value_range: IntRange = IntRange(0, 50)


def check(params: CountingParams) -> None:
    """Raise UsageError for options no dataset can satisfy."""
    require(params.length >= 1, f"--length must be at least 1, not {params.length}")


def generate_one(params: CountingParams, seed: int, index: int) -> Item:
    """Item `index` of the dataset for `seed`; the queried value always occurs at least once."""
    rng = random.Random(f"counting/{seed}/{index}")
    low, high = params.value_range
    values = [rng.randint(low, high) for _ in range(params.length)]
    queried = rng.choice(values)
    positions = [i for i, v in enumerate(values) if v == queried]
    options = {"length": params.length, "value_range": str(params.value_range), "seed": seed}
    content = {"values": values, "query": [queried], "options": options}
    return Item(
        id=item_id("counting", index, content),
        task="counting",
        values=values,
        query=[queried],
        expected=[len(positions)],
        target_positions=positions,
        params=options,
    )

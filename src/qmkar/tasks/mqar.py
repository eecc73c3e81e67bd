"""MQAR: unique keys, several queried at once; each queried key has exactly one value."""

from __future__ import annotations

import random
from typing import NamedTuple

from qmkar.tasks.base import IntRange, Item, item_id, require


class MqarParams(NamedTuple):
    pairs: int = 500
    queries: int = 3
    key_range: IntRange = IntRange(100, 1000)
    value_range: IntRange = IntRange(1000, 9999)


def check(params: MqarParams) -> None:
    """Raise UsageError for options no dataset can satisfy."""
    require(params.pairs >= 1, f"--pairs must be at least 1, not {params.pairs}")
    require(params.queries >= 1, f"--queries must be at least 1, not {params.queries}")
    require(
        params.queries <= params.pairs,
        f"--queries ({params.queries}) cannot exceed --pairs ({params.pairs})",
    )
    require(
        params.pairs <= params.key_range.count,
        f"MQAR keys are unique: --pairs {params.pairs} needs {params.pairs} keys but "
        f"--key-range {params.key_range} holds only {params.key_range.count}",
    )


def generate_one(params: MqarParams, seed: int, index: int) -> Item:
    """Item `index` of the dataset for `seed`; independent of how many items are made."""
    rng = random.Random(f"mqar/{seed}/{index}")
    keys, values = params.key_range, params.value_range
    pair_keys = rng.sample(range(keys.low, keys.high + 1), params.pairs)
    pairs = [(k, rng.randint(values.low, values.high)) for k in pair_keys]
    query_positions = rng.sample(range(params.pairs), params.queries)
    query = [pairs[i][0] for i in query_positions]
    expected = [pairs[i][1] for i in query_positions]
    options = {
        "pairs": params.pairs,
        "queries": params.queries,
        "key_range": str(keys),
        "value_range": str(values),
        "seed": seed,
    }
    content = {"pairs": pairs, "query": query, "options": options}
    return Item(
        id=item_id("mqar", index, content),
        task="mqar",
        pairs=pairs,
        query=query,
        expected=expected,
        target_positions=query_positions,
        params=options,
    )

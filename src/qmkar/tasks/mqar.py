"""MQAR: unique keys, several queried at once; each queried key has exactly one value."""

from __future__ import annotations

import random

from qmkar.tasks.base import IntRange, Item, Range, TaskParams, require, same_digits
from qmkar.tasks.family import RecallFamily


class MqarParams(TaskParams):
    pairs: int = 500
    queries: int = 3
    key_range: Range = IntRange(100, 1000)
    value_range: Range = IntRange(1000, 9999)
    seed: int | None = None


class Mqar(RecallFamily):
    name = "mqar"
    params_type = MqarParams
    options = {
        "pairs": "key-value pairs per context",
        "queries": "keys queried per question",
        "key_range": "keys LOW..HIGH",
        "value_range": "values LOW..HIGH",
    }
    placeholders = {
        "pairs": "the context: 'k: K, v: V' joined by '; '",
        "keys": "the queried keys joined by ', '",
    }
    width_name = "queries"
    one_key = False
    position_label = "queried key, in the order asked"

    def check(self, params: MqarParams) -> None:
        self.check_counts(params.pairs, params.queries)
        require(
            params.pairs <= params.key_range.size,
            f"MQAR keys are unique: --pairs {params.pairs} needs {params.pairs} keys but "
            f"--key-range {params.key_range} holds only {params.key_range.size}",
        )

    def generate_one(self, params: MqarParams, seed: int, index: int) -> Item:
        rng = random.Random(f"mqar/{seed}/{index}")
        keys, values = params.key_range, params.value_range
        pair_keys = rng.sample(range(keys.low, keys.high + 1), params.pairs)
        pairs = [(k, rng.randint(values.low, values.high)) for k in pair_keys]
        query_positions = rng.sample(range(params.pairs), params.queries)
        query = [pairs[i][0] for i in query_positions]
        recorded = MqarParams(pairs=params.pairs, queries=params.queries, key_range=keys,
                              value_range=values, seed=seed)
        return self.recall_item(index, recorded, pairs, query, query_positions)


    def sized(self, params: MqarParams, size: int) -> TaskParams | None:
        """`size` pairs; unless --key-range was given, the unique keys grow with them at the
        blog's density (500 pairs among 901 keys), with 100..1000 as the smallest range."""
        if "key_range" in params.model_fields_set:
            return self.resized(params, pairs=size)
        width = round(size * 901 / 500)
        keys = IntRange(100, 1000) if width <= 901 else same_digits(width, 1000)
        return self.resized(params, pairs=size, key_range=keys)


FAMILY = Mqar()

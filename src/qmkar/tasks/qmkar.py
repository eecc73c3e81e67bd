"""QMKAR: one key occurs t times with distinct values; the model must return them all.

Follows the blog's published generator: keys drawn from the key range with
replacement (so non-target keys repeat too), the target key planted t times, values
drawn from the value range, everything shuffled. Two variants (docs/variants.md):
`placement` puts the target pairs at chosen depths instead of shuffling them in, and
`near_keys` makes that many distractors use keys close to the target's.
"""

from __future__ import annotations

import random
from typing import Any

from qmkar.tasks.base import IntRange, Item, Range, TaskParams, require, same_digits
from qmkar.tasks.draws import randints, randints_except
from qmkar.tasks.family import RecallFamily
from qmkar.tasks.placement import (
    PLACEMENT_HELP,
    Placement,
    PlacementField,
    arrange,
    check_placement,
    near_keys_for,
)


class QmkarParams(TaskParams):
    pairs: int = 500
    targets: int = 3
    key_range: Range = IntRange(100, 300)
    value_range: Range = IntRange(1000, 9999)
    unique_distractors: bool = False
    seed: int | None = None
    placement: PlacementField = Placement()
    near_keys: int = 0


class Qmkar(RecallFamily):
    name = "qmkar"
    params_type = QmkarParams
    options = {
        "pairs": "key-value pairs per context",
        "targets": "pairs of the queried key, t",
        "key_range": "keys LOW..HIGH",
        "value_range": "values LOW..HIGH",
        "unique_distractors": "only the target key repeats (the blog lets every key repeat)",
        "placement": PLACEMENT_HELP,
        "near_keys": "distractors whose key is within 2 of the target or one digit off",
    }
    placeholders = {
        "pairs": "the context: 'k: K, v: V' joined by '; '",
        "key": "the queried key",
    }
    width_name = "targets"
    position_label = "position in the context (Pos0 = first occurrence)"

    def check(self, params: QmkarParams) -> None:
        self.check_counts(params.pairs, params.targets)
        require(
            params.targets <= params.value_range.size,
            f"--value-range {params.value_range} holds {params.value_range.size} values, "
            f"fewer than the {params.targets} distinct target values needed",
        )
        require(
            params.key_range.size >= 2,
            f"--key-range {params.key_range} must hold at least 2 keys (a target and distractors)",
        )
        if params.unique_distractors:
            distractors = params.pairs - params.targets
            require(
                distractors <= params.key_range.size - 1,
                f"--unique-distractors needs {distractors} distinct non-target keys but "
                f"--key-range {params.key_range} holds only {params.key_range.size - 1} besides "
                "the target; widen the range or use fewer --pairs",
            )
        check_placement(params.placement, params.pairs, params.targets)
        require(params.near_keys >= 0, f"--near-keys must be at least 0, not {params.near_keys}")
        require(
            params.near_keys <= params.pairs - params.targets,
            f"--near-keys ({params.near_keys}) cannot exceed the {params.pairs - params.targets} "
            "distractor pairs (--pairs minus --targets)",
        )

    def generate_one(self, params: QmkarParams, seed: int, index: int) -> Item:
        rng = random.Random(f"qmkar/{seed}/{index}")
        keys, values = params.key_range, params.value_range
        target = rng.randint(keys.low, keys.high)
        target_values = rng.sample(range(values.low, values.high + 1), params.targets)
        pairs = [(target, v) for v in target_values]
        distractors = params.pairs - params.targets
        near = near_keys_for(rng, target, keys, params.near_keys, params.unique_distractors)
        distractors -= len(near)
        if params.unique_distractors and keys.size > POOL_LIMIT:
            distractor_keys = near + _distinct_keys(rng, keys, distractors, {target, *near})
        elif params.unique_distractors:
            pool = [k for k in range(keys.low, keys.high + 1) if k != target and k not in near]
            distractor_keys = near + rng.sample(pool, distractors)
        else:
            distractor_keys = near + randints_except(rng, keys.low, keys.high, distractors, target)
        noise = list(zip(distractor_keys, randints(rng, values.low, values.high, len(distractor_keys)),
                         strict=True))
        pairs, depths = arrange(rng, params.placement, pairs, noise)
        positions = [i for i, (k, _) in enumerate(pairs) if k == target]
        fields: dict[str, Any] = dict(
            pairs=params.pairs, targets=params.targets, key_range=keys, value_range=values,
            unique_distractors=params.unique_distractors, seed=seed)
        # Variant options are recorded only when set, so default items keep their bytes and ids.
        if params.placement != Placement():
            fields["placement"] = params.placement
        if params.near_keys:
            fields["near_keys"] = params.near_keys
        recorded = QmkarParams(**fields)
        return self.recall_item(index, recorded, pairs, [target], positions, depths)


    def sized(self, params: QmkarParams, size: int) -> TaskParams | None:
        """`size` pairs; unless --key-range was given, keys grow with them (key_range_for)."""
        if "key_range" in params.model_fields_set:
            return self.resized(params, pairs=size)
        return self.resized(params, pairs=size,
                            key_range=key_range_for(size, params.targets, params.unique_distractors))


# Key ranges wider than this are not listed to draw unique distractors from (a range of
# 10^12 keys would not fit in memory); keys are drawn and redrawn on a repeat instead.
POOL_LIMIT = 1_000_000


def _distinct_keys(rng: random.Random, keys: IntRange, count: int, taken: set[int]) -> list[int]:
    """`count` distinct keys of a wide range, none of them in `taken`."""
    chosen: list[int] = []
    used = set(taken)
    while len(chosen) < count:
        key = rng.randint(keys.low, keys.high)
        if key not in used:
            used.add(key)
            chosen.append(key)
    return chosen


def key_range_for(pairs: int, targets: int, unique: bool = False) -> IntRange:
    """Keys for a context of `pairs` that repeat as often as the blog's: each of the W - 1
    non-target keys is drawn (pairs - targets) / (W - 1) = 497 / 200 times on average, as with
    500 pairs in 100..300. All keys have one digit count. 500 pairs and 3 targets give
    100..300, the blog's range."""
    distractors = pairs - targets
    width = max(2, 1 + round(distractors * 200 / 497))
    if unique:
        width = max(width, distractors + 1)
    return same_digits(width)


FAMILY = Qmkar()

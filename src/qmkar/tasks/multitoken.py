"""KnVm recall: keys of n numbers and values of m numbers (tasks qmkar-kv and mqar-kv).

From "Revealing and Mitigating the Local Pattern Shortcuts of Mamba" (K2V2, K4V8...).
A multi-part key or value is stored in the item as one integer, its *code*: the parts,
each zero-padded to the digit width of its range's upper bound, written one after
another ((123, 45) with key range 100..300 -> 123045). So `pairs`, `query` and
`expected` keep their types, and a predicted value matches only when every part is
right. The prompt shows the parts joined by SEPARATOR.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from qmkar.parse import ParsedAnswer, parse_grouped
from qmkar.score import Score, near_keys, score_recall
from qmkar.tasks.base import IntRange, Item, Range, TaskParams, require
from qmkar.tasks.family import RecallFamily
from qmkar.tasks.placement import (
    PLACEMENT_HELP,
    Placement,
    PlacementField,
    arrange,
    check_placement,
    near_candidates,
)

SEPARATOR = "-"


class QmkarKvParams(TaskParams):
    pairs: int = 500
    targets: int = 3
    key_tokens: int = 2
    value_tokens: int = 2
    key_range: Range = IntRange(100, 300)
    value_range: Range = IntRange(1000, 9999)
    key_width: int | None = None  # digits of one key part; recorded in items
    value_width: int | None = None
    placement: PlacementField = Placement()
    near_keys: int = 0
    seed: int | None = None


class MqarKvParams(TaskParams):
    pairs: int = 500
    queries: int = 3
    key_tokens: int = 2
    value_tokens: int = 2
    key_range: Range = IntRange(100, 1000)
    value_range: Range = IntRange(1000, 9999)
    key_width: int | None = None
    value_width: int | None = None
    seed: int | None = None


def width(value_range: IntRange) -> int:
    """Digits of one part: those of the range's upper bound."""
    return len(str(value_range.high))


def encode(parts: tuple[int, ...] | list[int], part_width: int) -> int:
    """The code of a multi-part key or value."""
    return int("".join(str(p).zfill(part_width) for p in parts))


def decode(code: int, count: int, part_width: int) -> list[int]:
    """The parts of a code (inverse of encode)."""
    digits = str(code).zfill(count * part_width)
    return [int(digits[i * part_width:(i + 1) * part_width]) for i in range(count)]


def shape(item: Item) -> tuple[int, int, int, int]:
    """(key parts, key part width, value parts, value part width) of a kv item."""
    p: Any = item.params
    return (p.key_tokens, p.key_width or width(p.key_range), p.value_tokens,
            p.value_width or width(p.value_range))


def show_key(item: Item, code: int) -> str:
    n, kw, _, _ = shape(item)
    return SEPARATOR.join(str(part) for part in decode(code, n, kw))


def show_value(item: Item, code: int) -> str:
    _, _, m, vw = shape(item)
    return SEPARATOR.join(str(part) for part in decode(code, m, vw))


def _parts(rng: random.Random, count: int, value_range: IntRange) -> tuple[int, ...]:
    return tuple(rng.randint(value_range.low, value_range.high) for _ in range(count))


def _near_key(rng: random.Random, target: tuple[int, ...], key_range: IntRange) -> tuple[int, ...]:
    """The target with one part replaced by a near number (within 2, or one digit apart)."""
    index = rng.randrange(len(target))
    replaced = list(target)
    replaced[index] = rng.choice(near_candidates(target[index], key_range))
    return tuple(replaced)


class KvFamily(RecallFamily):
    """What qmkar-kv and mqar-kv share: part counts, widths, rendering, parsing, FP nearness."""

    sim_reads = "multipart"
    literal_values = False  # a value is its parts, written apart
    optional_placeholders = {"key_tokens": "numbers per key", "value_tokens": "numbers per value",
                             "example": "one value of the context, as written there"}

    def check_parts(self, params: QmkarKvParams | MqarKvParams) -> None:
        require(1 <= params.key_tokens <= 16, f"--key-tokens must be 1..16, not {params.key_tokens}")
        require(1 <= params.value_tokens <= 16,
                f"--value-tokens must be 1..16, not {params.value_tokens}")

    def recorded(self, params: Any, seed: int, **only_when_set: Any) -> dict[str, Any]:
        """The params an item records, in the order items have always written them."""
        return dict(
            key_tokens=params.key_tokens, value_tokens=params.value_tokens,
            key_range=params.key_range, value_range=params.value_range,
            key_width=width(params.key_range), value_width=width(params.value_range),
            **only_when_set, seed=seed,
        )

    def prompt_fields(self, item: Item) -> dict[str, str]:
        pairs = "; ".join(f"k: {show_key(item, k)}, v: {show_value(item, v)}" for k, v in item.pairs or [])
        keys = ", ".join(show_key(item, k) for k in item.query)
        example = show_value(item, item.pairs[0][1]) if item.pairs else ""
        n, _, m, _ = shape(item)
        return {"pairs": pairs, "key": keys, "keys": keys, "key_tokens": str(n),
                "value_tokens": str(m), "example": example}

    def parse(self, item: Item, text: str) -> ParsedAnswer:
        n, key_width, m, value_width = shape(item)
        queried = [decode(code, n, key_width) for code in item.query]
        return parse_grouped(text, self.value_ceiling(item), queried, m,
                             lambda parts: encode(parts, value_width))

    def score(self, item: Item, parsed: ParsedAnswer) -> Score:
        n, key_width, _, _ = shape(item)

        def near(a: int, b: int) -> bool:
            """Multi-part keys a model may confuse: one part differs, and that part is near."""
            differing = [(x, y) for x, y in zip(decode(a, n, key_width), decode(b, n, key_width),
                                                strict=True) if x != y]
            return len(differing) == 1 and near_keys(*differing[0])

        return score_recall(item, parsed, near)

    def oracle_answer(self, item: Item) -> str:
        return ", ".join(show_value(item, code) for code in item.expected)


class QmkarKv(KvFamily):
    name = "qmkar-kv"
    params_type = QmkarKvParams
    options = {
        "pairs": "key-value pairs per context",
        "targets": "pairs of the queried key, t",
        "key_range": "key parts LOW..HIGH",
        "value_range": "value parts LOW..HIGH",
        "placement": PLACEMENT_HELP,
        "near_keys": "distractors whose key is within 2 of the target or one digit off",
        "key_tokens": "numbers per key, n of KnVm",
        "value_tokens": "numbers per value, m of KnVm",
    }
    placeholders = {
        "pairs": "the context: 'k: K1-K2, v: V1-V2' joined by '; '",
        "key": "the queried key, its parts joined by '-'",
    }
    width_name = "targets"
    position_label = "position in the context (Pos0 = first occurrence)"

    def check(self, params: QmkarKvParams) -> None:
        self.check_parts(params)
        value_space = params.value_range.size ** params.value_tokens
        self.check_counts(params.pairs, params.targets)
        require(params.targets <= value_space,
                f"--value-range {params.value_range} with --value-tokens {params.value_tokens} "
                f"holds fewer than the {params.targets} distinct target values needed")
        require(params.key_range.size ** params.key_tokens >= 2,
                f"--key-range {params.key_range} must give at least 2 keys")
        check_placement(params.placement, params.pairs, params.targets)
        require(params.near_keys >= 0, f"--near-keys must be at least 0, not {params.near_keys}")
        require(params.near_keys <= params.pairs - params.targets,
                f"--near-keys ({params.near_keys}) cannot exceed the {params.pairs - params.targets} "
                "distractor pairs (--pairs minus --targets)")

    def generate_one(self, params: QmkarKvParams, seed: int, index: int) -> Item:
        rng = random.Random(f"qmkar-kv/{seed}/{index}")
        keys, values = params.key_range, params.value_range
        key_code = partial(encode, part_width=width(keys))
        value_code = partial(encode, part_width=width(values))
        target = _parts(rng, params.key_tokens, keys)
        target_values: list[tuple[int, ...]] = []
        while len(target_values) < params.targets:
            candidate = _parts(rng, params.value_tokens, values)
            if candidate not in target_values:
                target_values.append(candidate)
        distractor_keys = [_near_key(rng, target, keys) for _ in range(params.near_keys)]
        while len(distractor_keys) < params.pairs - params.targets:
            key = _parts(rng, params.key_tokens, keys)
            if key != target:
                distractor_keys.append(key)
        target_pairs = [(key_code(target), value_code(v)) for v in target_values]
        noise = [(key_code(k), value_code(_parts(rng, params.value_tokens, values)))
                 for k in distractor_keys]
        pairs, depths = arrange(rng, params.placement, target_pairs, noise)
        query = key_code(target)
        positions = [i for i, (k, _) in enumerate(pairs) if k == query]
        variants: dict[str, Any] = {}
        if params.placement != Placement():
            variants["placement"] = params.placement
        if params.near_keys:
            variants["near_keys"] = params.near_keys
        recorded = QmkarKvParams(pairs=params.pairs, targets=params.targets,
                                 **self.recorded(params, seed, **variants))
        return self.recall_item(index, recorded, pairs, [query], positions, depths)


class MqarKv(KvFamily):
    name = "mqar-kv"
    params_type = MqarKvParams
    options = {
        "pairs": "key-value pairs per context",
        "queries": "keys queried per question",
        "key_range": "key parts LOW..HIGH",
        "value_range": "value parts LOW..HIGH",
        "key_tokens": "numbers per key, n of KnVm",
        "value_tokens": "numbers per value, m of KnVm",
    }
    placeholders = {
        "pairs": "the context: 'k: K1-K2, v: V1-V2' joined by '; '",
        "keys": "the queried keys (parts joined by '-') joined by ', '",
    }
    width_name = "queries"
    one_key = False
    position_label = "queried key, in the order asked"

    def check(self, params: MqarKvParams) -> None:
        self.check_parts(params)
        key_space = params.key_range.size ** params.key_tokens
        self.check_counts(params.pairs, params.queries)
        require(params.pairs <= key_space,
                f"MQAR keys are unique: --pairs {params.pairs} needs {params.pairs} keys but "
                f"--key-range {params.key_range} with --key-tokens {params.key_tokens} gives {key_space}")

    def generate_one(self, params: MqarKvParams, seed: int, index: int) -> Item:
        rng = random.Random(f"mqar-kv/{seed}/{index}")
        keys, values = params.key_range, params.value_range
        seen: set[tuple[int, ...]] = set()
        pair_keys: list[tuple[int, ...]] = []
        while len(pair_keys) < params.pairs:
            key = _parts(rng, params.key_tokens, keys)
            if key not in seen:
                seen.add(key)
                pair_keys.append(key)
        pairs = [(encode(k, width(keys)), encode(_parts(rng, params.value_tokens, values), width(values)))
                 for k in pair_keys]
        query_positions = rng.sample(range(params.pairs), params.queries)
        query = [pairs[i][0] for i in query_positions]
        recorded = MqarKvParams(pairs=params.pairs, queries=params.queries,
                                **self.recorded(params, seed))
        return self.recall_item(index, recorded, pairs, query, query_positions)


QMKAR_KV = QmkarKv()
MQAR_KV = MqarKv()

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
from typing import NamedTuple

from qmkar.tasks.base import IntRange, Item, item_id, require
from qmkar.tasks.placement import Placement, arrange, check_placement, near_candidates

SEPARATOR = "-"


class QmkarKvParams(NamedTuple):
    pairs: int = 500
    targets: int = 3
    key_tokens: int = 2
    value_tokens: int = 2
    key_range: IntRange = IntRange(100, 300)
    value_range: IntRange = IntRange(1000, 9999)
    placement: Placement = Placement()
    near_keys: int = 0


class MqarKvParams(NamedTuple):
    pairs: int = 500
    queries: int = 3
    key_tokens: int = 2
    value_tokens: int = 2
    key_range: IntRange = IntRange(100, 1000)
    value_range: IntRange = IntRange(1000, 9999)


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
    p = item.params
    return p["key_tokens"], p["key_width"], p["value_tokens"], p["value_width"]


def show_key(item: Item, code: int) -> str:
    n, kw, _, _ = shape(item)
    return SEPARATOR.join(str(part) for part in decode(code, n, kw))


def show_value(item: Item, code: int) -> str:
    _, _, m, vw = shape(item)
    return SEPARATOR.join(str(part) for part in decode(code, m, vw))


def check(params: QmkarKvParams | MqarKvParams) -> None:
    """Raise UsageError for options no dataset can satisfy."""
    require(params.pairs >= 1, f"--pairs must be at least 1, not {params.pairs}")
    require(1 <= params.key_tokens <= 16, f"--key-tokens must be 1..16, not {params.key_tokens}")
    require(1 <= params.value_tokens <= 16, f"--value-tokens must be 1..16, not {params.value_tokens}")
    key_space = params.key_range.count ** params.key_tokens
    value_space = params.value_range.count ** params.value_tokens
    if isinstance(params, QmkarKvParams):
        require(params.targets >= 1, f"--targets must be at least 1, not {params.targets}")
        require(params.targets <= params.pairs,
                f"--targets ({params.targets}) cannot exceed --pairs ({params.pairs})")
        require(params.targets <= value_space,
                f"--value-range {params.value_range} with --value-tokens {params.value_tokens} "
                f"holds fewer than the {params.targets} distinct target values needed")
        require(key_space >= 2, f"--key-range {params.key_range} must give at least 2 keys")
        check_placement(params.placement, params.pairs, params.targets)
        require(params.near_keys >= 0, f"--near-keys must be at least 0, not {params.near_keys}")
        require(params.near_keys <= params.pairs - params.targets,
                f"--near-keys ({params.near_keys}) cannot exceed the {params.pairs - params.targets} "
                "distractor pairs (--pairs minus --targets)")
        return
    require(params.queries >= 1, f"--queries must be at least 1, not {params.queries}")
    require(params.queries <= params.pairs,
            f"--queries ({params.queries}) cannot exceed --pairs ({params.pairs})")
    require(params.pairs <= key_space,
            f"MQAR keys are unique: --pairs {params.pairs} needs {params.pairs} keys but "
            f"--key-range {params.key_range} with --key-tokens {params.key_tokens} gives {key_space}")


def _parts(rng: random.Random, count: int, value_range: IntRange) -> tuple[int, ...]:
    return tuple(rng.randint(value_range.low, value_range.high) for _ in range(count))


def _near_key(rng: random.Random, target: tuple[int, ...], key_range: IntRange) -> tuple[int, ...]:
    """The target with one part replaced by a near number (within 2, or one digit apart)."""
    index = rng.randrange(len(target))
    replaced = list(target)
    replaced[index] = rng.choice(near_candidates(target[index], key_range))
    return tuple(replaced)


def _options(params: QmkarKvParams | MqarKvParams, seed: int) -> dict[str, object]:
    options: dict[str, object] = {"pairs": params.pairs}
    if isinstance(params, QmkarKvParams):
        options["targets"] = params.targets
    else:
        options["queries"] = params.queries
    options.update(
        key_tokens=params.key_tokens, value_tokens=params.value_tokens,
        key_range=str(params.key_range), value_range=str(params.value_range),
        key_width=width(params.key_range), value_width=width(params.value_range),
    )
    if isinstance(params, QmkarKvParams):
        if params.placement != Placement():
            options["placement"] = str(params.placement)
        if params.near_keys:
            options["near_keys"] = params.near_keys
    options["seed"] = seed
    return options


def generate_one(params: QmkarKvParams | MqarKvParams, seed: int, index: int) -> Item:
    """Item `index` of the dataset for `seed`; independent of how many items are made."""
    if isinstance(params, QmkarKvParams):
        return _qmkar_kv(params, seed, index)
    return _mqar_kv(params, seed, index)


def _qmkar_kv(params: QmkarKvParams, seed: int, index: int) -> Item:
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
    options = _options(params, seed)
    content = {"pairs": pairs, "query": [query], "options": options}
    return Item(
        id=item_id("qmkar-kv", index, content),
        task="qmkar-kv",
        pairs=pairs,
        query=[query],
        expected=[pairs[i][1] for i in positions],
        target_positions=positions,
        params=options,
        depths=depths,
    )


def _mqar_kv(params: MqarKvParams, seed: int, index: int) -> Item:
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
    options = _options(params, seed)
    content = {"pairs": pairs, "query": query, "options": options}
    return Item(
        id=item_id("mqar-kv", index, content),
        task="mqar-kv",
        pairs=pairs,
        query=query,
        expected=[pairs[i][1] for i in query_positions],
        target_positions=query_positions,
        params=options,
    )


def answer_text(item: Item) -> str:
    """A correct answer, as the oracle writes it: whole values joined by ', '."""
    return ", ".join(show_value(item, code) for code in item.expected)

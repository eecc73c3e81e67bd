"""Generators: seeded, byte-identical, the blog's shape, clear errors for impossible options."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from qmkar.errors import UsageError
from qmkar.tasks import generate, make_spec
from qmkar.tasks.base import canonical_json


def dump(task: str, n: int = 5, seed: int = 0, **options) -> list[str]:
    return [item.model_dump_json() for item in generate(make_spec(task, **options), n, seed)]


@pytest.mark.parametrize("task", ["qmkar", "mqar", "counting"])
def test_same_seed_same_bytes_other_seed_other_data(task: str) -> None:
    assert dump(task) == dump(task)
    assert dump(task) != dump(task, seed=1)


def test_item_i_does_not_depend_on_n() -> None:
    assert dump("qmkar", n=3) == dump("qmkar", n=7)[:3]


def test_ids_change_with_options() -> None:
    a = next(generate(make_spec("qmkar"), 1, 0)).id
    b = next(generate(make_spec("qmkar", pairs=100), 1, 0)).id
    assert a != b and a.startswith("qmkar-0000-")


def test_qmkar_has_the_blog_shape() -> None:
    for item in generate(make_spec("qmkar"), 20, 3):
        keys = Counter(k for k, _ in item.pairs)
        target = item.query[0]
        assert len(item.pairs) == 500
        assert keys[target] == 3
        assert all(100 <= k <= 300 for k in keys)
        assert all(1000 <= v <= 9999 for _, v in item.pairs)
        assert len(set(item.expected)) == 3
        # context order: positions ascend and point at the target's pairs
        assert item.target_positions == sorted(item.target_positions)
        assert [item.pairs[i] for i in item.target_positions] == [(target, v) for v in item.expected]
        # non-target keys repeat too, about 2.5 times on average as in the blog's file
        others = [c for k, c in keys.items() if k != target]
        assert max(others) > 1
        assert 2.0 < sum(others) / len(others) < 3.2


def test_unique_distractors_leaves_only_the_target_repeating() -> None:
    for item in generate(make_spec("qmkar", pairs=150, unique_distractors=True), 5, 0):
        keys = Counter(k for k, _ in item.pairs)
        assert keys[item.query[0]] == 3
        assert all(c == 1 for k, c in keys.items() if k != item.query[0])


def test_qmkar_options() -> None:
    item = next(generate(make_spec("qmkar", pairs=50, targets=5, key_range="10..20",
                                   value_range="100..199"), 1, 0))
    assert len(item.pairs) == 50 and len(item.expected) == 5
    assert all(10 <= k <= 20 and 100 <= v <= 199 for k, v in item.pairs)


def test_mqar_keys_are_unique_and_expected_follows_the_question_order() -> None:
    for item in generate(make_spec("mqar", queries=4), 10, 0):
        keys = [k for k, _ in item.pairs]
        assert len(keys) == len(set(keys)) == 500
        assert all(100 <= k <= 1000 for k in keys)
        lookup = dict(item.pairs)
        assert item.expected == [lookup[k] for k in item.query]
        assert len(item.query) == 4


def test_counting_queries_a_value_in_the_list() -> None:
    for item in generate(make_spec("counting"), 20, 0):
        assert len(item.values) == 500 and all(0 <= v <= 50 for v in item.values)
        assert item.expected == [item.values.count(item.query[0])]
        assert item.expected[0] >= 1


@pytest.mark.parametrize(
    "task, options, fragment",
    [
        ("qmkar", {"targets": 10, "pairs": 5}, "cannot exceed --pairs"),
        ("qmkar", {"pairs": 0}, "at least 1"),
        ("qmkar", {"unique_distractors": True, "key_range": "100..110"}, "distinct non-target keys"),
        ("qmkar", {"key_range": "300..100"}, "empty or negative"),
        ("qmkar", {"key_range": "abc"}, "LOW..HIGH"),
        ("qmkar", {"value_range": "1..2", "targets": 3}, "distinct target values"),
        ("mqar", {"pairs": 2000}, "holds only 901"),
        ("mqar", {"queries": 9, "pairs": 5}, "cannot exceed"),
        ("counting", {"targets": 3}, "does not apply to --task counting"),
        ("nope", {}, "unknown task"),
    ],
)
def test_impossible_options_raise_a_clear_error(task: str, options: dict, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        make_spec(task, **options)


def test_n_below_one_is_refused() -> None:
    with pytest.raises(UsageError, match="-n must be at least 1"):
        list(generate(make_spec("qmkar"), 0, 0))


@pytest.mark.parametrize("pairs", [
    [(248, 5542), (169, 2882), (0, 10**15 - 1)],
    [[1, 2], [3, 4]],  # lists, as a dataset file holds them
    [(-1, 2)],
    [(10**20, -(10**20))],  # beyond 64 bits
    [],
    [(1, 2, 3), (4,)],  # as many numbers as two pairs, in other shapes
    [(1, 2), (3, 4, 5)],
    [(True, 2)],  # JSON writes a bool as a word
    [(1.5, 2)],
    [(1, (2, 3))],
    [("1", 2)],
])
def test_canonical_json_writes_what_json_dumps_writes(pairs: list) -> None:
    content = {"query": [248], "pairs": pairs, "options": {"pairs": 3, "key_range": "100..300"}}
    assert canonical_json(content) == json.dumps(content, sort_keys=True, separators=(",", ":")).encode()


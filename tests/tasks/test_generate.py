"""Generators: seeded, byte-identical, the blog's shape, clear errors for impossible options."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest
from pydantic import ValidationError

from qmkar.errors import UsageError
from qmkar.records import ItemLine, item_line
from qmkar.tasks import generate, make_spec
from qmkar.tasks.base import REGISTRY as FAMILIES
from qmkar.tasks.base import Item, canonical_json
from qmkar.tasks.family import pairs_text


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


@pytest.mark.parametrize("options", [
    {}, {"pairs": 40, "targets": 1}, {"pairs": 12, "targets": 12}, {"key_range": "1..2", "pairs": 30},
    {"value_range": "1..3", "targets": 3, "pairs": 20}, {"unique_distractors": True, "pairs": 100},
    {"near_keys": 5, "pairs": 60}, {"near_keys": 3, "unique_distractors": True, "pairs": 60},
    {"placement": "start"}, {"placement": "end"}, {"placement": "spread"}, {"placement": "depth:0.1,0.5,0.9"},
])
def test_qmkar_positions_are_where_the_queried_key_occurs(options: dict) -> None:
    for item in generate(make_spec("qmkar", **options), 30, 1):
        target = item.query[0]
        assert item.target_positions == [i for i, (k, _) in enumerate(item.pairs) if k == target]
        assert item.expected == [item.pairs[i][1] for i in item.target_positions]


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



@pytest.mark.parametrize("pairs", [
    [(248, 5542), (169, 2882), (0, 10**15 - 1)],
    [[1, 2], [3, 4]],  # lists
    [(1, 2), [3, 4]],
    [(-1, 2)],
    [(10**20, -(10**20))],  # beyond 64 bits: msgspec does not write them
    [(1, 2.0)],  # a float pydantic takes as an int
    [(True, 2)],
    [("1", 2)],
])
def test_a_made_items_pairs_id_line_and_prompt_are_those_of_its_pairs_validated(pairs: list) -> None:
    """new_item checks pairs of two ints by their JSON, not by pydantic: what it makes is what
    validating them makes, whatever shape they came in."""
    family = FAMILIES["qmkar"]
    params = make_spec("qmkar").params
    given = {"query": [1], "expected": [2], "target_positions": [0]}
    made = family.new_item(3, params, ("pairs", "query"), pairs=list(pairs), **given)
    validated = Item(id=made.id, task="qmkar", params=params, pairs=pairs, **given)
    assert made == validated and all(type(pair) is tuple for pair in made.pairs or [])
    content = {"pairs": validated.pairs, "query": [1], "options": params.model_dump(mode="json")}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert made.id == f"qmkar-0003-{digest[:8]}"
    assert item_line(made) == ItemLine(item=validated).model_dump_json()
    assert pairs_text(made) == "; ".join(f"k: {k}, v: {v}" for k, v in validated.pairs or [])


@pytest.mark.parametrize("pairs", [[(1, 2, 3), (4,)], [(1, 2), (3, 4, 5)], [(1, (2, 3))]])
def test_pairs_that_are_not_pairs_are_refused_as_before(pairs: list) -> None:
    with pytest.raises(ValidationError):
        FAMILIES["qmkar"].new_item(0, make_spec("qmkar").params, ("pairs", "query"), pairs=pairs, query=[1],
                                   expected=[], target_positions=[])


def test_an_item_changed_or_copied_writes_its_own_pairs() -> None:
    """The pairs' JSON kept from the item's making is dropped with any change."""
    item = next(generate(make_spec("qmkar", pairs=20), 1, 0))
    copied = item.model_copy(update={"pairs": [(7, 8)]})
    changed = item.model_copy()
    changed.pairs = [(9, 10)]
    for other in (copied, changed):
        assert item_line(other) == ItemLine(item=other).model_dump_json()
        assert pairs_text(other) == f"k: {other.pairs[0][0]}, v: {other.pairs[0][1]}"

"""Placement and near-key noise for qmkar (and the pin that default data never changes)."""

from __future__ import annotations

import hashlib
import json

import pytest

from qmkar.errors import UsageError
from qmkar.parse import ParsedAnswer
from qmkar.score import near_keys
from qmkar.tasks import IntRange, generate, make_spec
from qmkar.tasks.datasets import write_items
from qmkar.tasks.placement import Placement, near_candidates, parse_placement
from tests.support.factories import score

# sha256 of datasets written by the core pipeline (commit 9b51d13) before any variant
# existed. Random placement is the default and must keep these bytes for these seeds.
PINNED = [
    (dict(task="qmkar"), 20, 7, "df9f3769e7d0819fe536cc6352cf35c5ea416240d0690a4e2b5adfa44525c9d5"),
    (dict(task="qmkar", targets=5, pairs=100, unique_distractors=True), 20, 3,
     "533845ce03901cd86b08c7ecfffada848711ccb786df348243a709f1c62af380"),
    (dict(task="mqar"), 20, 7, "6f22020fe5e138fd874a000816ebb5e331123b8a66cd20de696b82134442e1b1"),
    (dict(task="counting"), 20, 7, "4ce84f42c7a9913d5915ae94f72478db755428a1306513a7d4686e5d8521d262"),
]

# The variant tasks' datasets as 64f049d wrote them, before an id hashed an item's validated
# fields: every family keeps its ids.
PINNED += [
    (dict(task="qmkar-kv"), 20, 7, "60772247fd6936221e2c899bfdf79a38c452ab9a407e9e050e927d2fc1b6e194"),
    (dict(task="mqar-kv"), 20, 7, "92bd30bb0cd880444bad5aab277da2a4b7c54780e79a2018df0a8c587c10f14c"),
    (dict(task="parity"), 20, 7, "5b54ef4c30c8132afbb4119cc7439571566014c853e7193ca1e62a04da92cb2a"),
    (dict(task="parity-ones"), 20, 7, "955c0a0369b919a3f50d0c4688f74fb8ec646027f43a2fba8e8d0971ddf37374"),
    (dict(task="dyck"), 20, 7, "98b5d8749a69a13386190d1de3e27f377d654536e51c38781e531bd4404198be"),
    (dict(task="copy"), 20, 7, "8fe94410d96c863d5954f611c62ca65d10b7d63c0a3ce27144d187b0cf32dfa4"),
]


@pytest.mark.parametrize(("options", "n", "seed", "digest"), PINNED)
def test_default_datasets_are_byte_identical_to_the_core(tmp_path, options, n, seed, digest):
    path = tmp_path / "items.jsonl"
    write_items(generate(make_spec(**options), n, seed), path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_explicit_random_placement_is_the_default():
    default = list(generate(make_spec("qmkar", pairs=60), 5, 1))
    explicit = list(generate(make_spec("qmkar", pairs=60, placement="random", near_keys=0), 5, 1))
    assert [i.model_dump_json() for i in default] == [i.model_dump_json() for i in explicit]
    line = json.loads(default[0].model_dump_json())
    assert "depths" not in line and "placement" not in line["params"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("random", Placement()), ("END", Placement("end")), ("spread", Placement("spread")),
     ("depth:0.1,0.5,0.9", Placement("depth", (0.1, 0.5, 0.9))),
     ("depth:0,1", Placement("depth", (0.0, 1.0)))],
)
def test_parse_placement(text, expected):
    assert parse_placement(text) == expected


@pytest.mark.parametrize("text", ["middle", "depth:", "depth:1.5", "depth:a,b", "depth:-0.1"])
def test_parse_placement_rejects(text):
    with pytest.raises(UsageError, match="--placement"):
        parse_placement(text)


def _one(**options):
    return next(iter(generate(make_spec("qmkar", **options), 1, 4)))


def test_start_and_end_put_targets_at_the_edges():
    start = _one(pairs=41, targets=3, placement="start")
    assert start.target_positions == [0, 1, 2]
    assert start.depths == [0.0, 0.025, 0.05]
    end = _one(pairs=41, targets=3, placement="end")
    assert end.target_positions == [38, 39, 40]
    assert end.depths == [0.95, 0.975, 1.0]
    assert str(end.params.placement) == "end"


def test_spread_and_explicit_depths():
    spread = _one(pairs=101, targets=3, placement="spread")
    assert spread.target_positions == [0, 50, 100]
    assert spread.depths == [0.0, 0.5, 1.0]
    depths = _one(pairs=101, targets=3, placement="depth:0.9,0.1,0.5")
    assert depths.target_positions == [10, 50, 90]
    assert depths.depths == [0.1, 0.5, 0.9]
    assert depths.target_depths() == [0.1, 0.5, 0.9]
    target = depths.query[0]
    assert [k for k, _ in depths.pairs].count(target) == 3
    assert depths.expected == [depths.pairs[i][1] for i in depths.target_positions]


def test_random_items_derive_their_depths_from_positions():
    item = _one(pairs=51)
    assert item.depths is None
    assert item.target_depths() == [p / 50 for p in item.target_positions]


@pytest.mark.parametrize(
    ("options", "message"),
    [(dict(placement="depth:0.1,0.5"), "gives 2 depths but --targets is 3"),
     (dict(placement="depth:0.5,0.5,0.9"), "same pair"),
     (dict(near_keys=498), "cannot exceed"),
     (dict(near_keys=-1), "at least 0"),
     (dict(near_keys=40, unique_distractors=True, pairs=100), "distinct keys near")],
)
def test_impossible_variant_options_are_clear_errors(options, message):
    with pytest.raises(UsageError, match=message):
        list(generate(make_spec("qmkar", **options), 1, 0))


@pytest.mark.parametrize(
    ("task", "options"),
    [("mqar", dict(placement="end")), ("counting", dict(near_keys=3)), ("mqar", dict(near_keys=3))],
)
def test_variant_options_do_not_apply_to_other_tasks(task, options):
    with pytest.raises(UsageError, match="does not apply to --task"):
        make_spec(task, **options)


def test_near_candidates_are_near_by_the_scorers_rule():
    found = near_candidates(150, IntRange(100, 300))
    assert {148, 149, 151, 152, 140, 250, 159}.issubset(found)
    assert 150 not in found and 350 not in found
    assert all(near_keys(150, k) for k in found)


def test_near_key_distractors_are_planted():
    noisy = _one(pairs=200, unique_distractors=True, near_keys=12)
    target = noisy.query[0]
    near_in = [k for k, _ in noisy.pairs if near_keys(k, target)]
    assert len(near_in) >= 12
    assert len(noisy.pairs) == 200 and noisy.params.near_keys == 12
    assert len(set(k for k, _ in noisy.pairs if k != target)) == 197  # still unique


def test_a_near_keys_value_is_an_fp_of_kind_near():
    item = _one(pairs=100, near_keys=5)
    target = item.query[0]
    near_value = next(v for k, v in item.pairs if near_keys(k, target) and v not in item.expected)
    result = score(item, ParsedAnswer(values=[*item.expected, near_value]))
    assert result.fp == 1 and result.fp_kinds["near"] == 1 and result.outcome == "fp"


def test_depth_buckets_follow_the_placement():
    item = _one(pairs=101, targets=3, placement="depth:0.1,0.5,0.9")
    result = score(item, ParsedAnswer(values=[item.expected[0]]))
    assert result.depth_buckets == [0, 2, 4]
    assert result.fn_by_position == [0, 1, 1]


@pytest.mark.parametrize("placement", ["start", "end", "spread", "depth:0.2,0.4,0.6"])
def test_same_seed_same_data_for_placements(placement):
    spec = make_spec("qmkar", pairs=80, placement=placement, near_keys=4)
    first = [i.model_dump_json() for i in generate(spec, 4, 11)]
    assert first == [i.model_dump_json() for i in generate(spec, 4, 11)]
    assert first != [i.model_dump_json() for i in generate(spec, 4, 12)]


def test_new_item_fields_round_trip_and_stay_in_the_schema():
    from qmkar.tasks import Item

    item = _one(pairs=30, placement="start")
    assert Item.model_validate_json(item.model_dump_json()) == item
    assert {"depths", "text"} <= set(Item.model_json_schema(mode="serialization")["properties"])

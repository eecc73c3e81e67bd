"""Per-question metrics and their aggregates, on hand-checked cases."""

from __future__ import annotations

import random

import msgspec
import pytest

from qmkar.parse import ParsedAnswer
from qmkar.score import (
    FEW_VALUES,
    FP_KINDS,
    Score,
    clustered_interval,
    keys_near,
    near_keys,
    score_recall,
    summarize,
    value_owners,
    wilson_interval,
)
from qmkar.tasks import family
from qmkar.tasks.base import Item
from qmkar.tasks.placement import Placement
from tests.support.factories import counting_item, recall_item, score


def predict(*values: int) -> ParsedAnswer:
    return ParsedAnswer(values=list(values))


def test_all_values_is_true() -> None:
    s = score(recall_item(), predict(1234, 4527, 6383))
    assert (s.correct, s.outcome, s.tp, s.fp, s.fn) == (True, "true", 3, 0, 0)
    assert s.fn_by_position == [0, 0, 0]


def test_missing_the_first_occurrence_is_fn_at_pos0() -> None:
    s = score(recall_item(), predict(6383, 1234))
    assert (s.correct, s.outcome, s.tp, s.fn) == (False, "fn", 2, 1)
    assert s.fn_by_position == [1, 0, 0]


def test_false_positive_kinds() -> None:
    # 7777 belongs to key 231 (near 230), 3333 to 151 (not near 230), 9999 to no key.
    s = score(recall_item(), predict(4527, 6383, 1234, 7777, 3333, 9999))
    assert (s.outcome, s.fp) == ("fp", 3)
    assert s.fp_kinds == {"near": 1, "other_key": 1, "invented": 1}


def test_both_kinds_of_error() -> None:
    s = score(recall_item(), predict(4527, 8888))
    assert s.outcome == "both" and s.fp_kinds["near"] == 1  # 250 differs from 230 by one digit


def test_near_keys() -> None:
    assert near_keys(150, 151) and near_keys(150, 152) and near_keys(230, 250)
    assert near_keys(230, 930) and near_keys(150, 153) and not near_keys(150, 163) and not near_keys(150, 150)
    assert near_keys(99, 100) and not near_keys(99, 199)


@pytest.mark.parametrize("key", [0, 1, 2, 5, 9, 10, 15, 20, 99, 100, 101, 105, 150, 230, 999, 1000, 1009])
def test_keys_near_is_every_key_near_keys_calls_near(key: int) -> None:
    near = {other for other in range(-1100, 10100) if near_keys(other, key)}
    assert keys_near([key]) & set(range(-1100, 10100)) == near
    assert len(keys_near([key]) or ()) == len(near)  # nothing outside the range searched


def test_false_positives_are_classed_alike_together_and_one_by_one() -> None:
    # Many false positives are counted together through keys_near (score._count_kinds); a
    # nearness rule that is not near_keys itself (the same rule, wrapped) classes each value
    # by classify_fp. Values repeat in some answers, negative keys are queried in some
    # (keys_near gives None), and the count of false positives falls on both sides of
    # FEW_VALUES.
    rng = random.Random(0)
    walked = 0
    for _ in range(600):
        pairs = [(rng.randint(-20, 1200), rng.randint(0, 50)) for _ in range(40)]
        query = [rng.choice(pairs)[0] for _ in range(rng.randint(1, 3))]
        item = Item(id="fp", task="mqar", pairs=pairs, query=query, expected=[pairs[0][1]],
                    target_positions=[0])
        values = [rng.randint(0, 60) for _ in range(rng.randint(0, 40))]
        parsed = ParsedAnswer(values=values if rng.random() < 0.3 else list(dict.fromkeys(values)))
        fast = family("mqar").score(item, parsed)
        slow = score_recall(item, parsed, lambda a, b: near_keys(a, b))
        assert fast == slow, (pairs, query, parsed.values)
        walked += fast.fp > FEW_VALUES and keys_near(query) is not None
    assert 100 < walked < 600


def test_an_echoed_context_scores_alike_with_and_without_keys_near() -> None:
    # Every value of the context as the answer: hundreds of false positives held by keys, so
    # score_recall classes them through keys_near; a nearness rule that is not near_keys
    # itself (the same rule, wrapped) takes the call per owner.
    from qmkar.tasks import generate, make_spec

    for item in generate(make_spec("qmkar", pairs=500, near_keys=20), 5, 0):
        parsed = ParsedAnswer(values=list(dict.fromkeys(value for _, value in item.pairs or [])))
        fast = family("qmkar").score(item, parsed)
        slow = score_recall(item, parsed, lambda a, b: near_keys(a, b))
        assert fast.fp > 400 and fast.fp_kinds["near"] >= 20
        assert fast == slow


def test_value_owners_reads_the_pairs_written_text_as_it_reads_the_pairs() -> None:
    # A few values are searched for in the pairs' JSON, kept when the item was made or within
    # its made-ahead line; more, or an item without the text, walk the pairs. Small keys and
    # values, negatives among them, so that values repeat, one is a suffix of another (5, 15,
    # -5) and keys share digits with values.
    from qmkar.records import item_of_line, make_ahead
    from qmkar.tasks import generate, make_spec
    from qmkar.tasks.base import int_pairs_json, keep_made_ahead, keep_pairs_json

    rng = random.Random(1)
    template = next(iter(generate(make_spec("qmkar", pairs=20), 1, 0)))
    for _ in range(200):
        pairs = [(rng.randint(-30, 300), rng.randint(-30, 60)) for _ in range(rng.randint(1, 60))]
        plain = template.model_copy(update={"pairs": pairs})
        kept = plain.model_copy()
        keep_pairs_json(kept, int_pairs_json(pairs) or b"")
        made = make_ahead(plain)
        ahead = item_of_line(made.line, {})
        keep_made_ahead(ahead, made)
        assert plain.pairs_as_written() is None
        for item in (kept, ahead):
            text, start, end = item.pairs_as_written() or ("", 0, 0)
            assert text[start:end] == (int_pairs_json(pairs) or b"").decode()
        for size in (1, 2, 3, FEW_VALUES, FEW_VALUES + 1, 40):
            values = set(rng.sample(range(-35, 70), size))
            truth = {v: {k for k, held in pairs if held == v} for v in values}
            truth = {v: keys for v, keys in truth.items() if keys}
            for item in (plain, kept, ahead):
                assert value_owners(item, values) == truth, (pairs, values)


def test_counting_over_under_and_unparsed() -> None:
    item = counting_item(count=12)
    assert score(item, predict(12)).correct
    over = score(item, predict(15))
    assert (over.outcome, over.abs_error, over.correct) == ("fp", 3, False)
    assert score(item, predict(10)).outcome == "fn"
    assert score(item, predict()).abs_error is None


def test_summary_of_recall() -> None:
    item = recall_item()
    scores = [score(item, predict(4527, 6383, 1234)), score(item, predict(6383, 1234)),
              score(item, predict(4527, 6383, 1234, 9999))]
    s = summarize("qmkar", "m", scores, ["timeout", "missing", "timeout"], refused=0)
    assert (s.n, s.correct, s.errors) == (3, 1, 3)
    assert s.errors_by_kind == {"timeout": 2, "missing": 1}
    assert s.outcomes == {"true": 1, "fn": 1, "fp": 1, "both": 0}
    assert (s.tp, s.fp, s.fn, s.fn_by_position) == (8, 1, 1, [1, 0, 0])
    assert s.accuracy == pytest.approx(1 / 3)


def test_summary_of_counting() -> None:
    item = counting_item(count=12)
    s = summarize("counting", "m", [score(item, predict(v)) for v in (12, 15, 10)] +
                  [score(item, predict())], [], counting=True)
    assert (s.n, s.exact, s.over, s.under, s.unparsed) == (4, 1, 1, 1, 1)
    assert s.mae == pytest.approx((0 + 3 + 2) / 3)


def test_wilson_interval_matches_known_values() -> None:
    # 15 of 20: Wilson 95% interval is about 0.531 to 0.888
    low, high = wilson_interval(15, 20)
    assert low == pytest.approx(0.5313, abs=1e-3) and high == pytest.approx(0.8881, abs=1e-3)
    low, high = wilson_interval(20, 20)
    assert high == 1.0 and low == pytest.approx(0.8389, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


# score_recall builds its Score without validation (score.recall_score); held here to what
# validating the same values gives, on random predictions for every recall task.
RECALL_OPTIONS = [("qmkar", {}), ("qmkar", {"pairs": 40, "targets": 4, "placement": Placement("spread")}),
                  ("qmkar", {"pairs": 9, "targets": 9, "near_keys": 0}), ("mqar", {}), ("qmkar-kv", {}),
                  ("mqar-kv", {})]


def _predictions(item: Item, rng: random.Random) -> list[list[int]]:
    held = [value for _, value in item.pairs or []]
    found = []
    for _ in range(12):
        values: list[int] = []
        for _ in range(rng.randint(0, 8)):
            source = rng.random()
            values.append(rng.choice(item.expected) if source < 0.4 else rng.choice(held) if source < 0.7
                          else rng.choice(item.expected) + rng.choice((-1, 1, 10)) if source < 0.85
                          else rng.randint(0, 10**6))
        found.append(list(dict.fromkeys(values)) if rng.random() < 0.8 else values)
    return found


@pytest.mark.parametrize("seed", range(2))
def test_a_recall_score_is_what_validating_it_gives(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    cases = []
    for task, options in RECALL_OPTIONS:
        rules = family(task)
        params = rules.make_params(options)
        for index in range(15):
            item = rules.generate_one(params, seed, index)
            cases += [(rules, item, ParsedAnswer(values=values, refused=not values and rng.random() < 0.5))
                      for values in _predictions(item, rng)]
    built = [rules.score(item, parsed) for rules, item, parsed in cases]
    monkeypatch.setattr("qmkar.score.recall_score", Score)
    for (rules, item, parsed), fast in zip(cases, built, strict=True):
        slow = rules.score(item, parsed)
        assert fast == slow, (item.id, parsed)
        assert list(fast.__dict__) == list(slow.__dict__)
        assert msgspec.json.encode(fast.__dict__) == msgspec.json.encode(slow.__dict__)  # True is not 1 here
        assert fast.model_fields_set == slow.model_fields_set
        assert fast.__pydantic_extra__ == slow.__pydantic_extra__
        assert fast.__pydantic_private__ == slow.__pydantic_private__
        assert fast.model_dump_json() == slow.model_dump_json()
    assert {fast.outcome for fast in built} == {"true", "fn", "fp", "both"}  # every kind of score is met
    assert {kind for fast in built for kind, count in fast.fp_kinds.items() if count} == set(FP_KINDS)


def test_a_conditions_summary_counts_what_a_plain_loop_over_its_records_counts() -> None:
    """report.summarize_records counts in several passes; held here to one plain loop over
    random records: samples, errors, truncated, refused and unparsed answers, repeated items."""
    from qmkar.condition import Condition
    from qmkar.records import CallError
    from qmkar.report import summaries, summarize_records
    from qmkar.slim import SlimItem, SlimRecord

    rng = random.Random(5)
    condition = Condition(provider="oracle", model="oracle", template="t", task="qmkar")
    items = [SlimItem(f"q{i}", "qmkar", 10, (1, 2), None, None, None) for i in range(7)]
    scores = [Score(correct=True, tp=2), Score(correct=False, fn=1, tp=1)]
    errors = [CallError(kind="timeout", message="slow", retryable=True),
              CallError(kind="missing", message="no answer", retryable=False)]
    for _ in range(50):
        records = []
        for _ in range(rng.randint(0, 40)):
            failed = rng.random() < 0.2
            records.append(SlimRecord(
                "oracle", None, rng.choice(items), condition, "c", rng.randint(0, 2),
                rng.choice(errors) if failed else None,
                None if failed or rng.random() < 0.1 else rng.choice(scores),
                rng.random() < 0.2, rng.random() < 0.2, rng.random() < 0.2, not failed, None, {}))
        summary = summarize_records("qmkar", "label", records)
        samples, truncated, refused, unparsed = 0, 0, 0, 0
        per_question: dict[str, list[int]] = {}
        by_sample: dict[int, list[int]] = {}
        for record in records:
            samples = max(samples, record.sample + 1)
            if record.error is not None or record.score is None:
                continue
            if record.truncated:
                truncated += 1
            else:
                refused += record.refused
                unparsed += record.unparsed
            for tally in (per_question.setdefault(record.item.id, [0, 0]),
                          by_sample.setdefault(record.sample, [0, 0])):
                tally[0] += record.score.correct
                tally[1] += 1
        assert (summary.samples, summary.truncated, summary.refused, summary.unparsed) == (
            samples, truncated, refused, unparsed)
        assert summary.questions == len(per_question)
        assert summary.by_sample == ([tuple(by_sample.get(s, [0, 0])) for s in range(samples)]
                                     if samples > 1 else [])
        assert summary.accuracy_ci == clustered_interval([(c, n) for c, n in per_question.values()])
        assert (summary.errors_permanent, summary.errors_retryable) == (
            sum(r.error is not None and r.error.permanent for r in records),
            sum(r.error is not None and not r.error.permanent for r in records))
    assert summaries([]) == []

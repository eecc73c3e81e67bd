"""Item + parsed answer -> metrics for one question, and their aggregates. Pure.

Recall (qmkar, mqar): TP / FP / FN over distinct values; the question is correct when
there is no FP and no FN. Outcome classes follow the blog: true, fn (False with FN),
fp (False with FP), both. `fn_by_position[i]` is 1 when the value at target position
i was missed (qmkar: Pos0 is the first occurrence in the context; mqar: the i-th
queried key). Each FP is classed by the key its value belongs to in the context:
`near` (within 2 of a queried key, or the same number of digits with exactly one
digit different), `other_key` (any other key), or `invented` (no pair holds it).

Counting: exact match, absolute error, over- or under-count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field

from qmkar.parse import ParsedAnswer
from qmkar.tasks.base import Item

FP_KINDS = ("near", "other_key", "invented")


class Score(BaseModel):
    """Metrics of one answered question."""

    correct: bool = Field(description="All expected values and nothing else (exact count).")
    tp: int = Field(default=0, description="Expected values predicted.")
    fp: int = Field(default=0, description="Predicted values that are not expected.")
    fn: int = Field(default=0, description="Expected values not predicted.")
    outcome: Literal["true", "fn", "fp", "both"] = Field(
        default="true", description="Blog outcome class."
    )
    fn_by_position: list[int] = Field(
        default_factory=list, description="1 where the value at that target position was missed."
    )
    fp_kinds: dict[str, int] = Field(
        default_factory=dict, description="FP count per kind: near, other_key, invented."
    )
    predicted_count: int | None = Field(default=None, description="Counting: the count given.")
    abs_error: int | None = Field(default=None, description="Counting: |given - true|.")


def near_keys(a: int, b: int) -> bool:
    """Keys a model may confuse: within 2 of each other, or one digit apart."""
    if a == b:
        return False
    if abs(a - b) <= 2:
        return True
    sa, sb = str(a), str(b)
    return len(sa) == len(sb) and sum(x != y for x, y in zip(sa, sb, strict=True)) == 1


def classify_fp(item: Item, value: int) -> str:
    """Which kind of false positive `value` is for this item."""
    owners = {k for k, v in item.pairs or [] if v == value}
    if not owners:
        return "invented"
    if any(near_keys(owner, q) for owner in owners for q in item.query):
        return "near"
    return "other_key"


def score_recall(item: Item, parsed: ParsedAnswer) -> Score:
    predicted = set(parsed.values)
    expected = set(item.expected)
    tp = len(predicted & expected)
    false_positives = [v for v in parsed.values if v not in expected]
    fn_by_position = [0 if v in predicted else 1 for v in item.expected]
    fn = len(expected - predicted)
    kinds = dict.fromkeys(FP_KINDS, 0)
    for value in false_positives:
        kinds[classify_fp(item, value)] += 1
    fp = len(false_positives)
    outcome = "true" if not fp and not fn else "both" if fp and fn else "fp" if fp else "fn"
    return Score(
        correct=outcome == "true", tp=tp, fp=fp, fn=fn, outcome=outcome,
        fn_by_position=fn_by_position, fp_kinds=kinds,
    )


def score_count(item: Item, parsed: ParsedAnswer) -> Score:
    truth = item.expected[0]
    if not parsed.values:
        return Score(correct=False, outcome="fn", fn=1)
    given = parsed.values[0]
    return Score(
        correct=given == truth,
        predicted_count=given,
        abs_error=abs(given - truth),
        outcome="true" if given == truth else "fp" if given > truth else "fn",
        tp=int(given == truth),
    )


def score(item: Item, parsed: ParsedAnswer) -> Score:
    """The metrics of one answer to `item`."""
    if item.task == "counting":
        return score_count(item, parsed)
    return score_recall(item, parsed)


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95% Wilson score interval for a proportion; (0, 1) when n is 0."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


class Summary(BaseModel):
    """Aggregate metrics of one model on one task. These are the keys of `report --format json`."""

    task: str = Field(description="Task family.")
    model: str = Field(description="Model name as given to --model.")
    n: int = Field(description="Questions answered (errors excluded).")
    correct: int = Field(description="Questions answered exactly right.")
    accuracy: float | None = Field(description="correct / n; null when n is 0.")
    accuracy_ci: tuple[float, float] = Field(description="95% Wilson interval of accuracy.")
    errors: int = Field(description="Questions with no answer because of an error; not counted as wrong.")
    errors_by_kind: dict[str, int] = Field(description="Errors per kind (missing, timeout, http_429...).")
    refused: int = Field(description="Answers that predicted nothing and read as refusals.")
    outcomes: dict[str, int] = Field(description="Counts of the outcome classes true, fn, fp, both.")
    tp: int = Field(description="Recall: expected values predicted, summed.")
    fp: int = Field(description="Recall: predicted values not expected, summed.")
    fn: int = Field(description="Recall: expected values missed, summed.")
    fn_by_position: list[int] = Field(description="Recall: misses at target position 0, 1, ...")
    fp_kinds: dict[str, int] = Field(
        description="Recall: FPs whose value belongs to a near key, another key, or no key."
    )
    exact: int | None = Field(default=None, description="Counting: exact counts.")
    mae: float | None = Field(default=None, description="Counting: mean absolute error over parsed answers.")
    over: int | None = Field(default=None, description="Counting: answers above the true count.")
    under: int | None = Field(default=None, description="Counting: answers below the true count.")
    unparsed: int | None = Field(default=None, description="Counting: answers with no number.")


def summarize(
    task: str, model: str, scores: Iterable[Score], errors: Iterable[str], refused: int = 0
) -> Summary:
    """Aggregate the scores of answered questions and the kinds of failed ones."""
    scores = list(scores)
    errors_by_kind: dict[str, int] = {}
    for kind in errors:
        errors_by_kind[kind] = errors_by_kind.get(kind, 0) + 1
    n = len(scores)
    correct = sum(s.correct for s in scores)
    outcomes = {name: sum(s.outcome == name for s in scores) for name in ("true", "fn", "fp", "both")}
    width = max((len(s.fn_by_position) for s in scores), default=0)
    fn_by_position = [sum(s.fn_by_position[i] for s in scores if i < len(s.fn_by_position))
                      for i in range(width)]
    fp_kinds = {kind: sum(s.fp_kinds.get(kind, 0) for s in scores) for kind in FP_KINDS}
    summary = Summary(
        task=task, model=model, n=n, correct=correct,
        accuracy=correct / n if n else None,
        accuracy_ci=wilson_interval(correct, n),
        errors=sum(errors_by_kind.values()), errors_by_kind=errors_by_kind,
        refused=refused, outcomes=outcomes,
        tp=sum(s.tp for s in scores), fp=sum(s.fp for s in scores), fn=sum(s.fn for s in scores),
        fn_by_position=fn_by_position, fp_kinds=fp_kinds,
    )
    if task == "counting":
        parsed = [s for s in scores if s.abs_error is not None]
        summary.exact = correct
        summary.mae = sum(s.abs_error or 0 for s in parsed) / len(parsed) if parsed else None
        summary.over = sum(s.outcome == "fp" for s in parsed)
        summary.under = sum(s.outcome == "fn" for s in parsed)
        summary.unparsed = n - len(parsed)
    return summary

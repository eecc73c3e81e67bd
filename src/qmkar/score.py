"""Item + parsed answer -> metrics for one question, and their aggregates. Pure.

A task family (tasks/) picks its scorer from the ones here. Recall (qmkar, mqar):
TP / FP / FN over distinct values; the question is correct when there is no FP and
no FN. Outcome classes follow the blog: true, fn (False with FN), fp (False with FP),
both. `fn_by_position[i]` is 1 when the value at target position i was missed (qmkar:
Pos0 is the first occurrence in the context; mqar: the i-th queried key). Each FP is
classed by the key its value belongs to in the context: `near` (within 2 of a queried
key, or the same number of digits with exactly one digit different), `other_key` (any
other key), or `invented` (no pair holds it); multi-part recall passes its own
nearness rule.

Each expected value also gets a depth bucket (`depth_buckets`, parallel to
`fn_by_position`): its pair's depth in the context (0 = first pair, 1 = last; see
Item.target_depths) cut into DEPTH_BUCKETS equal bins, so reports show FN by depth
next to FN by order.

Counting: exact match, absolute error, over- or under-count.

Labels (parity, parity-ones, dyck): correct when the label given is the true one; a
wrong label is outcome `both` (a wrong value given, the right one missed), no label
`fn`. Copying (copy): correct when the whole sequence is copied exactly; per token,
`tokens_right` counts positions holding the right token. Both record the context
`length` so reports can show accuracy per length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from qmkar.deferred import DeferredModel

if TYPE_CHECKING:  # items are read, never built, here: no import of the task registry
    from qmkar.tasks.base import Item

from qmkar.parse import ParsedAnswer
from qmkar.trusted import builder

FP_KINDS = ("near", "other_key", "invented")
Outcome = Literal["true", "fn", "fp", "both"]


def outcome_of(fp: int, fn: int) -> Outcome:
    """The blog's outcome class: true, False with FN, False with FP, or both."""
    return "true" if not fp and not fn else "both" if fp and fn else "fp" if fp else "fn"


class Score(DeferredModel):
    """Metrics of one answered question."""

    correct: bool = Field(description="All expected values and nothing else (exact count).")
    tp: int = Field(default=0, description="Expected values predicted.")
    fp: int = Field(default=0, description="Predicted values that are not expected.")
    fn: int = Field(default=0, description="Expected values not predicted.")
    outcome: Outcome = Field(
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
    depth_buckets: list[int] = Field(
        default_factory=list,
        description="Recall: depth bucket (0..DEPTH_BUCKETS-1) of each target, parallel to fn_by_position.",
    )
    length: int | None = Field(default=None, description="Sequence tasks: the context length.")
    tokens_right: int | None = Field(default=None, description="Copy: positions copied right.")
    tokens_total: int | None = Field(default=None, description="Copy: tokens to copy.")


# A recall score is built from values of Score's types (tests/test_score.py holds it to Score()).
recall_score = builder(Score)


def near_keys(a: int, b: int) -> bool:
    """Keys a model may confuse: within 2 of each other, or one digit apart."""
    if a == b:
        return False
    if abs(a - b) <= 2:
        return True
    sa, sb = str(a), str(b)
    return len(sa) == len(sb) and sum(x != y for x, y in zip(sa, sb, strict=True)) == 1


def keys_near(queried: Iterable[int]) -> set[int] | None:
    """Every key that near_keys calls near one of `queried`, as a set (None if a queried key
    is negative): an echoed context can hold hundreds of false positives, each classed by a
    lookup here instead of a call of near_keys per owner (_count_kinds). tests/test_score.py
    holds it to near_keys."""
    close: set[int] = set()
    for key in queried:
        if key < 0:
            return None
        digits = str(key)
        near = {key - 2, key - 1, key + 1, key + 2}
        for i, own in enumerate(digits):
            for other in "0123456789":
                if other != own and not (i == 0 and other == "0" and len(digits) > 1):
                    near.add(int(digits[:i] + other + digits[i + 1:]))
        if len(digits) > 1 and digits[1] != "0":  # "-5" is one character off "15"
            near.add(-int(digits[1:]))
        close |= near  # a key is never near itself, but may be near another queried key
    return close


def classify_fp(item: Item, value: int, near: Callable[[int, int], bool] = near_keys,
                owners_of: dict[int, set[int]] | None = None) -> str:
    """Which kind of false positive `value` is for this item (`near`: may two keys be confused).
    `owners_of` (value_owners of the answer's false positives, found together) saves looking
    them up one by one. score_recall counts many false positives together (_count_kinds)."""
    owners = (owners_of if owners_of is not None else value_owners(item, {value})).get(value, set())
    if not owners:
        return "invented"
    if any(near(owner, q) for owner in owners for q in item.query):
        return "near"
    return "other_key"


# Up to this many values are looked up in the pairs' written text, one search each; more are
# found in one walk of the pairs.
FEW_VALUES = 8


def value_owners(item: Item, values: set[int]) -> dict[int, set[int]]:
    """For each of `values`, the keys that hold it in the item's context.

    A few values are searched for in the pairs as written (Item.pairs_as_written), when the
    item kept them: one block of text instead of each pair's objects. In a whole run against
    a server, walking 500 pairs took about 130 us a question (22 us in a loop over items just
    read: by the time an answer comes, its item has likely left the CPU's caches), and
    searching the text for the answer's three values about 36 (inner timings, the twenty-first
    pass of docs/performance.md). More values, or no text kept, take one walk of the pairs."""
    written = item.pairs_as_written() if len(values) <= FEW_VALUES else None
    if written is not None:
        return _owners_written(*written, values)
    owners: dict[int, set[int]] = {}
    for key, value in item.pairs or []:
        if value in values:
            owners.setdefault(value, set()).add(key)
    return owners


def _owners_written(text: str, start: int, end: int, values: set[int]) -> dict[int, set[int]]:
    """value_owners read from pairs written as compact JSON ([[1,2],[3,4]]) in text[start:end]:
    a value v held by a key k is written "[k,v]", so each ",v]" is a pair's value and its key
    runs from the "[" before it."""
    owners: dict[int, set[int]] = {}
    for value in values:
        needle = f",{value}]"
        at = text.find(needle, start, end)
        while at >= 0:
            owners.setdefault(value, set()).add(int(text[text.rfind("[", start, at) + 1:at]))
            at = text.find(needle, at + len(needle), end)
    return owners


def _count_kinds(item: Item, false_positives: list[int], close: set[int], kinds: dict[str, int]) -> None:
    """What classify_fp gives each of `false_positives`, counted into `kinds` (`close`: keys_near
    of the queried keys): a value held by a close key is "near", held by other keys only
    "other_key", held by none "invented". An echo's ~490 values take two passes over the
    pairs here instead of a set of owners and a call of classify_fp each (docs/performance.md,
    twenty-second pass)."""
    wanted = set(false_positives)
    pairs = item.pairs or []
    held = wanted.intersection([value for _, value in pairs])
    held_near = wanted.intersection([value for key, value in pairs if key in close])
    if len(wanted) == len(false_positives):  # no value repeats (parse_recall's never do)
        near, other = len(held_near), len(held) - len(held_near)
    else:
        near = sum(value in held_near for value in false_positives)
        other = sum(value in held for value in false_positives) - near
    kinds["near"] += near
    kinds["other_key"] += other
    kinds["invented"] += len(false_positives) - near - other


def score_recall(
    item: Item, parsed: ParsedAnswer, near: Callable[[int, int], bool] = near_keys
) -> Score:
    """TP / FP / FN, outcome, FN by position and depth bucket, FP kinds."""
    predicted = set(parsed.values)
    expected = set(item.expected)
    tp = len(predicted & expected)
    false_positives = [v for v in parsed.values if v not in expected]
    fn_by_position = [0 if v in predicted else 1 for v in item.expected]
    fn = len(expected - predicted)
    kinds = dict.fromkeys(FP_KINDS, 0)
    # The set of near keys costs about as much as ten calls of near_keys: built only for an
    # answer with many false positives (an echoed context has hundreds), which are then counted
    # together.
    close = keys_near(item.query) if near is near_keys and len(false_positives) > FEW_VALUES else None
    if close is not None:
        _count_kinds(item, false_positives, close, kinds)
    elif false_positives:
        owners_of = value_owners(item, set(false_positives))
        for value in false_positives:
            kinds[classify_fp(item, value, near, owners_of)] += 1
    fp = len(false_positives)
    outcome = outcome_of(fp, fn)
    return recall_score(
        correct=outcome == "true", tp=tp, fp=fp, fn=fn, outcome=outcome,
        fn_by_position=fn_by_position, fp_kinds=kinds, depth_buckets=depth_buckets(item),
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


DEPTH_BUCKETS = 5


def depth_buckets(item: Item) -> list[int]:
    """The depth bucket of each target occurrence of a recall item."""
    return [min(int(depth * DEPTH_BUCKETS), DEPTH_BUCKETS - 1) for depth in item.target_depths()]


def score_label(item: Item, parsed: ParsedAnswer) -> Score:
    truth = item.expected[0]
    if not parsed.values:
        return Score(correct=False, outcome="fn", fn=1, length=item.size)
    right = parsed.values[0] == truth
    return Score(correct=right, tp=int(right), fp=int(not right), fn=int(not right),
                 outcome="true" if right else "both", length=item.size)


def score_copy(item: Item, parsed: ParsedAnswer) -> Score:
    given, wanted = parsed.values, item.expected
    right = sum(a == b for a, b in zip(given, wanted, strict=False))
    fp, fn = len(given) - right, len(wanted) - right
    outcome = outcome_of(fp, fn)
    return Score(correct=outcome == "true", tp=right, fp=fp, fn=fn, outcome=outcome,
                 length=item.size, tokens_right=right, tokens_total=len(wanted))


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95% Wilson score interval for a proportion; (0, 1) when n is 0."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def clustered_interval(per_question: list[tuple[int, int]]) -> tuple[float, float]:
    """95% interval of accuracy when each question was asked several times (--samples).

    Answers to one question are not independent, so the Wilson interval is taken over an
    effective sample size: n / (1 + (k - 1) * icc), with k the mean samples per question
    and icc the intraclass correlation of correctness (one-way ANOVA estimator, clipped to
    0..1). With one sample per question this is the plain Wilson interval."""
    n = sum(total for _, total in per_question)
    if n == 0:
        return (0.0, 1.0)
    correct = sum(right for right, _ in per_question)
    m = len(per_question)
    k = n / m
    if k <= 1 or m < 2:
        return wilson_interval(correct, n)
    p = correct / n
    between = sum(total * (right / total - p) ** 2 for right, total in per_question) / (m - 1)
    within = sum(right * (1 - right / total) for right, total in per_question) / (n - m) if n > m else 0.0
    icc = (between - within) / (between + (k - 1) * within) if between + (k - 1) * within > 0 else 1.0
    effective = n / (1 + (k - 1) * min(1.0, max(0.0, icc)))
    return wilson_interval_float(p * effective, effective)


def wilson_interval_float(successes: float, n: float, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson interval for a fractional count (an effective sample size)."""
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


class Summary(DeferredModel):
    """Aggregate metrics of one condition on one task. These are the keys of `report --format json`."""

    task: str = Field(description="Task family.")
    model: str = Field(description="Model name as given to --model.")
    label: str = Field(default="", description="Display name: the --label given, or the model name plus "
                       "whatever differs between the conditions shown together.")
    condition_id: str | None = Field(default=None, description="Id of the condition these answers share.")
    condition: dict[str, Any] | None = Field(
        default=None, description="The condition: provider, endpoint, model, settings, template, task, "
        "params, renderer (transcript.Record.condition).")
    n: int = Field(description="Answers counted: questions x samples, errors excluded.")
    correct: int = Field(description="Answers exactly right.")
    accuracy: float | None = Field(description="correct / n; null when n is 0.")
    accuracy_ci: tuple[float, float] = Field(
        description="95% Wilson interval of accuracy (over an effective size when --samples > 1).")
    questions: int = Field(default=0, description="Distinct questions answered.")
    samples: int = Field(default=1, description="Answers per question asked for (--samples).")
    by_sample: list[tuple[int, int]] = Field(
        default_factory=list, description="(correct, answered) of each sample index, when samples > 1.")
    truncated: int = Field(
        default=0, description="Answers that stopped at the output limit (counted in n, usually wrong).")
    errors: int = Field(description="Questions with no answer because of an error; not counted as wrong.")
    errors_retryable: int = Field(default=0, description="Errors asking again may fix (the next run does).")
    errors_permanent: int = Field(
        default=0, description="Errors asking again cannot fix (400, 404, a missing replay answer...).")
    error_reasons: dict[str, int] = Field(
        default_factory=dict, description="The messages of the errors, with how often each occurred.")
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
    unparsed: int | None = Field(
        default=None, description="Answers with nothing to read that are not refusals."
    )
    fn_by_depth: list[int] = Field(
        default_factory=list,
        description="Recall: misses per depth bucket (0-20%, 20-40%, ... of the context).",
    )
    targets_by_depth: list[int] = Field(
        default_factory=list, description="Recall: expected values per depth bucket."
    )
    by_length: dict[int, tuple[int, int]] = Field(
        default_factory=dict, description="Sequence tasks: (correct, n) per context length."
    )
    tokens_right: int | None = Field(default=None, description="Copy: tokens copied right, summed.")
    token_accuracy: float | None = Field(default=None, description="Copy: tokens_right / tokens to copy.")


def _tally(scores: Iterable[Score]) -> list[tuple[Score, int]]:
    """Each distinct score object once, with how often it occurs: a slim reading shares equal
    scores (most answers of a run score alike), so the sums below run over a few hundred
    scores instead of every answer."""
    found: dict[int, list[Any]] = {}
    for score in scores:
        seen = found.get(id(score))
        if seen is None:
            found[id(score)] = [score, 1]
        else:
            seen[1] += 1
    return [(score, count) for score, count in found.values()]


def summarize(
    task: str, model: str, scores: Iterable[Score], errors: Iterable[str], refused: int = 0,
    counting: bool = False,
) -> Summary:
    """Aggregate the scores of answered questions and the kinds of failed ones.

    `counting` adds the counting aggregates (exact, MAE, over, under, unparsed)."""
    errors_by_kind: dict[str, int] = {}
    for kind in errors:
        errors_by_kind[kind] = errors_by_kind.get(kind, 0) + 1
    return summarize_counts(task, model, _tally(scores), errors_by_kind, refused, counting)


def summarize_counts(
    task: str, model: str, tally: list[tuple[Score, int]], errors_by_kind: dict[str, int],
    refused: int = 0, counting: bool = False,
) -> Summary:
    """summarize from each distinct score with its count and the errors per kind."""
    n = sum(count for _, count in tally)
    correct = sum(count for s, count in tally if s.correct)
    outcomes = {name: sum(count for s, count in tally if s.outcome == name)
                for name in ("true", "fn", "fp", "both")}
    width = max((len(s.fn_by_position) for s, _ in tally), default=0)
    fn_by_position = [sum(s.fn_by_position[i] * count for s, count in tally if i < len(s.fn_by_position))
                      for i in range(width)]
    fp_kinds = {kind: sum(s.fp_kinds.get(kind, 0) * count for s, count in tally) for kind in FP_KINDS}
    summary = Summary(
        task=task, model=model, n=n, correct=correct,
        accuracy=correct / n if n else None,
        accuracy_ci=wilson_interval(correct, n),
        errors=sum(errors_by_kind.values()), errors_by_kind=errors_by_kind,
        refused=refused, outcomes=outcomes,
        tp=sum(s.tp * count for s, count in tally), fp=sum(s.fp * count for s, count in tally),
        fn=sum(s.fn * count for s, count in tally),
        fn_by_position=fn_by_position, fp_kinds=fp_kinds,
    )
    if counting:
        parsed = [(s, count) for s, count in tally if s.abs_error is not None]
        answers = sum(count for _, count in parsed)
        summary.exact = correct
        summary.mae = sum((s.abs_error or 0) * count for s, count in parsed) / answers if answers else None
        summary.over = sum(count for s, count in parsed if s.outcome == "fp")
        summary.under = sum(count for s, count in parsed if s.outcome == "fn")
        summary.unparsed = n - answers
    add_variant_aggregates(summary, tally)
    return summary


def add_variant_aggregates(summary: Summary, tally: list[tuple[Score, int]]) -> None:
    """Fill the aggregates the variants added: FN by depth, accuracy by length, tokens
    (`tally`: each distinct score with its count)."""
    if any(s.depth_buckets for s, _ in tally):
        summary.targets_by_depth = [0] * DEPTH_BUCKETS
        summary.fn_by_depth = [0] * DEPTH_BUCKETS
        for s, count in tally:
            for bucket, missed in zip(s.depth_buckets, s.fn_by_position, strict=False):
                summary.targets_by_depth[bucket] += count
                summary.fn_by_depth[bucket] += missed * count
    lengths = sorted({s.length for s, _ in tally if s.length is not None})
    if lengths:
        summary.by_length = {
            length: (sum(count for s, count in tally if s.length == length and s.correct),
                     sum(count for s, count in tally if s.length == length))
            for length in lengths
        }
        summary.unparsed = sum(count for s, count in tally if s.outcome == "fn" and not s.fp and not s.tp)
    totals = [(s, count) for s, count in tally if s.tokens_total is not None]
    if totals:
        summary.tokens_right = sum((s.tokens_right or 0) * count for s, count in totals)
        wanted = sum((s.tokens_total or 0) * count for s, count in totals)
        summary.token_accuracy = summary.tokens_right / wanted if wanted else None

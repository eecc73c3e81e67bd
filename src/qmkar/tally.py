"""Answers counted as they come: what every table of one (task, condition) is made of.

A `Tally` holds, for one condition's answers to one task, each distinct score with its count
at each point where its questions sit (the context's size or token target, the targets or
queries, the placement, the prompt's token bin), the errors by reason, the flags the summary
counts, the token sums of the usage line, and, when questions were asked several times
(--samples), each question's right and asked counts. The summary (report.py), the length
tables and heatmaps (lengths.py), the size grid (grid.py), the usage line (pricing.py) and
every figure of plot.py are made from tallies: eval counts its answers as they arrive and
keeps none of them, and report, compare, plot and sweep count the latest records they read
the same way (report and plot keep no records either).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, cast

from qmkar.condition import Condition
from qmkar.records import CallError
from qmkar.score import Score
from qmkar.slim import SlimRecord
from qmkar.tasks import family

Key = tuple[str, str, int]  # (question, condition, sample)


class Point(NamedTuple):
    """Where a question sits: size (the token target when sized in tokens, else the context's
    size), width (targets or queries, for families that have them), placement (when the item
    records one), and the power of two its real prompt tokens are binned under (None: unknown)."""

    size: int
    width: int | None
    placement: str | None
    tokens: int | None


def token_bin(tokens: int) -> int:
    """The power of two a prompt of `tokens` tokens is binned under (2,049..4,096 -> 4,096):
    the smallest power of two at least `tokens` (1 for none), exact for any int."""
    return 1 << (max(tokens, 1) - 1).bit_length()


class Counts:
    """The answers at one point: each distinct score object with its count, and the rest
    (errors, and answers without a score)."""

    __slots__ = ("scores", "others", "sized")

    def __init__(self, sized: bool) -> None:
        self.scores: dict[int, list[Any]] = {}  # id(score) -> [score, count]; the list keeps it alive
        self.others = 0
        self.sized = sized  # the size is a token target

    def add(self, score: Score, count: int = 1) -> None:
        seen = self.scores.get(id(score))
        if seen is None:
            self.scores[id(score)] = [score, count]
        else:
            seen[1] += count

    def tally(self) -> list[tuple[Score, int]]:
        return [(score, count) for score, count in self.scores.values()]

    @property
    def n(self) -> int:
        return sum(count for _, count in self.scores.values())

    @property
    def correct(self) -> int:
        return sum(count for score, count in self.scores.values() if score.correct)


class Spent(NamedTuple):
    """Token sums of answers at one price (full, or a batch's): what their cost is made of
    (pricing.cost, per answer: fresh input = input less cached, at least 0)."""

    fresh: int = 0
    cached: int = 0
    output: int = 0


SUMMED = ("records", "graded", "truncated", "refused", "unparsed", "answered", "cache_hits", "batched",
          "input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens")  # a Tally's plain counts


class Tally:
    """One (task, condition)'s answers, counted; `add` each latest record once.

    `per_question` keeps each question's right and asked counts (its id and an int: about
    0.13 KB a question),
    which the number of questions and the clustered interval need when a question has more
    than one answer (--samples); without it each answer is taken for a question of its own."""

    def __init__(self, task: str, first: SlimRecord | None, per_question: bool = True) -> None:
        """`first`: the first record, whose model, label and condition the tally's are (none:
        an empty tally, named by its task only)."""
        self.task = task
        self.model, self.label = (first.model, first.label) if first is not None else (task, None)
        self.condition: Condition | None = first.condition if first is not None else None
        self.condition_id = first.condition_id if first is not None else ""
        self.wide = bool(family(task).width_name)
        target = self.condition.params.get("context_tokens") if self.condition is not None else None
        self.target = target if isinstance(target, int) else None
        self.points: dict[Point, Counts] = {}
        self.errors: dict[int, list[Any]] = {}  # id(error) -> [CallError, count]
        self.error_keys: list[Key] = []
        self.records = self.graded = self.truncated = self.refused = self.unparsed = 0
        self.samples = 0  # the highest sample index + 1
        self.by_sample: dict[int, list[int]] = {}  # sample -> [right, asked]
        self.per_question: dict[str, int] | None = {} if per_question else None  # id -> asked << 32 | right
        # The usage line: answers, cache hits, batched answers, tokens; and what the cost is made of.
        self.answered = self.cache_hits = 0  # answers without an error, and those from the cache
        self.batched = 0  # records from batches, errors included
        self.input_tokens = self.output_tokens = self.reasoning_tokens = self.cached_tokens = 0
        self.spent = Spent()
        self.spent_batched = Spent()

    def add(self, record: SlimRecord) -> None:
        """Count one record (the latest of its key: a key added twice counts twice)."""
        self.records += 1
        if record.extra and record.extra.get("batch"):
            self.batched += 1
        item = record.item
        usage = record.usage
        tokens = (usage.input_tokens if usage is not None else None) or item.prompt_tokens
        where = (self.target if self.target is not None else item.size,
                 len(item.expected) if self.wide else None, item.placement,
                 None if tokens is None else token_bin(tokens))
        counts = self.points.get(cast(Point, where))  # a Point is equal to the plain tuple of its fields
        if counts is None:
            counts = self.points[Point(*where)] = Counts(self.target is not None)
        if record.sample >= self.samples:
            self.samples = record.sample + 1
        error, score = record.error, record.score
        if error is not None:
            counts.others += 1
            seen = self.errors.get(id(error))
            if seen is None:
                self.errors[id(error)] = [error, 1]
            else:
                seen[1] += 1
            self.error_keys.append(record.key)
            return
        self._usage(record)
        if score is None:
            counts.others += 1
            return
        counts.add(score)
        self.graded += 1
        cut = record.truncated
        self.truncated += cut
        if not cut:
            self.refused += record.refused
            self.unparsed += record.unparsed
        right = score.correct
        sample = self.by_sample.get(record.sample)
        if sample is None:
            self.by_sample[record.sample] = [int(right), 1]
        else:
            sample[0] += right
            sample[1] += 1
        if self.per_question is not None:
            self.per_question[item.id] = self.per_question.get(item.id, 0) + (1 << 32) + right

    def _usage(self, record: SlimRecord) -> None:
        self.answered += 1
        extra = record.extra
        batch = bool(extra.get("batch")) if extra else False
        if extra:
            self.cache_hits += extra.get("cache") == "hit"
        usage = record.usage
        if usage is None:
            return
        given, out, cached = usage.input_tokens or 0, usage.output_tokens or 0, usage.cached_tokens or 0
        self.input_tokens += given
        self.output_tokens += out
        self.reasoning_tokens += usage.reasoning_tokens or 0
        self.cached_tokens += cached
        old = self.spent_batched if batch else self.spent
        new = Spent(old.fresh + max(0, given - cached), old.cached + cached, old.output + out)
        if batch:
            self.spent_batched = new
        else:
            self.spent = new

    def extend(self, other: Tally) -> None:
        """Count another tally's answers after this one's, as if its records were added here
        one by one after this one's, in their order (two parts of one transcript, counted by
        two processes: readers.count_each). Both are of the same task and condition; the
        keys of the two must not meet (a key added twice counts twice, as in `add`)."""
        self.merge(other)
        for error, count in other.errors.values():
            seen = self.errors.get(id(error))
            if seen is None:
                self.errors[id(error)] = [error, count]
            else:
                seen[1] += count
        self.error_keys += other.error_keys
        for name in SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.samples = max(self.samples, other.samples)
        for sample, (right, asked) in other.by_sample.items():
            mine_sample = self.by_sample.setdefault(sample, [0, 0])
            mine_sample[0] += right
            mine_sample[1] += asked
        if self.per_question is not None and other.per_question is not None:
            for question, packed in other.per_question.items():
                self.per_question[question] = self.per_question.get(question, 0) + packed
        self.spent = Spent(*map(sum, zip(self.spent, other.spent, strict=True)))
        self.spent_batched = Spent(*map(sum, zip(self.spent_batched, other.spent_batched, strict=True)))

    def merge(self, other: Tally) -> None:
        """Count another tally's answers in this one (a series joining runs: grid.series).
        Only what the grid and the length tables read is merged."""
        for point, counts in other.points.items():
            mine = self.points.get(point)
            if mine is None:
                mine = self.points[point] = Counts(counts.sized)
            for score, count in counts.scores.values():
                mine.add(score, count)
            mine.others += counts.others
        self.target = self.target if self.target is not None else other.target

    # --- what the tables read ---------------------------------------------------------------

    def scores(self) -> list[tuple[Score, int]]:
        """Each distinct score with its count, over every point."""
        merged = Counts(self.target is not None)
        for counts in self.points.values():
            for score, count in counts.scores.values():
                merged.add(score, count)
        return merged.tally()

    def failures(self) -> list[tuple[CallError, int]]:
        return [(error, count) for error, count in self.errors.values()]

    @property
    def error_count(self) -> int:
        return sum(count for _, count in self.errors.values())

    def questions(self) -> list[tuple[int, int]] | None:
        """(right, asked) per question answered; None when not kept per question."""
        if self.per_question is None:
            return None
        return [(packed & 0xFFFFFFFF, packed >> 32) for packed in self.per_question.values()]

    def at(self, by: str) -> tuple[dict[int, list[tuple[Score, int]]], int]:
        """Each length's scores, shortest first, and how many answers have no length: by
        "target" the token target, else the context's size; by "tokens" the real prompt
        tokens' bin (unknown for some answers)."""
        found: dict[int, Counts] = {}
        unbinned = 0
        for point, counts in self.points.items():
            length = point.tokens if by == "tokens" else point.size
            if length is None:
                unbinned += counts.n
                continue
            merged = found.setdefault(length, Counts(counts.sized))
            for score, count in counts.scores.values():
                merged.add(score, count)
        return {length: merged.tally() for length, merged in sorted(found.items()) if merged.scores}, unbinned


def joined_tally(found: list[Tally]) -> Tally:
    """One tally counting the answers of several (grid.series: a row joining runs), named as
    the first; only what the grid and the length tables read is joined."""
    joined = Tally(found[0].task, None)
    joined.model, joined.label = found[0].model, found[0].label
    joined.condition, joined.condition_id = found[0].condition, found[0].condition_id
    for tally in found:
        joined.merge(tally)
    return joined


def tallies(records: Iterable[SlimRecord], per_question: bool = True) -> list[Tally]:
    """A tally per (task, condition), in the order first seen, of records that are each the
    latest of their key already (transcript.latest)."""
    found = Tallies(per_question)
    for record in records:
        found.add(record)
    return list(found.values())


class Tallies(dict[tuple[str, str], Tally]):
    """A tally per (task, condition), in the order first seen, `add`ed a record at a time (a
    resume's first pass counts as it reads: runner.Run.first_summary)."""

    def __init__(self, per_question: bool = True) -> None:
        super().__init__()
        self.per_question = per_question

    def add(self, record: SlimRecord) -> None:
        key = (record.item.task, record.condition_id)
        tally = self.get(key)
        if tally is None:
            tally = self[key] = Tally(record.item.task, record, self.per_question)
        tally.add(record)

    def extend(self, found: Iterable[Tally]) -> None:
        """Count tallies of records that come after those added so far (the next file's, or
        the end of this one counted by another process), each into the tally of its task and
        condition, or as a new one."""
        for tally in found:
            key = (tally.task, tally.condition_id)
            mine = self.get(key)
            if mine is None:
                self[key] = tally
            else:
                mine.extend(tally)

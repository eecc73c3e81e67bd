"""Searching for the effective context length: ask where the answer is uncertain, stop early.

`qmkar sweep --find-effective-length` does not ask a full grid. Its sizes are the
--context-tokens given (the coarse grid) and, between neighbours, sizes spaced by at most
--bracket (the fine grid). It asks the coarse sizes from the shortest up, each in batches of
--look-every questions until its 95% Wilson interval clears the pass line (pass: lower bound >=
line) or falls under it (fail: upper bound < line), or -n questions are spent (undecided,
which does not pass). The first coarse size that does not pass ends that phase; bisection on
the fine grid between the last passing and the first failing size follows, until the two
are neighbours: their ratio is at most --bracket. Sizes between passing ones are taken to
pass (accuracy falls with length), which is what saves the questions.

The next step depends only on the answers recorded so far, read in item order and decided at
batch boundaries, so a search killed at any point resumes exactly from its transcript.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from qmkar.errors import UsageError
from qmkar.lengths import PassRule, Point, point
from qmkar.plans import GeneratedPlan, Plan
from qmkar.providers.base import Provider
from qmkar.render import Template
from qmkar.score import wilson_interval
from qmkar.sizing import Sizing
from qmkar.slim import SlimReading
from qmkar.tables import Cell, Interval, Pct, Table
from qmkar.tasks import TaskSpec, generate
from qmkar.tokens import show_size
from qmkar.transcript import latest


class Settings(NamedTuple):
    coarse: list[int]  # the sizes given, increasing
    bracket: float  # stop when the bracket's ends are within this factor
    batch: int  # questions asked between two looks at a size
    most: int  # questions at most per size
    rule: PassRule


def fine_grid(coarse: list[int], bracket: float) -> list[int]:
    """The coarse sizes and, between neighbours, geometric steps of at most `bracket` (1%
    slack, so --bracket 1.41 halves a doubling at the square root of 2)."""
    if bracket <= 1:
        raise UsageError(f"--bracket must be more than 1 (a factor between two sizes), not {bracket:g}")
    sizes = [coarse[0]]
    for low, high in zip(coarse, coarse[1:], strict=False):
        steps = max(1, math.ceil(math.log(high / low) / math.log(bracket * 1.01)))
        sizes += [round(low * (high / low) ** (i / steps)) for i in range(1, steps + 1)]
    return sorted(set(sizes))


class Ask(NamedTuple):
    """The next questions: the first `questions` items at `size` must be answered."""

    size: int
    questions: int


class Found(NamedTuple):
    """Where the search ended."""

    effective: int | None  # the longest size that passes, None when the shortest does not
    bracket: tuple[int | None, int | None]  # (effective, first size that does not pass)
    line: float  # the pass line held to (relative rules resolved)
    points: list[Point]  # every size asked, shortest first
    asked: int  # questions asked (answered or failed for good)
    full_grid: int  # what a full grid of the fine sizes would ask


# outcomes of a size's items in order: True right, False wrong, None a permanent error; the
# list stops at the first item not yet asked (or whose error may pass when asked again).
Outcomes = dict[int, list[bool | None]]


class Search:
    """One model's search: from the outcomes so far, the next Ask or what was Found."""

    def __init__(self, settings: Settings) -> None:
        if len(settings.coarse) < 2:
            raise UsageError("--find-effective-length needs at least two --context-tokens sizes "
                             "(for example 1k..64k or 1k,4k,16k,64k)")
        if settings.batch < 1 or settings.most < 1:
            raise UsageError("--look-every and -n must be at least 1")
        self.settings = settings
        self.fine = fine_grid(settings.coarse, settings.bracket)

    def boundaries(self) -> list[int]:
        """The question counts at which a size is looked at."""
        batch, most = self.settings.batch, self.settings.most
        return sorted({*range(batch, most, batch), most})

    def status(self, outcomes: list[bool | None], line: float) -> str | Ask | None:
        """'pass', 'fail', 'undecided' (at the cap), or None with the Ask that would decide."""
        for count in self.boundaries():
            if len(outcomes) < count:
                return None
            answered = [o for o in outcomes[:count] if o is not None]
            low, high = wilson_interval(sum(answered), len(answered))
            if answered and low >= line:
                return "pass"
            if answered and high < line:
                return "fail"
        return "undecided"

    def step(self, outcomes: Outcomes) -> Ask | Found:
        """The next questions to ask, or the result."""
        line = self.settings.rule.line
        counted: dict[int, int] = {}

        def look(size: int) -> str | Ask:
            seen = outcomes.get(size, [])
            verdict = self.status(seen, line)
            if verdict is None:
                wanted = next(count for count in self.boundaries() if count > len(seen))
                return Ask(size, wanted)
            counted[size] = self.settings.most if verdict == "undecided" else self._decided_at(seen, line)
            return verdict

        if self.settings.rule.relative:
            base = outcomes.get(self.fine[0], [])
            if len(base) < self.settings.most:
                return Ask(self.fine[0], self.settings.most)
            answered = [o for o in base[:self.settings.most] if o is not None]
            line = self.settings.rule.line * (sum(answered) / len(answered) if answered else 0.0)
        low: int | None = None
        high: int | None = None
        for size in self.settings.coarse:
            # Under the relative rule the shortest size is the base: it passes by definition.
            verdict = "pass" if self.settings.rule.relative and size == self.fine[0] else look(size)
            if isinstance(verdict, Ask):
                return verdict
            if verdict != "pass":
                high = size
                break
            low = size
        while low is not None and high is not None and self.fine.index(high) - self.fine.index(low) > 1:
            middle = self.fine[(self.fine.index(low) + self.fine.index(high)) // 2]
            verdict = look(middle)
            if isinstance(verdict, Ask):
                return verdict
            if verdict == "pass":
                low = middle
            else:
                high = middle
        if self.settings.rule.relative:
            counted[self.fine[0]] = self.settings.most  # the base was asked in full
        points = []
        for size in sorted(counted):
            answered = [o for o in outcomes[size][:counted[size]] if o is not None]
            points.append(point(size, sum(answered), len(answered), line))
        full_grid = len(self.fine) * self.settings.most
        return Found(low, (low, high), line, points, sum(counted.values()), full_grid)

    def _decided_at(self, outcomes: list[bool | None], line: float) -> int:
        """The question count at which a decided size was decided."""
        for count in self.boundaries():
            answered = [o for o in outcomes[:count] if o is not None]
            low, high = wilson_interval(sum(answered), len(answered))
            if answered and (low >= line or high < line):
                return count
        return len(outcomes)


def run(search: Search, outcomes: Callable[[], Outcomes], ask: Callable[[Ask], None]) -> Found:
    """Step until found: each Ask is passed to `ask` (which asks those questions), then the
    outcomes are read again. Stops with a UsageError when an Ask brought nothing new (the
    questions keep failing; running the same command again retries them)."""
    seen = outcomes()
    while True:
        step = search.step(seen)
        if isinstance(step, Found):
            return step
        ask(step)
        now = outcomes()
        if len(now.get(step.size, [])) <= len(seen.get(step.size, [])):
            raise UsageError(f"the search stopped: questions at {step.size} tokens could not be answered "
                             "(see the errors above); run the same command again to retry them")
        seen = now


# --- asking through a transcript ---------------------------------------------------------------


class TranscriptSearch:
    """One model's search asked into a transcript: the outcomes so far are read from it, and
    each Ask becomes a run of the first questions at that size (the task's seeded items, as
    `sweep --context-tokens` asks them)."""

    def __init__(self, spec: TaskSpec, seed: int, sizing: Sizing, provider: Provider, path: Path,
                 templates: Callable[[str], Template], settings: dict[str, Any],
                 execute: Callable[[Plan, list[Provider]], None], most: int) -> None:
        from qmkar.asking import Conditions  # the send path's: imported once a search asks

        self.spec, self.seed, self.sizing, self.provider, self.path = spec, seed, sizing, provider, path
        self.templates, self.execute, self.most = templates, execute, most
        self.conditions = Conditions(provider, provider.settings_for(settings), templates)
        self._ids: dict[int, tuple[list[str], str]] = {}

    def plan(self, size: int, count: int) -> GeneratedPlan:
        """The first `count` questions at `size` tokens."""
        one = Sizing([size], self.sizing.counter, self.sizing.template)
        return GeneratedPlan(self.spec, count, self.seed, one)

    def ids(self, size: int) -> tuple[list[str], str]:
        """The ids of the questions at `size`, in order, and the condition they are asked under."""
        if size not in self._ids:
            items = list(generate(self.sizing.fit(self.spec, size, self.seed).spec, self.most, self.seed))
            self._ids[size] = ([item.id for item in items], self.conditions.of(items[0]).key())
        return self._ids[size]

    def outcomes(self, sizes: Iterable[int]) -> Outcomes:
        """Right / wrong / failed for good, per size, in item order up to the first question
        not answered yet."""
        found = {(r.item_id, r.condition_id): r for r in latest(SlimReading(self.path)).values()
                 if r.model == self.provider.name and r.sample == 0}
        result: Outcomes = {}
        for size in sizes:
            ids, condition = self.ids(size)
            row: list[bool | None] = []
            for item_id in ids:
                record = found.get((item_id, condition))
                if record is None or not record.done:
                    break
                row.append(record.correct if record.error is None else None)
            result[size] = row
        return result

    def ask(self, step: Ask) -> None:
        self.execute(self.plan(step.size, step.questions), [self.provider])


def find(search: Search, asker: TranscriptSearch) -> Found:
    """The search for one model, asked through its transcript (resuming what it holds)."""
    return run(search, lambda: asker.outcomes(search.fine), asker.ask)


def found_table(task: str, label: str, found: Found) -> Table:
    """Every size the search asked, how it stood, and where it ended."""
    header = ["tokens", "asked", "correct", "accuracy", "95% CI", "verdict"]
    rows: list[list[Cell]] = [[show_size(p.length), p.n, p.correct, Pct(p.accuracy), Interval(*p.accuracy_ci),
                               p.verdict] for p in found.points]
    return Table(f"{task}: effective length search, {label}", header, rows)


def found_line(label: str, found: Found) -> str:
    """The result in one line: the length, its bracket, and the questions against a full grid."""
    low, high = found.bracket
    if low is None:
        what = f"below the shortest size ({show_size(high or 0)} does not pass)"
    elif high is None:
        what = f"at least {show_size(low)} (the longest size passes)"
    else:
        what = f"{show_size(low)} (bracket {show_size(low)}-{show_size(high)})"
    return (f"{label}: effective length {what}, pass line {100 * found.line:.1f}%; {found.asked} questions "
            f"asked, where a full grid of the same sizes would ask {found.full_grid}")


def found_json(label: str, found: Found) -> dict[str, Any]:
    return {"model": label, "effective": found.effective, "bracket": list(found.bracket), "line": found.line,
            "asked": found.asked, "full_grid": found.full_grid,
            "points": [p.model_dump(mode="json") for p in found.points]}

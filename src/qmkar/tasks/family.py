"""TaskFamily: everything one task owns, behind one small interface.

A family knows its typed params and the command-line options that set them, checks
them, generates items, fills its prompt template's placeholders, reads answers, scores
them, writes the oracle's answer, and says which report its summaries get. Later
stages look a family up by an item's task name (tasks/__init__.py) and ask it; none of
them keeps a list of task names. `RecallFamily` is the shared base of the key-value
recall tasks.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

from pydantic import ValidationError

from qmkar.errors import UsageError
from qmkar.parse import ParsedAnswer, parse_recall
from qmkar.score import Score, score_recall
from qmkar.tasks.base import (
    IntRange,
    Item,
    TaskParams,
    check_context,
    int_pairs_json,
    item_id,
    keep_pairs_json,
    option_name,
    pairs_json,
    require,
)

DIGITS = re.compile(r"\d+")


class Graded(NamedTuple):
    """What an answer predicts, and its metrics."""

    parsed: ParsedAnswer
    score: Score


# What a family's summaries are reported as (report.py has one table builder per kind).
REPORTS = ("recall", "counting", "lengths", "accuracy")


class TaskFamily(ABC):
    """One task: its params, options, generation, prompt, parsing, scoring and report."""

    name: ClassVar[str]
    params_type: ClassVar[type[TaskParams]]
    # Params field -> what the command-line option means for this task. The CLI offers
    # the union over all families and refuses an option a task does not list here.
    options: ClassVar[dict[str, str]] = {}
    # Template placeholders every template of the task must use, and ones it may use.
    placeholders: ClassVar[dict[str, str]]
    optional_placeholders: ClassVar[dict[str, str]] = {}
    # The task's default prompt text, for a family whose template is not a file in
    # prompts/ (where the blog's tasks keep theirs, for users to read and copy).
    template: ClassVar[str | None] = None
    report: ClassVar[str] = "accuracy"  # one of REPORTS
    size_unit: ClassVar[str] = "pairs"  # what Item.size counts: pairs, values or symbols
    width_name: ClassVar[str | None] = None  # what len(expected) is called (grids): targets...
    # Whether an answer writes each value it predicts as its digits (readers check stored
    # grades against the numbers an answer shows); False when values are parts joined.
    literal_values: ClassVar[bool] = True
    position_label: ClassVar[str] = "target position"  # what fn_by_position indexes
    # Whether `parse` reads the item's context (pairs, values or text). rescore.py grades an
    # answer from an item whose context it has not decoded when neither parse nor score
    # (score_reads_context) reads it.
    parse_reads_context: ClassVar[bool] = True
    # How a simulated memory reads this task's prompt: "pairs" (k: K, v: V and the
    # queried keys), "list" (values and the counted value), or one of the variants' readers
    # in providers/sim_tasks.py ("multipart", "bits", "brackets", "sequence"); None: it cannot.
    sim_reads: ClassVar[str | None] = None
    # The Item field holding the context: "pairs", "values" or "text".
    context_field: ClassVar[str] = "values"
    # Params fields (and the blog files' kept keys) that state the context's size.
    size_fields: ClassVar[tuple[str, ...]] = ("length", "num_values")

    def make_params(self, given: dict[str, Any]) -> TaskParams:
        """Params from option values (None and False left out); UsageError when they cannot work."""
        stray = [option_name(name) for name in given if name not in self.options]
        if stray:
            accepted = ", ".join(sorted(option_name(name) for name in self.options))
            raise UsageError(f"{', '.join(stray)} does not apply to --task {self.name}; "
                             f"it accepts {accepted}")
        try:
            params = self.params_type(**given)
        except ValidationError as exc:
            first = exc.errors()[0]
            cause = (first.get("ctx") or {}).get("error")
            field = ".".join(str(part) for part in first["loc"])
            raise UsageError(str(cause) if cause is not None
                             else f"{option_name(field)}: {first['msg']}") from None
        self.check(params)
        return params

    # Params fields that vary from item to item, or name nothing about how questions are
    # made; a condition leaves them out (a condition groups many questions).
    per_item: ClassVar[frozenset[str]] = frozenset({"seed", "cell", "prompt_tokens"})

    def condition_params(self, params: TaskParams) -> dict[str, Any]:
        """The options that shaped a question, as its condition records them."""
        return {k: v for k, v in params.model_dump(mode="json").items() if k not in self.per_item}

    def check(self, params: Any) -> None:  # noqa: B027 (optional: most params need no check)
        """Raise UsageError for params no dataset can satisfy."""

    def sized(self, params: Any, size: int) -> TaskParams | None:
        """`params` with a context `size` units long (size_unit: pairs, values, symbols) and
        whatever grows with it, checked; None when the task cannot be sized that way. This is
        the one hook --context-tokens needs: sizing.py finds the size that fills a token budget.
        """
        return None

    def resized(self, params: TaskParams, **update: Any) -> TaskParams:
        """`params` with some fields replaced (recorded as given), then checked."""
        changed = params.model_copy(update=update)
        self.check(changed)
        return changed

    @abstractmethod
    def generate_one(self, params: Any, seed: int, index: int) -> Item:
        """Item `index` of the dataset for `seed`; independent of how many items are made."""

    @abstractmethod
    def prompt_fields(self, item: Item) -> dict[str, str]:
        """The text each placeholder stands for in this item's prompt."""

    @abstractmethod
    def parse(self, item: Item, text: str) -> ParsedAnswer:
        """What an answer text predicts (the rules are in parse.py)."""

    @abstractmethod
    def score(self, item: Item, parsed: ParsedAnswer) -> Score:
        """The metrics of one parsed answer."""

    def score_reads_context(self, item: Item, parsed: ParsedAnswer) -> bool:
        """Whether `score` reads the item's context (pairs, values or text) for this answer;
        Item.size, which dropped_size can stand for, is not its context."""
        return True

    def item_problem(self, item: Item) -> str | None:
        """What makes an item read from a file unfit for this task, or None when it is sound:
        its context in the wrong field, positions outside the context, a recorded size that is
        not the context's, or an answer its context contradicts (content_problem)."""
        held = [name for name in CONTEXT_FIELDS if getattr(item, name) is not None]
        if held != [self.context_field]:
            shown = " and ".join(f'"{name}"' for name in held) or "no context"
            return f'a {self.name} item holds its context in "{self.context_field}", not {shown}'
        size = item.size
        if size == 0:
            return f"its context is empty (no {self.size_unit})"
        if not item.expected:
            return "expected is empty; every question has an answer"
        outside = [p for p in item.target_positions if not 0 <= p < size]
        if outside:
            return (f"target_positions {outside[:5]} lie outside its context of {size} "
                    f"{self.size_unit} (0..{size - 1})")
        if item.depths is not None:
            if len(item.depths) != len(item.target_positions):
                return (f"depths has {len(item.depths)} entries but target_positions "
                        f"{len(item.target_positions)}; they are parallel")
            if any(not 0 <= depth <= 1 for depth in item.depths):
                return "depths must lie between 0 (start of the context) and 1 (its end)"
        for name in self.size_fields:
            stated = getattr(item.params, name, None) if name in item.params.model_fields_set \
                else item.params.extra(name)
            if isinstance(stated, int) and stated != size:
                return f"params.{name} says {stated} but its context has {size} {self.size_unit}"
        return self.content_problem(item)

    def content_problem(self, item: Item) -> str | None:
        """Whether an item's query, expected answer and positions agree with its context;
        None when they do (or the family cannot tell)."""
        return None

    def new_item(self, index: int, recorded: TaskParams, identity: tuple[str, ...], **fields: Any) -> Item:
        """Item `index` of this task with its recorded params; its id hashes the fields named in
        `identity` (those that make the question what it is), as validated (a context's pairs
        as pairs of ints, as the dataset's line writes them), together with those params.

        A context that is a list of tuples is checked by its JSON instead of by pydantic pair by
        pair, which cost more than twice what writing them does: int_pairs_json writes it only
        for pairs of two ints, and that text, which the id hashes, is kept with the item for its
        line and its prompt (pairs_json). Any other context is validated."""
        pairs = fields.get("pairs")
        written = None
        if type(pairs) is list and pairs and set(map(type, pairs)) == {tuple}:
            written = int_pairs_json(pairs)
        if written is None:
            item = Item(id="", task=self.name, params=recorded, **fields)
        else:
            item = Item(id="", task=self.name, params=recorded, **{**fields, "pairs": None})
            item.__dict__["pairs"] = pairs  # pairs of two ints: what validating them would give
        content = {name: getattr(item, name) for name in identity}
        content["options"] = recorded.model_dump(mode="json")
        item.id = item_id(self.name, index, content, written)
        if written is not None:
            keep_pairs_json(item, written)
        return item

    def is_right(self, expected: Sequence[int], values: Sequence[int]) -> bool:
        """Whether predicted `values` are exactly the answer: what a score's `correct` says
        (readers check stored scores against it)."""
        return list(values) == list(expected)

    def contradicts(self, expected: Sequence[int], values: list[int] | None, score: Score | None,
                    text: str | None) -> bool:
        """Whether a stored grade may not follow from the stored answer: the score disagrees
        with the parsed values (is_right), or the answer text does not show a parsed value (or
        shows digits where nothing was parsed). Cheap; slim.py grades a suspect again to be sure."""
        if score is None or text is None:
            return False
        if values is None or self.is_right(expected, values) != score.correct:
            return True
        if not self.literal_values:
            return False
        if values and text == ", ".join(map(str, values)):  # the shape asked for, read at a glance
            return False
        shown = DIGITS.findall(text)  # a list: answers show a few numbers, and this runs per answer
        if values:
            return any(str(value) not in shown for value in values)
        return bool(shown)

    def grade(self, item: Item, text: str) -> Graded:
        """Parse and score one answer."""
        parsed = self.parse(item, text)
        return Graded(parsed, self.score(item, parsed))

    def oracle_answer(self, item: Item) -> str:
        """A correct answer, as the oracle writes it: the expected values joined by ', '."""
        return ", ".join(str(v) for v in item.expected)

    def value_ceiling(self, item: Item) -> int:
        """The largest value an answer can plausibly hold (parse rule 2)."""
        value_range = getattr(item.params, "value_range", None)
        if isinstance(value_range, IntRange):
            return value_range.high
        return max(9999, *item.expected) if item.expected else 9999


# The Item fields that can hold a context; a family uses exactly one (context_field).
CONTEXT_FIELDS = ("pairs", "values", "text")


def pairs_text(item: Item) -> str:
    """A recall context as the blog writes it: 'k: K, v: V' joined by '; '.

    Pairs of ints are written from their JSON (int_pairs_json), the brackets and commas
    replaced: less than half the time of a bytes %-format (46 against 106 us at 500 pairs,
    inner timing), on the run's main thread. Pairs of any other shape are written one by one,
    as they are."""
    written = pairs_json(item)
    if written is None:
        return "; ".join([f"k: {k}, v: {v}" for k, v in item.pairs or []])
    return (b"k: " + written[2:-2].replace(b"],[", b"; k: ").replace(b",", b", v: ")).decode()


class RecallFamily(TaskFamily):
    """Key-value recall (qmkar, mqar and their multi-part variants): pairs in, values out."""

    report: ClassVar[str] = "recall"
    sim_reads: ClassVar[str | None] = "pairs"
    parse_reads_context: ClassVar[bool] = False  # the queried keys, the value ceiling (params)
    context_field: ClassVar[str] = "pairs"
    size_fields: ClassVar[tuple[str, ...]] = ("pairs", "num_pairs")
    # True: one key queried, every one of its pairs is a target (qmkar); False: several
    # unique keys queried, one value each, in the order asked (mqar).
    one_key: ClassVar[bool] = True

    def recall_item(self, index: int, recorded: TaskParams, pairs: list[tuple[int, int]], query: list[int],
                    positions: list[int], depths: list[float] | None = None) -> Item:
        """A recall question: its context, the queried key(s), and where the expected values sit."""
        return self.new_item(index, recorded, ("pairs", "query"), pairs=pairs, query=query,
                             expected=[pairs[i][1] for i in positions], target_positions=positions,
                             depths=depths)

    def check_counts(self, pairs: int, width: int) -> None:
        """What every recall task checks: a pair at least, and 1..pairs targets (or queries)."""
        option = option_name(self.width_name or "targets")
        require(pairs >= 1, f"--pairs must be at least 1, not {pairs}")
        check_context("--pairs", pairs, "pairs")
        require(width >= 1, f"{option} must be at least 1, not {width}")
        require(width <= pairs, f"{option} ({width}) cannot exceed --pairs ({pairs})")

    def sized(self, params: Any, size: int) -> TaskParams | None:
        return self.resized(params, pairs=size)

    def content_problem(self, item: Item) -> str | None:
        pairs = item.pairs or []
        width = len(item.expected)
        stated = getattr(item.params, self.width_name or "targets", None) \
            if (self.width_name or "targets") in item.params.model_fields_set else item.params.extra("t")
        if isinstance(stated, int) and stated != width:
            return f"its params ask for {stated} {self.width_name} but expected holds {width} values"
        if self.one_key:
            if len(item.query) != 1:
                return f"a {self.name} item queries one key, not {len(item.query)}"
            queried = item.query[0]
            occurs = [i for i, (k, _) in enumerate(pairs) if k == queried]
            if not occurs:
                return f"the queried key {item.query[0]} is not in its pairs"
            if item.target_positions != occurs:
                return (f"target_positions {item.target_positions[:5]} are not where the queried key "
                        f"{item.query[0]} occurs ({occurs[:5]})")
        else:
            if not len(item.query) == width == len(item.target_positions):
                return (f"query ({len(item.query)} keys), expected ({width} values) and target_positions "
                        f"({len(item.target_positions)}) must be parallel")
            for key, position in zip(item.query, item.target_positions, strict=True):
                count = sum(1 for k, _ in pairs if k == key)
                if count != 1:
                    return (f"the queried key {key} occurs {count} times in its pairs; {self.name} keys "
                            "are unique, each queried key once")
                if pairs[position][0] != key:
                    return f"target position {position} holds key {pairs[position][0]}, not the queried {key}"
        held = [pairs[p][1] for p in item.target_positions]
        if item.expected != held:
            return f"expected {item.expected[:5]} contradicts its context, whose target values are {held[:5]}"
        return None

    def prompt_fields(self, item: Item) -> dict[str, str]:
        keys = ", ".join(str(k) for k in item.query)
        return {"pairs": pairs_text(item), "key": keys, "keys": keys}

    def parse(self, item: Item, text: str) -> ParsedAnswer:
        return parse_recall(item, text, self.value_ceiling(item))

    def score(self, item: Item, parsed: ParsedAnswer) -> Score:
        return score_recall(item, parsed)

    def score_reads_context(self, item: Item, parsed: ParsedAnswer) -> bool:
        """Only false positives are looked for in the pairs (score.value_owners, _count_kinds:
        whose value each is); the rest of a recall score is expected values, positions and size."""
        expected = set(item.expected)
        return any(value not in expected for value in parsed.values)

    def is_right(self, expected: Sequence[int], values: Sequence[int]) -> bool:
        return set(values) == set(expected)

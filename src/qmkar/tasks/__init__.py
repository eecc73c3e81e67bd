"""Task families: the registry, and seeded generation of items from checked options.

Each family is one module of this folder (tasks/family.py says what a family owns);
FAMILIES below is the one list of them. `generate(spec, n, seed)` yields items one at
a time so a 10,000-question run never holds them all; item i depends only on
(options, seed, i).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, NamedTuple, get_args

from qmkar.errors import UsageError
from qmkar.tasks import copying, counting, dyck, mqar, multitoken, parity, qmkar
from qmkar.tasks.base import REGISTRY, SIZING_EXTRAS, IntRange, Item, TaskParams, parse_range
from qmkar.tasks.family import TaskFamily

__all__ = ["FAMILIES", "Item", "IntRange", "TaskSpec", "family", "generate", "make_spec",
           "parse_range", "option_specs", "check_count"]

# The registry: adding a task is its module and one line here.
FAMILIES: dict[str, TaskFamily] = REGISTRY
FAMILIES.update({
    f.name: f for f in (
        qmkar.FAMILY,
        mqar.FAMILY,
        counting.FAMILY,
        # The seed papers' variant tasks (docs/variants.md).
        multitoken.QMKAR_KV,
        multitoken.MQAR_KV,
        parity.PARITY,
        parity.PARITY_ONES,
        dyck.FAMILY,
        copying.FAMILY,
    )
})


def family(task: str) -> TaskFamily:
    """The family of a task name; UsageError naming the known ones otherwise."""
    found = FAMILIES.get(task)
    if found is None:
        raise UsageError(f"unknown task {task!r}; choose one of: {', '.join(FAMILIES)}")
    return found


class TaskSpec(NamedTuple):
    """A task family and its checked options."""

    task: str
    params: TaskParams


def make_spec(task: str, **options: Any) -> TaskSpec:
    """Check a task's options (CLI values by params field; None means the task's default).

    Options that do not apply to the task raise UsageError rather than being ignored,
    so a user never believes a run used settings it did not.
    """
    chosen = family(task)
    given = {name: value for name, value in options.items() if value is not None and value is not False}
    return TaskSpec(task, chosen.make_params(given))


# The most questions one dataset or run may ask of each size: more is a typo (and days of
# requests); a larger study is several runs.
MAX_QUESTIONS = 1_000_000


def check_count(n: int) -> None:
    """Refuse a question count below 1 or above MAX_QUESTIONS."""
    if n < 1:
        raise UsageError(f"-n must be at least 1, not {n}")
    if n > MAX_QUESTIONS:
        raise UsageError(f"-n {n:,} is more than the {MAX_QUESTIONS:,} questions one run asks; "
                         "split a larger study into several runs (each its own --seed)")


def generate(spec: TaskSpec, n: int, seed: int, start: int = 0) -> Iterator[Item]:
    """Yield n items of the task (from item `start` on), deterministically from `seed`. A spec
    sized to a token budget (sizing.py) passes its target and tokenizer on to every item's params."""
    check_count(n)
    chosen = family(spec.task)
    carried = {name: value for name, value in (spec.params.__pydantic_extra__ or {}).items()
               if name in SIZING_EXTRAS}
    for index in range(start, n):
        item = chosen.generate_one(spec.params, seed, index)
        if carried:
            item.params = item.params.model_copy(update=carried)
        yield item


class OptionSpec(NamedTuple):
    """A task option as the CLI offers it: its params field, command-line type and help."""

    name: str
    kind: type  # int, str or bool on the command line
    help: str


def _cli_kind(annotation: Any) -> type:
    """int and bool options stay so; everything else (ranges, placements, lengths) is text."""
    kinds = ({arg for arg in get_args(annotation) if arg is not type(None)}
             if isinstance(annotation, types.UnionType) else {annotation})
    return kinds.pop() if len(kinds) == 1 and kinds <= {int, bool} else str


def option_specs() -> list[OptionSpec]:
    """Every family's options, once each, with help naming which tasks take them and their defaults."""
    specs: dict[str, OptionSpec] = {}
    helps: dict[str, dict[tuple[str, str], list[str]]] = {}
    for name, chosen in FAMILIES.items():
        fields = chosen.params_type.model_fields
        for option, text in chosen.options.items():
            if option in fields:
                kind = _cli_kind(fields[option].annotation)
                default = fields[option].default
            else:  # an option a family converts itself (sequence tasks' --length)
                kind, default = int, None
            # A plain tuple (lengths) reads as the option is written; ranges and placements
            # print themselves.
            shown = ",".join(map(str, default)) if type(default) is tuple else str(default)
            tail = "" if default is None or kind is bool else f" [{shown}]"
            helps.setdefault(option, {}).setdefault((text, tail), []).append(name)
            specs.setdefault(option, OptionSpec(option, kind, ""))
    return [
        spec._replace(help="; ".join(f"{'/'.join(tasks)}: {text}{tail}"
                                     for (text, tail), tasks in helps[spec.name].items()) + ".")
        for spec in specs.values()
    ]

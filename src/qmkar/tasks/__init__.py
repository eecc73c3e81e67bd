"""Task families: pure, seeded generators of items, and the dataset files that hold them.

`generate(spec, n, seed)` yields items one at a time so a 10,000-question run never
holds them all; item i depends only on (options, seed, i).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from qmkar.errors import UsageError
from qmkar.tasks import counting, mqar, qmkar
from qmkar.tasks.base import IntRange, Item, parse_range

__all__ = ["TASKS", "Item", "IntRange", "TaskSpec", "generate", "make_spec", "parse_range"]

TASKS = {"qmkar": qmkar, "mqar": mqar, "counting": counting}


class TaskSpec(NamedTuple):
    """A task family and its checked options."""

    task: str
    params: NamedTuple


def make_spec(
    task: str,
    *,
    pairs: int | None = None,
    targets: int | None = None,
    queries: int | None = None,
    length: int | None = None,
    key_range: str | None = None,
    value_range: str | None = None,
    unique_distractors: bool = False,
) -> TaskSpec:
    """Build and check a task's options from CLI values; None means the task's default.

    Options that do not apply to the task raise UsageError rather than being ignored,
    so a user never believes a run used settings it did not.
    """
    if task not in TASKS:
        raise UsageError(f"unknown task {task!r}; choose one of: {', '.join(TASKS)}")
    given = {
        "--pairs": pairs,
        "--targets": targets,
        "--queries": queries,
        "--length": length,
        "--key-range": key_range,
        "--value-range": value_range,
        "--unique-distractors": unique_distractors or None,
    }
    accepted = {
        "qmkar": {"--pairs", "--targets", "--key-range", "--value-range", "--unique-distractors"},
        "mqar": {"--pairs", "--queries", "--key-range", "--value-range"},
        "counting": {"--length", "--value-range"},
    }[task]
    stray = [name for name, value in given.items() if value is not None and name not in accepted]
    if stray:
        raise UsageError(
            f"{', '.join(stray)} does not apply to --task {task}; it accepts "
            f"{', '.join(sorted(accepted))}"
        )
    fields: dict[str, object] = {}
    if pairs is not None:
        fields["pairs"] = pairs
    if targets is not None:
        fields["targets"] = targets
    if queries is not None:
        fields["queries"] = queries
    if length is not None:
        fields["length"] = length
    if key_range is not None:
        fields["key_range"] = parse_range(key_range, "--key-range")
    if value_range is not None:
        fields["value_range"] = parse_range(value_range, "--value-range")
    if unique_distractors:
        fields["unique_distractors"] = True
    module = TASKS[task]
    params_type = {"qmkar": qmkar.QmkarParams, "mqar": mqar.MqarParams,
                   "counting": counting.CountingParams}[task]
    params = params_type(**fields)
    module.check(params)
    return TaskSpec(task, params)


def generate(spec: TaskSpec, n: int, seed: int) -> Iterator[Item]:
    """Yield n items of the task, deterministically from `seed`."""
    if n < 1:
        raise UsageError(f"-n must be at least 1, not {n}")
    module = TASKS[spec.task]
    for index in range(n):
        yield module.generate_one(spec.params, seed, index)

"""Task families: pure, seeded generators of items, and the dataset files that hold them.

`generate(spec, n, seed)` yields items one at a time so a 10,000-question run never
holds them all; item i depends only on (options, seed, i).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from qmkar.errors import UsageError
from qmkar.tasks import copying, counting, dyck, mqar, multitoken, parity, qmkar
from qmkar.tasks.base import IntRange, Item, parse_range
from qmkar.tasks.placement import parse_placement
from qmkar.tasks.sequences import parse_lengths

__all__ = ["TASKS", "Item", "IntRange", "TaskSpec", "generate", "make_spec", "parse_range"]

TASKS = {"qmkar": qmkar, "mqar": mqar, "counting": counting}
# The seed papers' variant tasks (docs/variants.md).
VARIANT_TASKS = {
    "qmkar-kv": multitoken, "mqar-kv": multitoken, "parity": parity, "parity-ones": parity,
    "dyck": dyck, "copy": copying,
}
TASKS.update(VARIANT_TASKS)
SEQUENCE_TASKS = ("parity", "parity-ones", "dyck", "copy")


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
    placement: str | None = None,
    near_keys: int | None = None,
    key_tokens: int | None = None,
    value_tokens: int | None = None,
    lengths: str | None = None,
    ones: int | None = None,
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
        "--placement": placement,
        "--near-keys": near_keys,
        "--key-tokens": key_tokens,
        "--value-tokens": value_tokens,
        "--lengths": lengths,
        "--ones": ones,
    }
    accepted = {
        "qmkar": {"--pairs", "--targets", "--key-range", "--value-range", "--unique-distractors",
                  "--placement", "--near-keys"},
        "mqar": {"--pairs", "--queries", "--key-range", "--value-range"},
        "counting": {"--length", "--value-range"},
        "qmkar-kv": {"--pairs", "--targets", "--key-range", "--value-range", "--placement",
                     "--near-keys", "--key-tokens", "--value-tokens"},
        "mqar-kv": {"--pairs", "--queries", "--key-range", "--value-range", "--key-tokens",
                    "--value-tokens"},
        "parity": {"--length", "--lengths"},
        "parity-ones": {"--length", "--lengths", "--ones"},
        "dyck": {"--length", "--lengths"},
        "copy": {"--length", "--lengths", "--value-range"},
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
    if length is not None and task not in SEQUENCE_TASKS:
        fields["length"] = length
    if key_range is not None:
        fields["key_range"] = parse_range(key_range, "--key-range")
    if value_range is not None:
        fields["value_range"] = parse_range(value_range, "--value-range")
    if unique_distractors:
        fields["unique_distractors"] = True
    fields.update(_variant_fields(task, placement=placement, near_keys=near_keys,
                                  key_tokens=key_tokens, value_tokens=value_tokens,
                                  length=length, lengths=lengths, ones=ones))
    module = TASKS[task]
    params_type = {"qmkar": qmkar.QmkarParams, "mqar": mqar.MqarParams,
                   "counting": counting.CountingParams,
                   "qmkar-kv": multitoken.QmkarKvParams, "mqar-kv": multitoken.MqarKvParams,
                   "parity": parity.ParityParams, "parity-ones": parity.ParityParams,
                   "dyck": dyck.DyckParams, "copy": copying.CopyParams}[task]
    params = params_type(**fields)
    module.check(params)
    return TaskSpec(task, params)


def _variant_fields(
    task: str, *, placement: str | None, near_keys: int | None, key_tokens: int | None,
    value_tokens: int | None, length: int | None, lengths: str | None, ones: int | None,
) -> dict[str, object]:
    """Params fields of the variant options (already checked to apply to `task`)."""
    fields: dict[str, object] = {}
    if placement is not None:
        fields["placement"] = parse_placement(placement)
    if near_keys is not None:
        fields["near_keys"] = near_keys
    if key_tokens is not None:
        fields["key_tokens"] = key_tokens
    if value_tokens is not None:
        fields["value_tokens"] = value_tokens
    if task in SEQUENCE_TASKS:
        if length is not None and lengths is not None:
            raise UsageError("give --length or --lengths, not both")
        if length is not None:
            fields["lengths"] = parse_lengths(str(length))
        if lengths is not None:
            fields["lengths"] = parse_lengths(lengths)
    if task == "parity-ones":
        fields["ones"] = 4 if ones is None else ones
    return fields


def generate(spec: TaskSpec, n: int, seed: int) -> Iterator[Item]:
    """Yield n items of the task, deterministically from `seed`."""
    if n < 1:
        raise UsageError(f"-n must be at least 1, not {n}")
    module = TASKS[spec.task]
    for index in range(n):
        yield module.generate_one(spec.params, seed, index)

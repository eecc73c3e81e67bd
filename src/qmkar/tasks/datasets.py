"""Dataset files: qmkar's own JSONL (one item per line) and the blog's JSON problem sets.

The blog's files (../shared/data/blog-qmkar/) store numbers as strings in some fields
and name the counting context `values`; they are read into the same Item records so
that rendering them with the default templates gives the blog's prompts byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
from pydantic import ValidationError

from qmkar import userfiles
from qmkar.errors import DatasetError, UsageError
from qmkar.outputs import QMKAR_LINE, refuse_existing, replacing
from qmkar.readprogress import ReadProgress
from qmkar.shapes import DatasetItemShape, ItemShape, SlimItemShape
from qmkar.tasks import family
from qmkar.tasks.base import Item, TaskParams, params_type
from qmkar.trusted import built

PAIR = re.compile(r"k: (\d+), v: (\d+)")


def write_items(items: Iterable[Item], path: Path, force: bool = False) -> int:
    """Write items as JSONL to `path`, whole or not at all (an existing file is replaced only
    with `force`, and only once every item is made); return how many were written."""
    refuse_existing(path, force)
    count = 0
    with replacing(path) as out:
        for item in items:
            out.write(item.model_dump_json().encode() + b"\n")
            count += 1
    return count


def read_items(path: Path, progress: ReadProgress | None = None) -> Iterator[Item]:
    """Yield the items of a dataset file: qmkar JSONL or one of the blog's JSON arrays.

    Every item is checked against its task (tasks.family.TaskFamily.item_problem): its
    context, positions, sizes and answer. An id used twice for different questions is
    refused; an identical repeat (the same line again) is yielded once. DatasetError names
    the line (or problem). `progress` is told the bytes read (a JSONL file's)."""
    seen: dict[str, tuple[bytes, str]] = {}  # id -> (digest of its line, where it was first read)
    for where, item, text in _raw_items(path, progress):
        problem = _problem(item)
        if problem is not None:
            raise DatasetError(f"{path} {where} (id {item.id}) does not fit task {item.task}: {problem}")
        digest = hashlib.sha256(text.encode()).digest()[:16]
        first = seen.get(item.id)
        if first is None:
            seen[item.id] = (digest, where)
            yield item
        elif first[0] != digest:
            raise DatasetError(f"{path} {where} reuses the id {item.id} of {first[1]} for a different "
                               "question; every question needs its own id")


def checked_items(path: Path) -> Iterator[Item]:
    """The items of a dataset that read_items has read through in this process, the file
    unchanged since (plans.DatasetPlan makes sure): read as read_items reads them, without the
    task's checks and the digest of every line, an id seen before skipped as read_items skips it."""
    seen: set[str] = set()
    for _, item, _ in _raw_items(path):
        if item.id not in seen:
            seen.add(item.id)
            yield item


_decode_strict = msgspec.json.Decoder(DatasetItemShape).decode


def _strict(line: str, params: dict[tuple[str, bytes], TaskParams]) -> Item | None:
    """The item of a line msgspec's types take whole (no other fields, no value pydantic would
    have to convert); None sends the line to pydantic, which names what is wrong or converts
    what it may (a "12" for 12)."""
    try:
        return trusted_item(_decode_strict(line), params)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return None


def trusted_item(fast: ItemShape | SlimItemShape, params: dict[tuple[str, bytes], TaskParams],
                 dropped_size: int | None = None) -> Item:
    """The Item of a decoded item whose content is trusted (a dataset file checked in this
    process, a transcript's item line): its params checked by pydantic once per distinct
    params in `params` (ValueError when they do not fit the task), the item built without
    validation (trusted.built) from the decoded fields as they are, in Item's order (msgspec
    already made each pair a tuple). The fields set is model_construct's: all but dropped_size.
    With `dropped_size`, the context is left out (pairs and values None) and that is its size:
    rescore.py's light items, whose pairs were counted, not decoded."""
    key = (fast.task, bytes(fast.params))
    typed = params.get(key)
    if typed is None:
        typed = params[key] = params_type(fast.task).model_validate_json(key[1])
    kept = dropped_size is None
    return built(Item, {
        "id": fast.id, "task": fast.task, "pairs": fast.pairs if kept else None,
        "values": fast.values if kept else None, "query": fast.query, "expected": fast.expected,
        "target_positions": fast.target_positions, "params": typed, "source": fast.source,
        "depths": fast.depths, "text": fast.text, "dropped_size": dropped_size,
    }, set(ITEM_FIELDS))


def _problem(item: Item) -> str | None:
    try:
        chosen = family(item.task)
    except UsageError as exc:
        return str(exc)
    return chosen.item_problem(item)


# The fields of a dataset line (Item's, less the one a reader sets itself).
ITEM_FIELDS = frozenset(Item.model_fields) - {"dropped_size"}


def _raw_items(path: Path, progress: ReadProgress | None = None) -> Iterator[tuple[str, Item, str]]:
    """(where, item, its text) for each item of the file, as read (not yet checked against its
    task); the text of a blog problem is the item's JSON."""
    if userfiles.head(path, "dataset", DatasetError).lstrip().startswith("["):
        for number, item in enumerate(_read_blog(path), start=1):
            yield f"problem {number}", item, item.model_dump_json()
        return
    params: dict[tuple[str, bytes], TaskParams] = {}
    for number, line in userfiles.read_lines(path, "dataset", DatasetError, progress):
        if line.strip():
            fast = _strict(line, params)  # msgspec's check first; pydantic's for what it refuses
            yield f"line {number}", fast if fast is not None else _line_item(path, number, line), line.strip()


def _line_item(path: Path, number: int, line: str) -> Item:
    """The item of one JSONL line, checked by pydantic (not yet against its task)."""
    where = f"line {number}"
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path} {where} is not JSON ({exc.msg} at column {exc.colno}); a dataset "
                           "holds one JSON item per line (see README.md)") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path} {where} is a JSON {_kind(data)}, not an item (a JSON object); "
                           "a dataset holds one item per line (see README.md)")
    unknown = sorted(set(data) - ITEM_FIELDS)
    if unknown:
        if QMKAR_LINE.match(line.encode()):  # how `transcript.files` tells a transcript too
            raise DatasetError(
                f"{path} is a qmkar transcript, not a dataset ({where} is its {data.get('kind', 'answer')} "
                "line); --dataset takes questions, one item per line, as `qmkar generate` writes them: "
                "to ask a transcript's questions again, run the command on its first line with other "
                "--model and -o")
        raise DatasetError(f"{path} {where} has fields no qmkar item has: {', '.join(unknown)} "
                           "(the item schema is in README.md)")
    try:
        return Item.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "item"
        raise DatasetError(
            f"{path} {where} is not a qmkar item ({field}: {first['msg']}); "
            "make datasets with `qmkar generate` or see the item schema in README.md"
        ) from None


def _kind(data: Any) -> str:
    return {list: "array", str: "string", bool: "true/false", type(None): "null"}.get(type(data), "number")


# The blog's problem sets: the fields of each task's problems (README of the blog data).
BLOG_FIELDS = {
    "qmkar": frozenset({"problem_id", "num_pairs", "target_k", "t", "kv_pairs", "ground_truth", "question"}),
    "mqar": frozenset({"problem_id", "num_pairs", "target_k", "kv_pairs", "ground_truth", "question"}),
    "counting": frozenset({"problem_id", "num_values", "values", "ground_truth", "question"}),
}


def blog_task(problem: dict[str, Any]) -> str | None:
    """The task whose fields a blog problem has exactly, or None."""
    return next((task for task, fields in BLOG_FIELDS.items() if set(problem) == fields), None)


def _blog_fields_problem(problem: dict[str, Any]) -> str:
    """Which fields keep a problem from being any blog task's, against the closest one."""
    keys = set(problem)
    task, fields = min(BLOG_FIELDS.items(), key=lambda entry: len(keys ^ entry[1]))
    missing, extra = sorted(fields - keys), sorted(keys - fields)
    parts = ([f"lacks {', '.join(missing)}"] if missing else []) + \
        ([f"has unknown fields {', '.join(extra)}"] if extra else [])
    return f"its fields match no blog task's: as a {task} problem it {' and '.join(parts)}"


def _read_blog(path: Path) -> Iterator[Item]:
    text = userfiles.read_text(path, "dataset", DatasetError)
    try:
        problems = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(problems, list) or not problems:
        raise DatasetError(f"{path} holds no problems (expected a JSON list of objects)")
    file_task = None
    for number, problem in enumerate(problems, start=1):
        if not isinstance(problem, dict):
            raise DatasetError(f"{path} problem {number} is a JSON {_kind(problem)}; every problem "
                               "must be a JSON object")
        task = blog_task(problem)
        if task is None:
            raise DatasetError(f"{path} problem {number}: {_blog_fields_problem(problem)}")
        if file_task is not None and task != file_task:
            raise DatasetError(f"{path} problem {number} has the fields of a {task} problem but the "
                               f"problems before it are {file_task}; one file holds one task")
        file_task = task
        yield _blog_item(problem, path, task)


def _ints(value: Any) -> list[int]:
    """The blog writes lists both as JSON arrays and as strings like "1607, 6171"."""
    if isinstance(value, list):
        return [int(v) for v in value]
    if isinstance(value, int):
        return [value]
    return [int(part) for part in str(value).split(",") if part.strip()]


def _blog_item(problem: dict[str, Any], path: Path, task: str) -> Item:
    pid = problem.get("problem_id", "?")
    try:
        if task == "counting":
            values = _ints(problem["values"])
            match = re.search(r"equal to (\d+)", problem["question"])
            if match is None:
                raise DatasetError(f"{path} problem {pid}: no 'equal to N' in the question")
            queried = int(match.group(1))
            expected = _ints(problem["ground_truth"])
            positions = [i for i, v in enumerate(values) if v == queried]
            pairs = None
            query = [queried]
        else:
            pairs = [(int(k), int(v)) for k, v in PAIR.findall(problem["kv_pairs"])]
            rebuilt = "; ".join(f"k: {k}, v: {v}" for k, v in pairs)
            if rebuilt != problem["kv_pairs"]:
                raise DatasetError(
                    f"{path} problem {pid}: kv_pairs is not of the form 'k: K, v: V; ...'"
                )
            query = _ints(problem["target_k"])
            expected = _ints(problem["ground_truth"])
            values = None
            if task == "qmkar":
                positions = [i for i, (k, _) in enumerate(pairs) if k == query[0]]
            else:
                where = {k: i for i, (k, _) in enumerate(pairs)}
                positions = [where[k] for k in query if k in where]
                if len(positions) != len(query):
                    raise DatasetError(f"{path} problem {pid}: a queried key is not in kv_pairs")
        # The blog's own fields are kept as they were (TaskParams keeps them as extras).
        params = params_type(task).model_validate(
            {key: problem[key] for key in ("num_pairs", "num_values", "t") if key in problem})
        if isinstance(pid, bool) or not isinstance(pid, int):
            raise DatasetError(f"{path} problem {pid!r}: problem_id must be a whole number")
        return Item(
            id=f"blog-{task}-{pid:03d}",
            task=task,
            pairs=pairs,
            values=values,
            query=query,
            expected=expected,
            target_positions=positions,
            params=params,
            source=f"blog:{path.name}#{pid}",
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "problem"
        raise DatasetError(f"{path} problem {pid}: {field}: {first['msg']}") from None
    except (KeyError, ValueError, TypeError) as exc:
        raise DatasetError(
            f"{path} problem {pid} is not a {task} problem of the blog's form ({exc})"
        ) from None

"""Dataset files: our JSONL round-trips, the blog's files give the blog's exact prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qmkar.errors import DatasetError
from qmkar.render import default_template, render_text
from qmkar.tasks import generate, make_spec
from qmkar.tasks.datasets import read_items, write_items

BLOG_FILES = [("qmkar_problems.json", "kv_pairs"), ("mqar_problems.json", "kv_pairs"),
              ("counting_problems.json", "values")]


@pytest.mark.parametrize("name, context_field", BLOG_FILES)
def test_blog_prompts_are_byte_identical(blog_dir: Path, name: str, context_field: str) -> None:
    problems = json.loads((blog_dir / name).read_text())
    items = list(read_items(blog_dir / name))
    assert len(items) == len(problems) == 100
    for item, problem in zip(items, problems, strict=True):
        blog_prompt = problem[context_field] + "\n\n" + problem["question"]
        assert render_text(item, default_template(item.task)).encode() == blog_prompt.encode()


def test_blog_fields_are_read_despite_their_quirks(blog_dir: Path) -> None:
    qmkar = next(read_items(blog_dir / "qmkar_problems.json"))
    assert qmkar.task == "qmkar" and qmkar.id == "blog-qmkar-001"
    assert qmkar.expected == [9805, 4482, 8712] and qmkar.query == [115]
    assert [qmkar.pairs[i][1] for i in qmkar.target_positions] == qmkar.expected
    mqar = next(read_items(blog_dir / "mqar_problems.json"))
    assert mqar.query == [910, 282, 841] and mqar.expected == [1607, 6171, 5397]
    counting = next(read_items(blog_dir / "counting_problems.json"))
    assert counting.expected == [15] and counting.query == [34]
    assert counting.values.count(34) == 15


def test_generated_datasets_round_trip(tmp_path: Path) -> None:
    items = list(generate(make_spec("mqar"), 4, 2))
    path = tmp_path / "d.jsonl"
    assert write_items(items, path) == 4
    assert list(read_items(path)) == items


def test_malformed_dataset_lines_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = next(generate(make_spec("counting"), 1, 0)).model_dump_json()
    path.write_text(good + "\n" + '{"id": "x"}\n')
    with pytest.raises(DatasetError, match="line 2"):
        list(read_items(path))


def test_missing_dataset_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        list(read_items(tmp_path / "nope.jsonl"))


def test_blog_file_with_a_broken_context_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps([{"problem_id": 1, "num_pairs": 1, "target_k": 5, "t": 3,
                                 "kv_pairs": "k=5 v=6", "ground_truth": [6], "question": "?"}]))
    with pytest.raises(DatasetError, match="not of the form"):
        list(read_items(path))


def test_a_dataset_plan_reads_its_checked_file_fast_and_a_changed_one_with_checks(tmp_path: Path) -> None:
    from qmkar.plans import DatasetPlan

    items = []
    for task in ("qmkar", "counting", "dyck", "copy"):
        items += list(generate(make_spec(task), 3, seed=5))
    path = tmp_path / "d.jsonl"
    write_items(items, path)
    lines = path.read_text().splitlines()
    # A repeated line, a blank one and a spaced one.
    path.write_text("\n".join([*lines, lines[0], "", "  " + lines[1]]) + "\n")
    plan = DatasetPlan(path)
    assert plan.count == len(items)
    again = list(plan.items())  # the fast reading: the file is unchanged since the plan checked it
    assert [item.model_dump_json() for item in again] == [item.model_dump_json() for item in read_items(path)]
    assert [item.size for item in again] == [item.size for item in items]
    # Changed after the plan read it: read with every check again, so a broken answer is refused.
    broken = json.loads(lines[0])
    broken["expected"][0] += 1
    path.write_text("\n".join([json.dumps(broken), *lines[1:]]) + "\n")
    with pytest.raises(DatasetError, match="line 1"):
        list(plan.items())


def test_lines_msgspec_refuses_are_read_by_pydantic_as_before(tmp_path: Path) -> None:
    """Well-formed lines take msgspec's fast check; a line it refuses goes to pydantic, which
    still converts what it may ("193" for 193) and names what is wrong."""
    item = next(generate(make_spec("qmkar", pairs=10), 1, seed=3))
    loose = json.loads(item.model_dump_json())
    loose["query"] = [str(key) for key in loose["query"]]
    path = tmp_path / "d.jsonl"
    path.write_text(item.model_dump_json() + "\n" + json.dumps({**loose, "id": "loose"}) + "\n")
    fast, slow = list(read_items(path))
    assert slow.query == fast.query == item.query
    assert slow.model_dump(exclude={"id"}) == fast.model_dump(exclude={"id"})
    path.write_text(json.dumps({**loose, "query": ["k"]}) + "\n")
    with pytest.raises(DatasetError, match="line 1 is not a qmkar item \\(query.0: "):
        list(read_items(path))
    path.write_text(json.dumps({**json.loads(item.model_dump_json()), "colour": "red"}) + "\n")
    with pytest.raises(DatasetError, match="line 1 has fields no qmkar item has: colour"):
        list(read_items(path))

"""rescore's shortcuts give what the general code gives: items built without pydantic's
loop, and grades written without dumping them."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from qmkar.records import ItemLine
from qmkar.rescore import Items, _fields, _grade
from qmkar.tasks import family
from qmkar.tasks.base import Item
from qmkar.tasks.datasets import ITEM_FIELDS
from qmkar.trusted import built
from tests.support.factories import counting_item, recall_item


def _same(built: Item, constructed: Item) -> None:
    assert built == constructed
    assert list(built.__dict__) == list(constructed.__dict__)
    assert built.model_fields_set == constructed.model_fields_set
    assert built.__pydantic_extra__ == constructed.__pydantic_extra__
    assert built.__pydantic_private__ == constructed.__pydantic_private__
    assert built.model_dump_json() == constructed.model_dump_json()


def test_an_item_built_from_its_fields_is_what_model_construct_builds() -> None:
    for item in (recall_item(), recall_item("mqar", (230, 150, 300)), counting_item()):
        fields = {name: getattr(item, name) for name in Item.model_fields}
        _same(built(Item, dict(fields), set(ITEM_FIELDS)), Item.model_construct(set(ITEM_FIELDS), **fields))


def test_an_item_line_decodes_to_the_item_pydantic_reads(tmp_path: Path) -> None:
    for item in (recall_item(), recall_item("mqar", (230, 150, 300)), counting_item()):
        line = ItemLine(item=item).model_dump_json().encode()
        (tmp_path / "t.jsonl").write_bytes(line + b"\n")
        items = Items(tmp_path / "t.jsonl")
        try:
            decoded = items.decode(line)
        finally:
            items.close()
        read = ItemLine.model_validate_json(line).item
        assert decoded == read
        assert decoded.model_dump_json() == read.model_dump_json()
        _same(decoded, Item.model_construct(set(ITEM_FIELDS), **dict(decoded.__dict__)))
        assert decoded.model_fields_set == set(ITEM_FIELDS)


TASKS = ["qmkar", "mqar", "counting", "qmkar-kv", "mqar-kv", "parity", "parity-ones", "dyck", "copy"]
ANSWERS = ["", "Sorry, I cannot.", "1, 2, 3", "<think>7</think>odd", "not balanced", "yes", "0", "12 times",
           "k: 5, v: 7", "4527,6383", "99999999999999, 1"]


def _answers(item: Item) -> list[str]:
    oracle = family(item.task).oracle_answer(item)
    return [oracle, oracle + ", 7", oracle.replace(", ", "\n"), *ANSWERS]


def test_the_fields_of_a_grade_are_its_json_dump() -> None:
    for task in TASKS:
        rules = family(task)
        params = rules.make_params({})
        for index in range(3):
            item = rules.generate_one(params, 0, index)
            for text in _answers(item):
                graded = rules.grade(item, text)
                for model in graded:
                    fields, dumped = _fields(model), model.model_dump(mode="json")
                    assert fields == dumped and list(fields) == list(dumped), (task, text)
                    assert msgspec.json.encode(fields) == msgspec.json.encode(dumped), (task, text)


def test_an_answer_graded_without_its_pairs_gets_the_grade_the_whole_item_gives(tmp_path: Path) -> None:
    """rescore grades a recall answer from its item's light form (the pairs counted, not
    decoded) unless its parse or score reads them (false positives are classed by the pairs
    holding them): every grade is the whole item's, and the pairs are decoded only for those."""
    light_only = 0
    for task in TASKS:
        rules = family(task)
        for options in ({}, {"pairs": 40, "placement": "end"} if task == "qmkar" else {}):
            params = rules.make_params(options)
            for index in range(3):
                item = rules.generate_one(params, 0, index)
                pairs = item.pairs or []
                context = rules.prompt_fields(item).get("pairs", "")
                distractor = next((str(v) for k, v in pairs if v not in item.expected), "7")
                texts = [*_answers(item), rules.oracle_answer(item) + ", " + distractor, context,
                         ", ".join(str(v) for _, v in pairs)]
                path = tmp_path / f"{task}-{index}.jsonl"
                path.write_bytes(ItemLine(item=item).model_dump_json().encode() + b"\n")
                for text in texts:
                    items = Items(path)
                    try:
                        items.add(path.read_bytes(), 0)
                        held = items.held(item.id)
                        assert held is not None
                        assert (held.light is not None) == (item.pairs is not None), task
                        graded = _grade(held, items, text)
                    finally:
                        items.close()
                    assert graded == rules.grade(item, text), (task, text)
                    if held.whole is None:
                        light_only += 1
                        assert not graded.score.fp, (task, text)
    assert light_only > 50  # the light form did the grading, not only the whole item


def test_rescore_writes_what_dumping_every_grade_writes(cli, tmp_path: Path, monkeypatch) -> None:
    transcript = tmp_path / "t.jsonl"
    for task in TASKS:
        cli("eval", "-m", "sim:linear", "-m", "oracle", "--task", task, "-n", "4", "-o", transcript,
            "--no-cache")
    lines = transcript.read_bytes().splitlines(keepends=True)
    mixed = tmp_path / "mixed.jsonl"
    with mixed.open("wb") as out:  # every answer text of _answers, given to some question
        for number, line in enumerate(lines):
            record = msgspec.json.decode(line)
            if record.get("kind") == "answer" and record.get("answer") is not None:
                record["answer"] = ([*ANSWERS, "4527, 6383", "0012 7"])[number % (len(ANSWERS) + 2)]
                line = msgspec.json.encode(record) + b"\n"
            out.write(line)
    for source in (transcript, mixed):
        cli("rescore", source, "-o", tmp_path / "fast.jsonl", "--force")
        with monkeypatch.context() as patched:
            patched.setattr("qmkar.rescore.PLAIN_MODELS", ())
            cli("rescore", source, "-o", tmp_path / "dumped.jsonl", "--force")
        assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "dumped.jsonl").read_bytes()


def test_a_line_whose_grade_is_unchanged_is_copied_as_it_is(cli, tmp_path: Path) -> None:
    """Only an answer whose grade changed is written anew: the others keep their bytes, floats
    written as pydantic writes them (6.75e-05) included, which decoding and encoding again with
    msgspec would change (0.0000675)."""
    transcript = tmp_path / "t.jsonl"
    cli("eval", "-m", "oracle", "-m", "sim:linear", "-n", "6", "-o", transcript, "--no-cache")
    lines = transcript.read_bytes().splitlines(keepends=True)
    answers = [number for number, line in enumerate(lines) if line.startswith(b'{"kind":"answer"')]
    kept, stale = answers[0], answers[-1]
    lines[kept] = re.sub(rb'"seconds":[^,]+,', b'"seconds":6.75e-05,', lines[kept], count=1)
    assert b'"seconds":6.75e-05,' in lines[kept]
    original = msgspec.json.decode(lines[stale])
    record = msgspec.json.decode(lines[stale])
    record["score"]["correct"] = not record["score"]["correct"]  # a grade that no longer follows
    lines[stale] = msgspec.json.encode(record) + b"\n"
    source = tmp_path / "edited.jsonl"
    source.write_bytes(b"".join(lines))
    result = cli("rescore", source, "-o", tmp_path / "out.jsonl")
    assert "(1 changed)" in result.stdout
    written = (tmp_path / "out.jsonl").read_bytes().splitlines(keepends=True)
    assert len(written) == len(lines)
    assert [n for n, (old, new) in enumerate(zip(lines, written, strict=True)) if old != new] == [stale]
    assert msgspec.json.decode(written[stale]) == original


def test_a_parsed_answer_of_the_wrong_shape_is_refused_as_the_whole_record_refuses_it(
        cli, tmp_path: Path) -> None:
    """rescore reads a line's parsed answer as text, to compare it with the new grade's: one
    that is not a parsed answer's shape is still an error naming its line, on an answered line
    whose grade is otherwise unchanged, on one whose grade changes, and on an errored line."""
    transcript = tmp_path / "t.jsonl"
    cli("eval", "-m", "oracle", "-n", "4", "-o", transcript, "--no-cache")
    lines = transcript.read_bytes().splitlines(keepends=True)
    answers = [number for number, line in enumerate(lines) if line.startswith(b'{"kind":"answer"')]
    errored = msgspec.json.decode(lines[answers[0]])
    errored.update(answer=None, error={"kind": "server", "message": "boom", "status": 500},
                   score=None)
    cases = {
        "unchanged": lambda record: record.update(parsed={**record["parsed"], "values": "4432"}),
        "changed": lambda record: record.update(parsed={"values": [1], "refused": "maybe"}, answer="1"),
        "errored": lambda record: (record.clear(), record.update(errored, parsed={"values": {}})),
    }
    for name, edit in cases.items():
        edited = list(lines)
        record = msgspec.json.decode(lines[answers[1]])
        edit(record)
        edited[answers[1]] = msgspec.json.encode(record) + b"\n"
        source = tmp_path / f"{name}.jsonl"
        source.write_bytes(b"".join(edited))
        result = cli("rescore", source, "-o", tmp_path / "out.jsonl", "--force", ok=False)
        assert result.exit_code == 1, (name, result.output)
        assert "Traceback" not in result.output
        assert f"line {answers[1] + 1}" in " ".join(result.output.split()), (name, result.output)

"""Reading a long transcript line by line, as the end-of-run summary does."""

from __future__ import annotations

import json

import pytest

from qmkar.errors import TranscriptError
from qmkar.providers.base import ModelRequest
from qmkar.transcript import Record, TranscriptWriter, iter_records
from tests.support.hosted import items


def record(item) -> Record:
    return Record(model="m", item=item, template="t", request=ModelRequest(messages=[]),
                  started_at="2026-01-01T00:00:00Z", seconds=1.0, answer="1")


def test_iter_records_skips_a_torn_last_line_and_rejects_a_bad_middle_one(tmp_path):
    questions = items(3)
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path) as writer:
        for question in questions:
            writer.write(record(question))
    whole = path.read_text()
    path.write_text(whole + record(questions[0]).model_dump_json()[:40])  # killed mid-write
    assert [r.item.id for r in iter_records(path)] == [q.id for q in questions]
    path.write_text(whole.replace("\n", "\nnot json\n", 1))
    with pytest.raises(TranscriptError, match="line 2"):
        list(iter_records(path))
    assert list(iter_records(tmp_path / "absent.jsonl")) == []


def test_a_fresh_transcripts_writer_holds_only_the_items_in_flight(tmp_path, cli):
    """With answers_per_item (models x samples) an item's id goes after its last answer, and
    a later answer to it only writes its line again: a reading takes both as one item.
    A fresh eval of 2 models x 2 samples writes each item's line once."""
    from qmkar.slim import SlimReading
    from qmkar.transcript import kind_of

    questions = items(3)
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path, answers_per_item=2) as writer:
        for question in questions:
            writer.write(record(question))
        assert writer.held == 3
        for question in questions:
            writer.write(record(question))
        assert writer.held == 0
        writer.write(record(questions[0]))  # asked more often than said: its line again
        assert writer.held == 1
    kinds = [kind_of(line) for line in path.read_bytes().splitlines()]
    assert kinds.count(b"item") == 4 and kinds.count(b"answer") == 7
    reading = SlimReading(path)
    assert len(list(reading)) == 7 and sorted(reading.items) == sorted(q.id for q in questions)
    out = tmp_path / "run.jsonl"
    cli("eval", "-m", "oracle", "-m", "sim:linear", "-n", "6", "--pairs", "10", "--samples", "2", "-o", out)
    kinds = [kind_of(line) for line in out.read_bytes().splitlines()]
    assert kinds.count(b"item") == 6 and kinds.count(b"answer") == 24


@pytest.mark.parametrize("block", [1 << 22, 300, 40])  # one block; many, each a few lines or one
def test_item_lines_are_found_as_a_line_by_line_reading_finds_them(cli, tmp_path, block, monkeypatch):
    """transcript.item_offsets, held to kind_of and the JSON decoder over every line: qmkar's own
    lines, and a spaced one, an escaped id, a blank line, a CRLF line, an id given twice."""
    import io

    from qmkar import transcript
    from qmkar.shapes import decode_item_id
    from qmkar.transcript import item_offsets, kind_of

    monkeypatch.setattr(transcript, "BLOCK", block)
    path = tmp_path / "t.jsonl"
    cli("eval", "-m", "oracle", "-n", "6", "--pairs", "10", "-o", path)
    lines = path.read_bytes().splitlines(keepends=True)
    items = [i for i, line in enumerate(lines) if kind_of(line) == b"item"]
    lines[items[1]] = (json.dumps(json.loads(lines[items[1]])) + "\n").encode()  # spaced
    escaped = json.loads(lines[items[2]])
    escaped["item"]["id"] += '"quoted"'
    lines[items[2]] = (json.dumps(escaped, separators=(",", ":")) + "\n").encode()
    lines[items[3] + 1] = lines[items[3] + 1].replace(b"\n", b"\r\n")
    lines.insert(items[4], b"\n")
    lines.append(lines[items[0]])  # the first item again, last: its offset is this one
    data = b"".join(lines)
    path.write_bytes(data)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    for stop in [0, 1, *starts, *(start + 1 for start in starts)]:  # a line's start, or within it
        expected = {}
        for line, start in zip(io.BytesIO(data), starts, strict=False):
            if start < stop and kind_of(line) == b"item":
                expected[decode_item_id(line).item.id] = start
        assert item_offsets(path, stop) == expected
    assert len(item_offsets(path, len(data))) == len(items)


def test_a_part_scans_the_lines_before_it_only_when_an_answer_needs_an_item_from_there(tmp_path,
                                                                                     monkeypatch):
    """SlimReading.index(start): a part whose answers follow their own item lines (one run,
    the usual transcript) reads as the whole file's reading reads those answers, without
    scanning the bytes before it; a part answering an earlier item scans them once and finds it."""
    from qmkar import slim
    from qmkar.slim import SlimReading

    questions = items(4)
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path) as writer:
        for question in questions:
            writer.write(record(question))
    start = len(b"".join(path.read_bytes().splitlines(keepends=True)[:4]))  # after two questions
    scans: list[int] = []
    original = slim.item_offsets
    monkeypatch.setattr(slim, "item_offsets", lambda p, stop: scans.append(stop) or original(p, stop))
    whole = [r.item.id for r in SlimReading(path)]
    part = SlimReading(path)
    part.index(start)
    assert [r.item.id for r in part] == whole[2:] and scans == []
    with TranscriptWriter(path, items=[q.id for q in questions]) as writer:
        writer.write(record(questions[0]))  # a later answer to the first question: no item line
    part = SlimReading(path)
    part.index(start)
    assert [r.item.id for r in part] == [q.id for q in questions[2:] + questions[:1]]
    assert scans == [start] and part.looked_up == 1


def test_a_split_starts_at_an_item_line_when_one_is_near(tmp_path, monkeypatch):
    """line_start moves a cut that falls between an item line and its answer to the next item
    line, so the part after it needs no item written before it; with no item line within
    REACH it takes the next line of any kind, and none past the last line."""
    from qmkar import transcript
    from qmkar.slim import SlimReading
    from qmkar.transcript import ITEM_HEAD, line_start

    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path) as writer:
        for question in items(6):
            writer.write(record(question))
    data = path.read_bytes()
    starts = [0] + [i + 1 for i in range(len(data) - 1) if data[i] == ord("\n")]
    items_at = [i for i in starts if data.startswith(ITEM_HEAD, i)]
    assert len(items_at) == 6
    answer = next(i for i in starts if i > items_at[1])  # the second question's answer
    assert data.startswith(b'{"kind":"answer"', answer) and items_at[2] == data.index(b"\n", answer) + 1
    assert line_start(path, answer) == items_at[2]
    assert line_start(path, answer - 5) == items_at[2]  # inside the second question's item line
    part = SlimReading(path)
    part.index(items_at[2])
    assert len(list(part)) == 4 and part.looked_up == 0
    monkeypatch.setattr(transcript, "REACH", 10)  # no item line within reach: the next line
    assert line_start(path, answer) == answer and line_start(path, answer + 1) == items_at[2]
    assert line_start(path, len(data) - 2) is None

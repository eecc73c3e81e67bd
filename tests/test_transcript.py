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

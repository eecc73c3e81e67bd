"""The state file beside a transcript: what it remembers, and what a crash leaves of it."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from qmkar.batch.state import Abandoned, BatchState, Collected, Question, Submitted, Submitting, state_path
from qmkar.condition import Condition
from qmkar.errors import TranscriptError
from qmkar.transcript import files

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONDITION = Condition(provider="openai", endpoint="http://x/v1", model="gpt-4o", template="t", task="qmkar")


def submitting(token: str, model: str = "openai:gpt-4o") -> Submitting:
    return Submitting(id=token, model=model, endpoint="http://x/v1", options={}, at=NOW, command=["qmkar"],
                      conditions={CONDITION.key(): CONDITION},
                      requests={f"{token}-0": Question("q1", CONDITION.key(), 0),
                                f"{token}-1": Question("q2", CONDITION.key(), 1)})


def test_a_batch_goes_from_in_doubt_to_live_to_closed(tmp_path: Path):
    path = state_path(tmp_path / "t.jsonl")
    assert path.name == "t.jsonl.batches"
    state = BatchState(path)
    state.write(submitting("a"))
    state.write(submitting("b"))
    (a, b) = BatchState(path).batches.values()
    assert a.in_doubt and not a.live and not a.closed
    state.write(Submitted(id="a", batch_id="batch_1", at=NOW))
    state.write(Abandoned(id="b", at=NOW, reason="refused"))
    read_back = BatchState(path)
    a, b = read_back.batches["a"], read_back.batches["b"]
    assert a.live and a.batch_id == "batch_1" and list(a.questions()) == [("q1", CONDITION.key(), 0),
                                                                         ("q2", CONDITION.key(), 1)]
    assert b.closed and not b.live and b.abandoned.reason == "refused"
    assert read_back.live() == [a] and read_back.of("openai:gpt-4o") == [a, b] and read_back.of("x") == []
    state.write(Collected(id="a", at=NOW, status="completed", answered=2, errors=0))
    assert BatchState(path).live() == []


def test_a_line_torn_by_a_crash_never_happened_and_is_cut_before_the_next(tmp_path: Path):
    path = state_path(tmp_path / "t.jsonl")
    BatchState(path).write(submitting("a"))
    whole = path.read_bytes()
    path.write_bytes(whole + Submitted(id="a", batch_id="batch_1", at=NOW).model_dump_json().encode()[:30])
    state = BatchState(path)
    assert state.batches["a"].in_doubt  # the cut reply is as if never written
    state.write(Submitted(id="a", batch_id="batch_2", at=NOW))
    assert path.read_bytes().startswith(whole) and path.read_bytes().count(b"\n") == 2
    assert BatchState(path).batches["a"].batch_id == "batch_2"


def test_a_line_that_is_no_batch_record_is_an_error(tmp_path: Path):
    path = state_path(tmp_path / "t.jsonl")
    path.write_text('{"event": "nonsense"}\n')
    with pytest.raises(TranscriptError, match="line 1 is not a qmkar batch record"):
        BatchState(path)


def test_folders_of_transcripts_do_not_read_state_files_as_transcripts(tmp_path: Path):
    (tmp_path / "t.jsonl").write_text("")
    BatchState(state_path(tmp_path / "t.jsonl")).write(submitting("a"))
    assert files([tmp_path]) == [tmp_path / "t.jsonl"]


def test_a_failed_write_is_cut_back_off_and_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from qmkar.batch import state as module

    path = state_path(tmp_path / "t.jsonl")
    state = BatchState(path)
    state.write(submitting("a"))
    before = path.read_bytes()
    real_write = os.write
    def half(descriptor: int, data: bytes) -> int:  # a full disk: part of the line, then no room
        return real_write(descriptor, data[:len(data) // 2])

    monkeypatch.setattr(module.os, "write", half)
    with pytest.raises(TranscriptError, match="No space left on device; run the same command again"):
        state.write(Submitted(id="a", batch_id="batch_1", at=NOW))
    monkeypatch.undo()
    assert path.read_bytes() == before and BatchState(path).batches["a"].in_doubt

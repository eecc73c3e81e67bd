"""Files qmkar writes and files it must leave alone: one writer per transcript, no repair of
files that are not transcripts, outputs written whole or not at all, one clear line for every
OS error on an output, and stored grades that are checked rather than trusted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qmkar.transcript import SCHEMA_VERSION, TranscriptWriter, read


def one_line_error(result, *needles: str) -> str:
    """The error a command printed: exit 1, one line, no traceback, naming every needle."""
    output = result.output if hasattr(result, "output") else result.stderr
    assert result.exit_code == 1 if hasattr(result, "exit_code") else result.returncode == 1, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    error = [line for line in lines if line.startswith("error:")]
    assert len(error) == 1, output
    flat = " ".join(output.split())
    for needle in needles:
        assert needle in flat, output
    return flat


def files_in(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


@pytest.fixture
def transcript(cli, tmp_path) -> Path:
    path = tmp_path / "run.jsonl"
    cli("eval", "-m", "oracle", "-n", "4", "--pairs", "10", "-o", path)
    return path


# --- one writer per transcript --------------------------------------------------------------


HOLD = """
import sys
from pathlib import Path
from qmkar.transcript import TranscriptWriter
writer = TranscriptWriter(Path(sys.argv[1]))
print("holding", flush=True)
sys.stdin.read()
writer.close()
"""


def test_a_second_process_cannot_write_a_transcript_another_holds(transcript, tmp_path):
    before = transcript.read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(transcript)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        second = subprocess.run([sys.executable, "-m", "qmkar", "eval", "-m", "oracle", "-n", "6", "--pairs",
                                 "10", "-o", str(transcript)], cwd=tmp_path, capture_output=True, text=True)
    finally:
        holder.communicate("")
    one_line_error(second, f"{transcript} is being written by another process (pid {holder.pid})")
    assert transcript.read_bytes() == before
    again = subprocess.run([sys.executable, "-m", "qmkar", "eval", "-m", "oracle", "-n", "6", "--pairs", "10",
                            "-o", str(transcript)], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr  # the lock went with the holder
    assert len(read(transcript).records) == 6


@pytest.mark.slow
def test_two_evals_into_one_file_at_once_leave_one_clean_transcript(tmp_path):
    out = tmp_path / "t.jsonl"
    # A slow memory, so the first is still writing when the second tries (the oracle is done
    # in a few seconds, sooner than a second process starts).
    command = [sys.executable, "-m", "qmkar", "eval", "-m", "sim:delta", "-n", "3000", "--pairs", "500",
               "-o", str(out)]
    first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 100_000):
        time.sleep(0.02)
    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    _, first_errors = first.communicate(timeout=300)
    assert first.returncode == 0, first_errors
    one_line_error(second, f"(pid {first.pid})")
    ids = [r.item_id for r in read(out).records]
    assert len(ids) == 3000 == len(set(ids))


def test_a_run_that_read_the_transcript_while_another_wrote_it_reads_it_again(tmp_path):
    # Two runs of the same command read the transcript before either takes its lock; the
    # second to write finds the file grown since it read it, reads it again and asks nothing
    # the first answered (before, every question was asked and written twice).
    from qmkar.plans import GeneratedPlan
    from qmkar.providers.registry import resolve
    from qmkar.render import default_template
    from qmkar.runner import Run
    from qmkar.tasks import make_spec

    out = tmp_path / "t.jsonl"

    def run() -> Run:
        return Run(GeneratedPlan(make_spec("qmkar", pairs=20), 30, 0), [resolve("oracle", {})], out,
                   lambda task: default_template(task), {"temperature": 0})

    early, late = run(), run()
    assert not late.execute().interrupted
    result = early.execute()
    assert result.stats.answered["oracle"] == 0 and result.stats.skipped["oracle"] == 30
    ids = [r.item_id for r in read(out).records]
    assert len(ids) == 30 == len(set(ids))


def test_a_failed_append_leaves_only_whole_lines(transcript, monkeypatch):
    """A full disk mid-write: the part written is cut back off and the error is one line."""
    from qmkar import writer as module
    from qmkar.errors import TranscriptError

    before = transcript.read_bytes()
    record = read(transcript).records[0]
    real_write = os.write

    def half(descriptor: int, data: bytes) -> int:
        return real_write(descriptor, data[: len(data) // 2])

    writer = TranscriptWriter(transcript)
    monkeypatch.setattr(module.os, "write", half)
    with pytest.raises(TranscriptError, match="No space left on device"):
        writer.write(record.model_copy(update={"item_id": "other"}).model_copy(
            update={"item": record.item.model_copy(update={"id": "other"})}))
    monkeypatch.undo()
    writer.close()
    assert transcript.read_bytes() == before


# --- files qmkar did not write ---------------------------------------------------------------


@pytest.mark.parametrize("contents", [
    b"my notes\nabout the run\n",
    b'{"id": "x-1", "task": "qmkar", "query": [1], "expected": [2]}',  # a dataset line, no newline
    b"\n\n   \n",
    b'{"a": 1}',
])
def test_eval_onto_a_file_qmkar_did_not_write_is_refused_and_left_as_it_was(cli, tmp_path, contents):
    path = tmp_path / "notes.jsonl"
    path.write_bytes(contents)
    result = cli("eval", "-m", "oracle", "-n", "2", "--pairs", "10", "-o", path, ok=False)
    one_line_error(result, str(path))
    assert path.read_bytes() == contents


def test_a_dataset_of_one_item_without_a_final_newline_is_not_a_torn_transcript(cli, tmp_path):
    dataset = tmp_path / "d.jsonl"
    cli("generate", "-n", "1", "--pairs", "10", "-o", dataset)
    dataset.write_bytes(dataset.read_bytes().rstrip(b"\n"))
    before = dataset.read_bytes()
    result = cli("eval", "-m", "oracle", "--dataset", dataset, "-o", dataset, ok=False)
    one_line_error(result, str(dataset))
    assert dataset.read_bytes() == before
    one_line_error(cli("report", dataset, ok=False), "line 1 is not a qmkar transcript record")


def test_a_torn_last_line_of_a_transcript_is_still_dropped_and_asked_again(cli, transcript):
    whole = transcript.read_bytes()
    transcript.write_bytes(whole + whole.splitlines(keepends=True)[-1][:50])
    result = cli("eval", "-m", "oracle", "-n", "5", "--pairs", "10", "-o", transcript)
    assert "4 of 5 already answered" in result.output
    contents = read(transcript)
    assert contents.torn_bytes == 0
    assert len({r.item_id for r in contents.records}) == 5 == len(contents.records)


# --- generate ------------------------------------------------------------------------------


def test_generate_does_not_replace_a_file_without_force(cli, tmp_path, transcript):
    before = transcript.read_bytes()
    one_line_error(cli("generate", "-n", "3", "-o", transcript, ok=False),
                   f"{transcript} exists (a qmkar transcript)", "--force")
    assert transcript.read_bytes() == before
    cli("generate", "-n", "3", "--pairs", "10", "-o", transcript, "--force")
    assert len(transcript.read_text().splitlines()) == 3


def test_generate_with_a_bad_option_leaves_an_existing_file_intact(cli, tmp_path):
    path = tmp_path / "existing.jsonl"
    cli("generate", "-n", "3", "--pairs", "10", "-o", path)
    before = path.read_bytes()
    for args in (["-n", "0"], ["-n", "0", "--force"], ["--pairs", "0", "--force"]):
        result = cli("generate", *args, "-o", path, ok=False)
        assert result.exit_code != 0 and "Traceback" not in result.output
        assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.jsonl"]


# --- outputs: whole or not at all, and one line for an OS error -----------------------------


def test_rescore_output_errors_are_one_line_naming_the_path(cli, transcript, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    one_line_error(cli("rescore", transcript, "-o", folder, "--force", ok=False), f"{folder}", "folder")
    long_name = tmp_path / ("x" * 300 + ".jsonl")
    one_line_error(cli("rescore", transcript, "-o", long_name, ok=False), "File name too long")
    unwritable = Path("/proc/qmkar-test/out.jsonl")
    one_line_error(cli("rescore", transcript, "-o", unwritable, ok=False), str(unwritable.parent))
    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    one_line_error(cli("rescore", transcript, "-o", blocked / "out.jsonl", ok=False), str(blocked), "file")
    assert sorted(files_in(tmp_path)) == ["a-file", "run.jsonl"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_rescore_into_a_read_only_folder_is_one_line(cli, transcript, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        one_line_error(cli("rescore", transcript, "-o", folder / "out.jsonl", ok=False), "Permission denied")
    finally:
        folder.chmod(0o700)


def test_eval_with_the_default_results_folder_blocked_is_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").write_text("not a folder")
    result = cli("eval", "-m", "oracle", "-n", "2", "--pairs", "10", ok=False)
    one_line_error(result, "results")
    assert (tmp_path / "results").read_text() == "not a folder"


def test_rescore_writes_whole_or_not_at_all(cli, transcript, tmp_path):
    out = tmp_path / "rescored.jsonl"
    cli("rescore", transcript, "-o", out)
    assert [r.key for r in read(out).records] == [r.key for r in read(transcript).records]
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(transcript.read_bytes() + b"not a record\n" + transcript.read_bytes()[-20:])
    before = out.read_bytes()
    one_line_error(cli("rescore", broken, "-o", out, "--force", ok=False), "is not a qmkar transcript record")
    assert out.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_plot_onto_an_existing_file_is_one_line(cli, transcript, tmp_path):
    target = tmp_path / "figures.png"
    target.write_bytes(b"old")
    one_line_error(cli("plot", transcript, "-o", target, ok=False), str(target), "is a file")
    assert target.read_bytes() == b"old"


def test_html_report_onto_a_folder_or_a_transcript_is_refused(cli, transcript, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    one_line_error(cli("report", "--format", "html", "-o", folder, transcript, ok=False), str(folder),
                   "folder")
    assert not list(folder.iterdir())
    before = transcript.read_bytes()
    one_line_error(cli("report", "--format", "html", "-o", transcript, transcript, ok=False),
                   "is a qmkar transcript")
    other = tmp_path / "other.jsonl"
    cli("eval", "-m", "oracle", "-n", "2", "--pairs", "10", "-o", other)
    kept = other.read_bytes()
    one_line_error(cli("report", "--format", "html", "-o", other, transcript, ok=False),
                   "is a qmkar transcript")
    assert transcript.read_bytes() == before and other.read_bytes() == kept
    assert sorted(files_in(tmp_path)) == ["other.jsonl", "run.jsonl"]
    cli("report", "--format", "html", "-o", tmp_path / "report.html", transcript)
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")


# --- what is read back ------------------------------------------------------------------------


def test_an_answer_from_a_newer_qmkar_is_refused_with_one_line(cli, transcript):
    lines = transcript.read_text().splitlines()
    last = json.loads(lines[-1])
    last.update(schema_version=SCHEMA_VERSION + 1, new_field={"x": 1})
    transcript.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    for command in (["report"], ["compare"]):
        one_line_error(cli(*command, transcript, ok=False), "written by a newer qmkar",
                       f"line {len(lines)}")
    one_line_error(cli("eval", "-m", "oracle", "-n", "4", "--pairs", "10", "-o", transcript, ok=False),
                   "written by a newer qmkar")


@pytest.mark.parametrize("tamper", ["score", "answer"])
def test_a_stored_score_that_contradicts_its_answer_is_graded_again(cli, transcript, tamper):
    """The oracle answered all four right; one record is edited to claim otherwise."""
    lines = transcript.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if '"kind":"answer"' in line)
    record = json.loads(lines[index])
    if tamper == "score":  # the right answer, a score saying it is wrong
        record["score"].update(correct=False, outcome="fn", fn=1, tp=record["score"]["tp"] - 1)
    else:  # a wrong answer, the old parse and score saying it is right
        record["answer"] = "1"
    lines[index] = json.dumps(record)
    transcript.write_text("\n".join(lines) + "\n")
    result = cli("report", "--format", "json", transcript)
    [row] = json.loads(result.stdout)
    assert row["correct"] == (4 if tamper == "score" else 3)
    assert "1 answer(s) have a stored score that does not follow from the stored answer" in result.stderr
    rescored = transcript.with_name("rescored.jsonl")
    assert "(1 changed)" in cli("rescore", transcript, "-o", rescored).output
    assert "does not follow" not in cli("report", rescored).stderr


def test_which_stored_grades_are_checked_again():
    from qmkar.score import Score
    from qmkar.tasks import family

    def contradicts(task, expected, values, score, text):
        return family(task).contradicts(expected, values, score, text)

    right = Score(correct=True, tp=2)
    assert not contradicts("qmkar", (12, 345), [345, 12], right, "v = 345 and v = 12")
    assert not contradicts("qmkar", (12, 345), [345, 12], right, "345, 12")
    assert contradicts("qmkar", (12, 345), [345, 12], right, "345, 123")
    assert contradicts("qmkar", (12, 345), [345, 12], right, "v = 3456 and v = 12")  # text edited
    assert contradicts("qmkar", (12, 345), [12], right, "12")  # a miss scored right
    assert contradicts("counting", (3,), [], Score(correct=False, fn=1), "3 times")
    assert not contradicts("counting", (3,), [], Score(correct=False, fn=1), "I cannot count")
    # multi-part values are written as their parts, so only the score is checked against them
    assert not contradicts("qmkar-kv", (1234,), [1234], right, "12-34")


def test_a_context_is_counted_from_its_text_exactly_when_a_full_decode_would_take_it():
    import random

    import msgspec

    from qmkar.shapes import int_rows

    shapes = {1: list[int], 2: list[tuple[int, int]]}
    tokens = ["7", "-12", "0", "3.5", "1e3", '"8"', "null", "true", "[]", "[4]", "[5,6]", "[1,2,3]"]
    rng = random.Random(16)
    for _ in range(4000):
        width = rng.choice((1, 2))
        rows = [rng.choice(tokens) if width == 1 else
                "[" + ",".join(rng.choice(tokens[:3]) for _ in range(rng.choice((2, 2, 2, 1, 3)))) + "]"
                for _ in range(rng.randrange(0, 5))]
        if rng.random() < 0.2:
            rows = [rng.choice(tokens) for _ in rows]
        separator = rng.choice([",", ",", ",", ", "])
        text = ("[" + separator.join(rows) + "]").encode()
        try:
            decoded = msgspec.json.decode(text, type=shapes[width])
        except msgspec.ValidationError:
            decoded = None
        compact = decoded is not None and msgspec.json.encode(decoded) == text
        assert int_rows(text, width) == (len(decoded) if compact else None), text


def test_a_context_written_another_way_reads_as_the_whole_item_judges_it(cli, transcript, tmp_path):
    lines = transcript.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "item")
    spaced = tmp_path / "spaced.jsonl"  # another writer's spacing: the same questions
    respaced = json.dumps(json.loads(lines[index]))
    spaced.write_text("\n".join([*lines[:index], respaced, *lines[index + 1:]]) + "\n")
    assert json.loads(cli("report", "--format", "json", spaced).stdout) == json.loads(
        cli("report", "--format", "json", transcript).stdout)
    [pair] = json.loads(cli("compare", "--format", "json", transcript, spaced).stdout)["paired"]
    assert pair["n"] == 4, pair  # the one question written another way is still the same question

    item = json.loads(lines[index])
    item["item"]["pairs"][0] = [item["item"]["pairs"][0][0], "x"]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*lines[:index], json.dumps(item, separators=(",", ":")),
                                 *lines[index + 1:]]) + "\n")
    one_line_error(cli("report", broken, ok=False), f"{broken} line {index + 1}", "valid integer")

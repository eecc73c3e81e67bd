"""A rescore split in two parts (halves.py), the second rescored by a real worker process:
the same bytes, counts, errors and exit codes as one pass, whatever the worker meets or
suffers, and nothing left beside the output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import msgspec
import pytest

from qmkar import halves, offload
from qmkar.transcript import kind_of, line_start
from tests.support.processes import workers_marked
from tests.support.transcripts import values, write_replay

FRACTIONS = (0.1, 0.5, 0.9)  # where the second part starts, as a share of the file's bytes


def runs(cli, folder: Path) -> Path:
    """A transcript of three runs, its stored grades partly out of date: the oracle's (whose item
    lines all later answers use), a replay's (right, short, and missing answers, which are errors
    with a null answer), and sim:linear's on another task (new items and a template, late)."""
    dataset = folder / "d.jsonl"
    cli("generate", "-n", "60", "--pairs", "20", "-o", dataset)
    replay = write_replay(dataset, folder / "r.jsonl",
                          lambda i, item: None if i % 3 == 0 else values(item, drop_last=i % 3 == 1))
    made = folder / "made.jsonl"
    cli("eval", "-m", "oracle", "--dataset", dataset, "-o", made)
    cli("eval", "-m", f"replay:{replay}", "--dataset", dataset, "-o", made, code=3)
    cli("eval", "-m", "sim:linear", "--task", "mqar", "-n", "30", "-o", made, "--no-cache")
    transcript = folder / "t.jsonl"
    with transcript.open("wb") as out:
        for number, line in enumerate(made.read_bytes().splitlines(keepends=True)):
            record = msgspec.json.decode(line)
            if record.get("kind") == "answer" and record.get("answer") is not None and number % 4 == 0:
                record["answer"] = "1, 2, 3"  # graded again, this answer's grade changes
                line = msgspec.json.encode(record) + b"\n"
            out.write(line)
    return transcript


def v1_line(line: bytes, items: dict[str, dict]) -> bytes:
    """An answer line as qmkar 0.1 wrote it (schema 1: its item inside, no condition)."""
    record = msgspec.json.decode(line)
    return msgspec.json.encode({
        "schema_version": 1, "model": record["model"], "item": items[record["item_id"]],
        "template": "builtin:qmkar.txt", "request": {"messages": [], "settings": {"seed": 0}},
        "answer": record["answer"], "started_at": record["started_at"], "seconds": 0.5,
        "attempts": [], "parsed": None, "score": None, "extra": {}}) + b"\n"


def variants(cli, folder: Path) -> dict[str, Path]:
    """The transcripts each test splits: plain, and with what sends the second part back to
    this process (schema-1 records, a bad line, a newer run) or is left out (a torn last line)."""
    plain = runs(cli, folder)
    lines = plain.read_bytes().splitlines(keepends=True)
    items = {msgspec.json.decode(line)["item"]["id"]: msgspec.json.decode(line)["item"]
             for line in lines if kind_of(line) == b"item"}
    late = [v1_line(line, items) for line in lines[-40:] if kind_of(line) == b"answer"]
    newer = lines[0].replace(b'"schema_version":2', b'"schema_version":3')
    made = {
        "plain": lines,
        "schema1-late": lines + late,
        "bad-late": lines[:-5] + [b'{"kind":"answer","oops"\n'] + lines[-5:],
        "bad-early": lines[:5] + [b'{"kind":"answer","oops"\n'] + lines[5:],  # the worker is stopped
        "newer-late": lines[:-5] + [newer] + lines[-5:],
        "torn": lines + [lines[-1][:-40]],
        "blank-then-torn": [b"\n"] * 20000 + [lines[-1][:-40]],  # no good line before it: an error
    }
    for name, content in made.items():
        (folder / f"{name}.jsonl").write_bytes(b"".join(content))
    return {name: folder / f"{name}.jsonl" for name in made}


class Workers:
    """What the workers of a test's rescores did: each one's result ((records, changed), or None
    when it left its part to this process), and how many were stopped."""

    def __init__(self) -> None:
        self.results: list[tuple[int, int] | None] = []
        self.stopped = 0


@pytest.fixture
def workers(monkeypatch) -> Workers:
    seen = Workers()
    result, close = halves.SecondPart.result, halves.SecondPart.close

    def spied_result(self):
        done = result(self)
        seen.results.append(done)
        return done

    def spied_close(self):
        close(self)
        seen.stopped += 1

    monkeypatch.setattr(halves.SecondPart, "result", spied_result)
    monkeypatch.setattr(halves.SecondPart, "close", spied_close)
    return seen


def split_at(monkeypatch, source: Path, near: int) -> None:
    """Split however small the file is, the second part from the first line at or after `near`."""
    monkeypatch.setattr(halves, "SPLIT_MIN", 0)
    monkeypatch.setattr(halves, "HEAD", 2 * near - source.stat().st_size)


def rescored(cli, source: Path, out: Path) -> tuple[int, str, bytes | None]:
    """Exit code, what was printed, and the output's bytes (None when there is none)."""
    out.unlink(missing_ok=True)
    result = cli("rescore", source, "-o", out, ok=False)
    assert "Traceback" not in result.output
    return result.exit_code, result.output, out.read_bytes() if out.exists() else None


def left_beside(out: Path) -> list[str]:
    return [path.name for path in out.parent.iterdir() if path.name.startswith(".qmkar-")]


def answers_to_earlier_items(source: Path, start: int) -> int:
    """Answers after `start` whose item line is only before it."""
    before, after, offset, answered = set(), set(), 0, []
    for line in source.read_bytes().splitlines(keepends=True):
        if kind_of(line) == b"item":
            (before if offset < start else after).add(msgspec.json.decode(line)["item"]["id"])
        elif kind_of(line) == b"answer" and offset >= start:
            answered.append(msgspec.json.decode(line).get("item_id"))
        offset += len(line)
    return sum(1 for item_id in answered if item_id in before and item_id not in after)


@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU does not split")
def test_a_split_rescore_writes_what_one_pass_writes(cli, tmp_path, monkeypatch, workers):
    out = tmp_path / "out" / "rescored.jsonl"
    out.parent.mkdir()
    for name, source in variants(cli, tmp_path).items():
        whole = rescored(cli, source, out)
        assert whole[0] == (0 if name in ("plain", "schema1-late", "torn") else 1), whole[1]
        for fraction in FRACTIONS:
            near = int(source.stat().st_size * fraction)
            split_at(monkeypatch, source, near)
            workers.results.clear()
            stopped = workers.stopped
            assert rescored(cli, source, out) == whole, (name, fraction)
            assert not left_beside(out), (name, fraction)
            assert workers.stopped == stopped + 1, (name, fraction)
            if name == "bad-early":  # this process's error came before the worker's result
                assert workers.results == [], fraction
            elif name in ("plain", "torn"):
                assert workers.results[0] is not None, (name, fraction)  # the worker's part was used
            else:  # what it met is past every split point: this process rescored the part
                assert workers.results == [None], (name, fraction)
    # Split at a tenth, the worker had answers whose items were written before its part.
    plain = tmp_path / "plain.jsonl"
    start = line_start(plain, int(plain.stat().st_size * FRACTIONS[0]))
    assert start is not None and answers_to_earlier_items(plain, start) > 0


def test_a_worker_handed_only_a_torn_last_line_leaves_it_to_this_process(cli, tmp_path, monkeypatch,
                                                                          workers):
    # A torn last line is left out after a good line. A worker whose part is that line alone has
    # read no good line: it cannot know, and leaves the part here.
    source = variants(cli, tmp_path)["torn"]
    out = tmp_path / "rescored.jsonl"
    whole = rescored(cli, source, out)
    content = source.read_bytes()
    split_at(monkeypatch, source, content.rindex(b"\n") + 1)
    assert rescored(cli, source, out) == whole and workers.results == [None]
    assert not left_beside(out)


@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU does not split")
def test_a_worker_that_cannot_start_or_runs_another_qmkar_leaves_the_part_here(cli, tmp_path, monkeypatch,
                                                                              workers):
    source = runs(cli, tmp_path)
    out = tmp_path / "rescored.jsonl"
    whole = rescored(cli, source, out)
    split_at(monkeypatch, source, source.stat().st_size // 2)
    with monkeypatch.context() as patched:
        patched.setattr(sys, "executable", str(tmp_path / "no-python-here"))
        assert rescored(cli, source, out) == whole
    assert workers.stopped == 0  # no worker was started
    with monkeypatch.context() as patched:
        patched.setattr(offload, "HERE", "/elsewhere/qmkar")  # the worker says it runs another
        assert rescored(cli, source, out) == whole
    assert workers.results == [None] and workers.stopped == 1
    assert not left_beside(out)


@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU does not split")
def test_a_worker_killed_mid_way_leaves_the_part_here(cli, tmp_path, monkeypatch):
    source = tmp_path / "long.jsonl"
    source.write_bytes(runs(cli, tmp_path).read_bytes() * 40)  # a part the worker takes a while over
    out = tmp_path / "rescored.jsonl"
    whole = rescored(cli, source, out)
    split_at(monkeypatch, source, source.stat().st_size // 10)
    killed: list[int | None] = []
    result = halves.SecondPart.result

    def kill_once_writing(self):
        deadline = time.monotonic() + 60
        while (not self.part.exists() or self.part.stat().st_size == 0) and time.monotonic() < deadline:
            time.sleep(0.005)
        self.process.kill()
        self.process.wait()
        killed.append(self.process.returncode)
        return result(self)

    monkeypatch.setattr(halves.SecondPart, "result", kill_once_writing)
    assert rescored(cli, source, out) == whole
    assert killed == [-signal.SIGKILL]  # it was still at work when it died
    assert not left_beside(out)


def test_small_files_and_one_cpu_start_no_worker(cli, tmp_path, monkeypatch):
    source = runs(cli, tmp_path)
    out = tmp_path / "rescored.jsonl"
    whole = rescored(cli, source, out)

    def refuse(*args, **kwargs):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(offload, "start", refuse)
    assert source.stat().st_size < halves.SPLIT_MIN
    assert rescored(cli, source, out) == whole
    if not hasattr(os, "sched_setaffinity"):
        return
    allowed = os.sched_getaffinity(0)
    split_at(monkeypatch, source, source.stat().st_size // 2)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        assert rescored(cli, source, out) == whole
    finally:
        os.sched_setaffinity(0, allowed)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="looks for the worker in /proc")
@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU does not split")
@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_a_stopped_split_rescore_ends_with_its_worker_leaving_nothing(cli, tmp_path, stop):
    """Ctrl-C in a terminal signals the process group; SIGTERM (timeout, Slurm) the process alone."""
    base = runs(cli, tmp_path).read_bytes()
    source = tmp_path / "big.jsonl"
    with source.open("wb") as big:
        for _ in range(halves.SPLIT_MIN // len(base) + 2):
            big.write(base)
    out = tmp_path / "out" / "rescored.jsonl"
    out.parent.mkdir()
    mark = f"QMKAR_TEST_MARK={uuid.uuid4().hex}"
    command = [sys.executable, "-c", "from qmkar.cli import main; main()", "rescore", str(source),
               "-o", str(out)]
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1]}
    running = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    deadline = time.monotonic() + 60
    parts: list[Path] = []
    while time.monotonic() < deadline and not any(part.stat().st_size for part in parts):
        parts = list(out.parent.glob(".qmkar-*.part"))
        time.sleep(0.01)
    assert parts and workers_marked(mark), "the worker should be writing its part"
    if stop == "ctrl-c":
        os.killpg(running.pid, signal.SIGINT)
    else:
        running.send_signal(signal.SIGTERM)
    stdout, stderr = running.communicate(timeout=60)
    assert running.returncode == (130 if stop == "ctrl-c" else 143), stderr
    assert "Traceback" not in stderr and "rescored" not in stdout
    deadline = time.monotonic() + 5
    while workers_marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workers_marked(mark)
    assert list(out.parent.iterdir()) == []  # no output, no temporary file, no part

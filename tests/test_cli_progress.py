"""The bar of the bytes read by the commands that read transcripts (cli_progress.py): it
reaches the input's size however the reading is split between this process and a worker, and
changes nothing a program reads (stdout, and stderr off a terminal)."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
import uuid
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from qmkar import (
    cli_context,
    cli_progress,
    cli_sweep,
    cli_views,
    commandline,
    halves,
    offload,
    readers,
    rescore,
)
from tests.support.processes import workers_marked

STEP = 8 << 10  # the test files are tens of KB: a few advances each


@pytest.fixture(autouse=True)
def shown_for_any_size(monkeypatch) -> None:
    monkeypatch.setattr(cli_progress, "SHOWN_FROM", 0)
    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE"):  # either would make a pipe a terminal to rich
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def files(cli, recall_runs, tmp_path) -> list[Path]:
    """Two transcripts on the same questions: the oracle and replays A and B, and B again."""
    second = tmp_path / "two.jsonl"
    cli("eval", "-m", recall_runs["b"], "--dataset", recall_runs["dataset"], "-o", second)
    return [recall_runs["transcript"], second]


class Bar(cli_progress.ReadingBar):
    """The command's bar on a console that takes itself for a terminal, keeping each advance."""

    def __init__(self, description: str = "reading", step: int = STEP) -> None:
        self.screen, self.description = StringIO(), description
        super().__init__(description, Console(force_terminal=True, file=self.screen, width=100))
        self.step = step
        self.advances: list[int] = []

    def advance(self, done: int) -> None:
        self.advances.append(done)
        super().advance(done)

    def check(self, total: int) -> None:
        """Shown, then erased; told the total, and full at the end; told every STEP or so, never
        per line."""
        assert self.bar is not None and self.description in self.screen.getvalue()
        assert self.screen.getvalue().endswith("\x1b[2K")  # the bar's line erased: transient
        assert self.total == total and self.done == total
        assert self.progress.tasks[0].completed == total
        assert all(done > 0 for done in self.advances)
        assert 1 < len(self.advances) <= total // self.step + 3


class Counted(Bar, cli_progress.CountingBar):
    """The bar of a resume's naming of its questions, kept like Bar's."""

    def __init__(self, description: str) -> None:
        super().__init__(description, step=50)


def test_one_file_read_here_fills_the_bar(files, monkeypatch):
    monkeypatch.setattr(readers, "SPLIT_MIN", 1 << 60)
    with Bar() as bar:
        list(readers.read_each(files[:1], progress=bar))
    bar.check(files[0].stat().st_size)


@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU starts no reader")
def test_one_file_read_with_a_reader_fills_the_bar(files, monkeypatch, replies):
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    monkeypatch.setattr(readers, "SHARE", 0.5)
    size = files[0].stat().st_size
    start = readers._parts(files[:1])[0].start
    with Bar() as bar:
        list(readers.read_each(files[:1], progress=bar))
    assert len(replies) == 1  # the reader's part came back, counted whole
    assert bar.advances[-1] == size - start
    bar.check(size)


@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU starts no reader")
def test_several_files_read_with_a_reader_fill_the_bar(files, monkeypatch, replies):
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    parts = readers._parts(files)
    with Bar() as bar:
        list(readers.read_each(files, progress=bar))
    assert len(replies) == len(parts)  # each of the reader's parts came back, counted whole
    assert bar.advances[-len(parts):] == [part.size - part.start for part in parts]
    bar.check(sum(path.stat().st_size for path in files))


def test_a_part_no_reader_took_is_counted_as_it_is_read_here(files, monkeypatch, replies):
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    monkeypatch.setattr(offload, "HERE", "/elsewhere/qmkar")  # the reader runs another qmkar
    with Bar() as bar:
        list(readers.read_each(files[:1], progress=bar))
    assert replies == []
    bar.check(files[0].stat().st_size)


def test_a_resume_fills_a_bar_reading_the_transcript_then_one_reading_its_answers(recall_runs, cli,
                                                                                   monkeypatch):
    bars: list[Bar] = []

    def made(description: str) -> Bar:
        bars.append(Bar(description))
        return bars[-1]

    monkeypatch.setattr(commandline, "ReadingBar", made)
    transcript, dataset = recall_runs["transcript"], recall_runs["dataset"]
    before = transcript.stat().st_size
    cli("eval", "-m", "oracle", "-m", "sim:window", "--dataset", dataset, "-o", transcript)  # oracle answered
    first, last = bars
    first.check(before)  # what the run skips
    last.check(transcript.stat().st_size)  # what its summary reads back (sim:window's answers too)
    bars.clear()
    cli("eval", "-m", "oracle", "--dataset", dataset, "-o", transcript)  # all answered, nothing written
    (only,) = bars  # the summary is what the first reading counted
    only.check(transcript.stat().st_size)


def test_an_eval_of_a_dataset_fills_a_bar_checking_it_first(recall_runs, cli, tmp_path, monkeypatch):
    """Every item of a dataset is checked before the run starts: seconds for 100k questions,
    with a bar of their bytes (a limit stops the reading, and the bar, early)."""
    bars: list[Bar] = []

    def made(description: str) -> Bar:
        bars.append(Bar(description, step=1 << 10))
        return bars[-1]

    monkeypatch.setattr(cli_context, "ReadingBar", made)
    dataset = recall_runs["dataset"]
    cli("eval", "-m", "oracle", "--dataset", dataset, "-o", tmp_path / "run.jsonl")
    (checking,) = bars
    assert checking.description == "checking the dataset"
    checking.check(dataset.stat().st_size)
    cli("eval", "-m", "oracle", "--dataset", dataset, "-n", 2, "-o", tmp_path / "two.jsonl")
    assert bars[1].total == dataset.stat().st_size and 0 < bars[1].done < bars[1].total


def test_a_resume_of_a_generated_plan_fills_a_bar_naming_its_questions(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(cli_progress, "QUESTIONS_SHOWN_FROM", 0)
    bars: list[Counted] = []

    def made(description: str) -> Counted:
        bars.append(Counted(description))
        return bars[-1]

    monkeypatch.setattr(commandline, "CountingBar", made)
    out = tmp_path / "run.jsonl"
    cli("eval", "-m", "oracle", "-n", 300, "-o", out)
    (fresh,) = bars
    assert fresh.total == 0 and fresh.bar is None  # a fresh transcript: nothing named, no bar
    cli("eval", "-m", "oracle", "-m", "sim:window", "-n", 300, "-o", out)
    bars[1].check(300)  # named once for both models


@pytest.fixture
def bars(monkeypatch) -> list[Bar]:
    """The bars the commands of cli_views and cli_sweep make."""
    made: list[Bar] = []

    def make(description: str) -> Bar:
        made.append(Bar(description))
        return made[-1]

    monkeypatch.setattr(cli_views, "ReadingBar", make)
    monkeypatch.setattr(cli_sweep, "ReadingBar", make)
    return made


@pytest.mark.parametrize("command", [["show"], ["runs"], ["export", "--format", "eee", "-o", "{out}"]])
def test_show_runs_and_export_fill_the_bar_over_every_file(cli, files, tmp_path, bars, command):
    args = [part.format(out=tmp_path / "exported") for part in command]
    cli(*args[:1], *files, *args[1:])
    (bar,) = bars
    bar.check(sum(path.stat().st_size for path in files))


def test_a_search_fills_a_bar_reading_its_answers_at_the_end(cli, tmp_path, bars):
    out = tmp_path / "search.jsonl"
    cli("sweep", "-m", "oracle", "--context-tokens", "1k..2k", "-n", 5, "--find-effective-length", "-o", out)
    (bar,) = bars
    bar.check(out.stat().st_size)


@pytest.mark.parametrize("split", [False, True])
def test_rescore_fills_the_bar_with_or_without_a_worker(files, monkeypatch, tmp_path, split):
    if split and offload.cpus() < 2:
        pytest.skip("a machine with one CPU does not split")
    source, size = files[0], files[0].stat().st_size
    monkeypatch.setattr(halves, "SPLIT_MIN", 0 if split else 1 << 60)
    monkeypatch.setattr(halves, "HEAD", 0)  # the worker's part starts near the middle
    results: list[tuple[int, int] | None] = []
    original = halves.SecondPart.result

    def result(self):
        results.append(original(self))
        return results[-1]

    monkeypatch.setattr(halves.SecondPart, "result", result)
    with Bar() as bar:
        rescore.rescore(source, tmp_path / "rescored.jsonl", progress=bar)
    assert (results[0] is not None) if split else results == []  # split: the worker's part was used
    bar.check(size)


def test_what_is_printed_to_stdout_while_the_bar_is_shown_stays_on_stdout(capsys):
    with Bar() as bar:
        bar.start(10)
        print("a table")
        bar.advance(10)
    assert capsys.readouterr().out == "a table\n" and "a table" not in bar.screen.getvalue()


@pytest.mark.parametrize("command", [["report", "--format", "json"], ["compare", "--format", "json"],
                                     ["rescore", "-o", "{out}"], ["show"], ["runs", "--format", "json"]])
def test_the_bar_changes_nothing_a_program_reads(cli, files, monkeypatch, tmp_path, command):
    """On a terminal the bar is drawn and gone, off one nothing is printed: stdout (and
    rescore's file) the same either way, with a reader process or not."""
    out = tmp_path / "rescored.jsonl"
    args = [part.format(out=out) for part in command]
    args[1:1] = [str(files[0])] if command[0] == "rescore" else map(str, files)
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    monkeypatch.setattr(halves, "SPLIT_MIN", 0)

    def run() -> tuple[str, bytes | None]:
        out.unlink(missing_ok=True)
        result = cli(*args)
        assert result.stderr == ""  # the test's stderr is not a terminal, nor the console below
        return result.stdout, out.read_bytes() if out.exists() else None

    unshown = run()
    screen = StringIO()
    monkeypatch.setattr(cli_progress, "err", Console(force_terminal=True, file=screen, width=100))
    assert run() == unshown
    assert ("rescoring" if command[0] == "rescore" else "reading") in screen.getvalue()
    monkeypatch.setattr(readers, "SPLIT_MIN", 1 << 60)
    monkeypatch.setattr(halves, "SPLIT_MIN", 1 << 60)
    assert run() == unshown


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="looks for the worker in /proc")
@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU starts no reader")
def test_ctrl_c_while_the_bar_is_shown_exits_130_and_stops_the_reader(files, tmp_path):
    """report's stderr a terminal, the bar drawn, a reader reading the file's end: a terminal's
    Ctrl-C ends it with 130, no traceback, and no reader left."""
    base = files[0].read_bytes()
    big = tmp_path / "big.jsonl"
    with big.open("wb") as out:  # the same answers again and again: read for a few seconds
        for _ in range((120 << 20) // len(base)):
            out.write(base)
    mark = f"QMKAR_TEST_MARK={uuid.uuid4().hex}"
    code = ("from qmkar import cli_progress; cli_progress.SHOWN_FROM = 0; "
            "from qmkar.cli import main; main()")
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1], "TERM": "xterm"}
    primary, secondary = pty.openpty()
    running = subprocess.Popen([sys.executable, "-c", code, "report", "--format", "json", str(big)], env=env,
                               stdout=subprocess.PIPE, stderr=secondary, start_new_session=True)
    os.close(secondary)
    screen = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(primary, 1 << 16)
            except OSError:  # the command has gone
                return
            if not chunk:
                return
            screen.extend(chunk)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (b"reading" in screen and workers_marked(mark)):
        time.sleep(0.02)
    assert b"reading" in screen and workers_marked(mark), "the bar should be shown and a reader reading"
    os.killpg(running.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    stdout = running.communicate(timeout=60)[0]
    assert running.returncode == 130, bytes(screen)
    time.sleep(0.2)  # the last of the terminal's output
    assert b"Traceback" not in screen and stdout == b""
    # At once: the command killed its reader and waited for it before it exited (left alone, the
    # reader would go on reading its part for a second or more).
    assert not workers_marked(mark)
    os.close(primary)

"""The entry point (launch.py): a command that will read large files in two processes has its
worker started before its own imports, and uses that worker; small files, help, other commands
and a machine with one CPU start none; one the command does not use is stopped, and one whose
command dies before the command line runs ends by itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qmkar import halves, launch, offload, readers
from tests.support.processes import workers_marked

pytestmark = pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU starts no worker")


@pytest.fixture
def spawned(monkeypatch) -> list[str]:
    """The modules of the worker processes started, in order; every worker is stopped after."""
    started: list[str] = []
    original = offload._spawn

    def spawn(module: str):
        started.append(module)
        return original(module)

    monkeypatch.setattr(offload, "_spawn", spawn)
    monkeypatch.setattr(offload, "_failures", [])
    yield started
    offload.stop_all()


@pytest.fixture
def transcript(cli, recall_runs, tmp_path) -> Path:
    path = tmp_path / "oracle.jsonl"
    cli("eval", "-m", "oracle", "-m", recall_runs["a"], "--dataset", recall_runs["dataset"], "-o", path)
    return path


def sized(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no room on disk (only its size is looked at)."""
    path.write_bytes(b"")
    os.truncate(path, size)
    return path


def test_the_sizes_are_those_the_commands_split_from():
    assert launch.READERS_MIN == int(readers.SPLIT_MIN / readers.SHARE)
    assert launch.RESCORE_MIN == halves.SPLIT_MIN


def test_a_command_naming_large_files_has_its_worker_started_first(tmp_path, spawned):
    big = sized(tmp_path / "big.jsonl", launch.READERS_MIN)
    launch.early_worker(["report", "--format", "json", str(big)])
    assert spawned == ["qmkar.readers"]
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("one.jsonl", "two.jsonl"):  # large together, as a folder's report reads them
        sized(folder / name, launch.READERS_MIN // 2 + 1)
    offload.stop_all()
    launch.early_worker(["compare", str(folder)])
    source = sized(tmp_path / "one.jsonl", launch.RESCORE_MIN)
    launch.early_worker(["rescore", str(source), "-o", "out.jsonl"])
    assert spawned == ["qmkar.readers", "qmkar.readers", "qmkar.rescore"]
    assert sorted(offload._early) == ["qmkar.readers", "qmkar.rescore"]


@pytest.mark.parametrize("args", [
    ["report", "SMALL"], ["report", "--help", "BIG"], ["eval", "--dataset", "BIG"], ["report", "MISSING"],
    ["report", "-"], [],
])
def test_no_worker_for_small_files_help_other_commands_or_nothing_named(tmp_path, spawned, args):
    names = {"SMALL": sized(tmp_path / "small.jsonl", launch.READERS_MIN - 1),
             "BIG": sized(tmp_path / "big.jsonl", launch.READERS_MIN), "MISSING": tmp_path / "missing.jsonl"}
    launch.early_worker([str(names.get(arg, arg)) for arg in args])
    assert spawned == [] and offload._early == {}


def test_no_worker_started_first_with_one_cpu(tmp_path, spawned, monkeypatch):
    monkeypatch.setattr(offload, "cpus", lambda: 1)
    launch.early_worker(["report", str(sized(tmp_path / "big.jsonl", launch.READERS_MIN))])
    assert spawned == []


def test_the_reading_uses_the_worker_started_first(transcript, spawned, monkeypatch):
    monkeypatch.setattr(readers, "SPLIT_MIN", 1 << 60)
    alone = list(readers.read_each([transcript], contents=True))
    offload.prestart("qmkar.readers")
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    split = list(readers.read_each([transcript], contents=True))
    assert spawned == ["qmkar.readers"] and offload._early == {}  # no second worker was started
    assert split == alone and len(split[0]) == 48


def test_rescore_uses_the_worker_started_first(cli, transcript, spawned, monkeypatch, tmp_path):
    monkeypatch.setattr(halves, "SPLIT_MIN", 1 << 60)
    cli("rescore", transcript, "-o", tmp_path / "alone.jsonl")
    offload.prestart("qmkar.rescore")
    monkeypatch.setattr(halves, "SPLIT_MIN", 0)
    monkeypatch.setattr(halves, "HEAD", 0)  # the second half from the middle, however small the file
    cli("rescore", transcript, "-o", tmp_path / "split.jsonl")
    assert spawned == ["qmkar.rescore"] and offload._early == {}
    assert (tmp_path / "split.jsonl").read_bytes() == (tmp_path / "alone.jsonl").read_bytes()


def test_a_worker_started_first_that_died_is_replaced_and_said(transcript, spawned, monkeypatch):
    offload.prestart("qmkar.readers")
    early = offload._early["qmkar.readers"]
    early.kill()
    early.wait()
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    assert len(list(readers.read_each([transcript]))[0]) == 48
    assert spawned == ["qmkar.readers", "qmkar.readers"]
    offload.stop_all()
    assert offload.failures() == ["killed by signal 9"]


def test_a_worker_started_first_and_not_used_is_stopped_with_the_command(spawned):
    offload.prestart("qmkar.readers")
    early = offload._early["qmkar.readers"]
    offload.stop_all()
    assert early.poll() is not None and offload._early == {} and offload.failures() == []


def test_the_command_line_starts_the_worker_first_and_reads_with_it(transcript):
    """`python -m qmkar report` through launch.main, its sizes lowered so that this small
    transcript is split: one worker is started, before qmkar.cli is imported, and the report
    is the one read in one process."""
    alone = subprocess.run([sys.executable, "-m", "qmkar", "report", "--format", "json", str(transcript)],
                           capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    script = (
        "import atexit, sys\n"
        f"sys.argv = ['qmkar', 'report', '--format', 'json', {str(transcript)!r}]\n"
        "from qmkar import launch, offload\n"
        "launch.EARLY = {name: (module, 0) for name, (module, _) in launch.EARLY.items()}\n"
        "spawned, spawn = [], offload._spawn\n"
        "def counted(module):\n"
        "    spawned.append((module, 'qmkar.cli' in sys.modules))\n"
        "    return spawn(module)\n"
        "offload._spawn = counted\n"
        "atexit.register(lambda: print('SPAWNED', spawned, file=sys.stderr))\n"
        "import qmkar.readers\n"
        "qmkar.readers.SPLIT_MIN = 0\n"
        "launch.main()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "SPAWNED [('qmkar.readers', False)]" in done.stderr, done.stderr
    assert json.loads(done.stdout) == json.loads(alone.stdout)


def test_a_worker_started_first_ends_when_its_command_dies_before_the_command_line_runs():
    """A command killed during its imports (a SIGKILL, an import that fails) never reaches
    cli.main's stop_all: its early worker reads the end of its stdin and ends by itself."""
    mark = f"QMKAR_TEST_LAUNCH_{os.getpid()}"
    script = ("import os, time\nfrom qmkar import offload\noffload.prestart('qmkar.readers')\n"
              "time.sleep(2)\n"  # the worker has greeted and waits for its job, as during the imports
              "os._exit(0)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, mark: "1"})
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 30
    while workers_marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not workers_marked(mark)

"""Workers (offload.py): one that fails on its own is noted with the last line it wrote, and
the command says so when it ends; a worker stopped or killed when told is not a failure; a
command and a worker end with their objects left out of the exit's garbage collections."""

from __future__ import annotations

import io
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from qmkar import offload
from qmkar.tasks import make_spec


def started(job: bytes) -> subprocess.Popen[bytes]:
    process = offload.start("qmkar.ahead", job)
    assert process is not None and process.stdout is not None
    assert offload.greeted(process.stdout)
    return process


def stopped(process: subprocess.Popen[bytes], kill: bool = False) -> list[str]:
    """What stopping `process` added to the failures."""
    before = len(offload.failures())
    offload.stop(process, kill=kill)
    assert process.stdout is not None
    process.stdout.close()
    return offload.failures()[before:]


def test_a_worker_that_fails_on_its_own_is_noted_with_its_last_line():
    process = started(b"not a pickle")
    process.wait(timeout=60)
    (said,) = stopped(process)
    assert said.startswith("_pickle.UnpicklingError"), said


def test_a_worker_stopped_or_killed_when_told_is_not_a_failure():
    job = pickle.dumps((make_spec("qmkar", pairs=20), 0))
    assert stopped(started(job)) == []
    assert stopped(started(job), kill=True) == []


def test_the_command_ends_with_a_warning_naming_what_the_worker_said():
    script = ("from qmkar import offload; from qmkar.cli import main; "
              "p = offload.start('qmkar.ahead', b'x'); p.wait(); offload.stop(p); main()")
    done = subprocess.run([sys.executable, "-c", script, "--version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("qmkar ")
    assert "warning: a helper process of qmkar failed, and the command did its work without it" in done.stderr
    assert "UnpicklingError" in done.stderr and "Traceback" not in done.stderr


def test_a_signal_while_a_worker_starts_comes_after_it_has_started():
    """Raised inside Popen, a Ctrl-C would leave a child nothing stops: it is held until
    start has the worker, then raised as it would have been."""
    job = pickle.dumps((make_spec("qmkar", pairs=20), 0))
    original = subprocess.Popen

    def interrupted(*args, **kwargs):
        process = original(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # as a terminal's Ctrl-C would, mid-start
        return process

    subprocess.Popen = interrupted  # type: ignore[misc]
    try:
        with pytest.raises(KeyboardInterrupt):
            offload.start("qmkar.ahead", job)
    finally:
        subprocess.Popen = original  # type: ignore[misc]
    (process,) = offload._running.values()  # started, and known: stop_all can stop it
    offload.stop_all()
    assert process.poll() is not None and offload._running == {}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_command_stops_a_worker_its_user_never_stopped():
    """cli.main stops every worker still running when the command ends."""
    script = ("import os, pickle; from qmkar import offload; from qmkar.cli import main; "
              "from qmkar.tasks import make_spec; "
              "p = offload.start('qmkar.ahead', pickle.dumps((make_spec('qmkar', pairs=20), 0))); "
              "print(p.pid, flush=True); main()")
    done = subprocess.run([sys.executable, "-c", script, "--version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    pid = int(done.stdout.split()[0])
    proc = Path(f"/proc/{pid}")
    assert not proc.exists() or b"qmkar.worker" not in (proc / "cmdline").read_bytes()


# Run at the interpreter's exit, after cli.main or a worker's serve has returned: how many
# objects are left out of the exit's garbage collections (gc.freeze).
FROZEN_AT_EXIT = ("import atexit, gc, os; "
                  "atexit.register(lambda: os.write(2, b'frozen %d\\n' % gc.get_freeze_count())); ")


@pytest.mark.parametrize("arguments", [["--version"], ["report", "/nonexistent.jsonl"]])
def test_a_command_ends_with_its_objects_left_out_of_the_exits_collections(arguments):
    script = FROZEN_AT_EXIT + "from qmkar.cli import main; main()"
    done = subprocess.run([sys.executable, "-c", script, *arguments], capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in done.stderr
    assert int(done.stderr.split("frozen ")[-1]) > 10_000  # qmkar's imports alone make more


def test_a_worker_ends_with_its_objects_left_out_of_the_exits_collections():
    script = FROZEN_AT_EXIT + "from qmkar.offload import serve; serve('qmkar.ahead')"
    done = subprocess.run([sys.executable, "-c", script], input=b"", capture_output=True, timeout=120)
    assert done.returncode == 0 and b"Traceback" not in done.stderr
    assert int(done.stderr.split(b"frozen ")[-1]) > 10_000


def frames(*bodies: bytes) -> bytes:
    stream = io.BytesIO()
    for body in bodies:
        offload.write_frame(stream, body)
    return stream.getvalue()


def test_a_damaged_frame_reads_as_the_end_of_the_stream():
    whole = frames(b"first", b"second" * 1000, b"third")
    stream = io.BytesIO(whole)
    assert [offload.read_frame(stream) for _ in range(4)] == [b"first", b"second" * 1000, b"third", None]
    damaged = bytearray(whole)
    damaged[len(frames(b"first")) + offload.FRAME.size + 500] ^= 0x20  # a byte of the second body
    stream = io.BytesIO(bytes(damaged))
    assert offload.read_frame(stream) == b"first"
    assert offload.read_frame(stream) is None
    cut = io.BytesIO(whole[:len(frames(b"first")) + 100])
    assert offload.read_frame(cut) == b"first" and offload.read_frame(cut) is None


def test_a_frame_written_in_parts_reads_as_one_body_and_its_checksum_covers_every_part():
    parts = (b"head", b"", b"body" * 1000, b"tail")
    stream = io.BytesIO()
    offload.write_frame(stream, *parts)
    whole = stream.getvalue()
    assert whole == frames(b"".join(parts))  # the same bytes as the parts joined, length and checksum too
    for at in (offload.FRAME.size + 1, offload.FRAME.size + 2000, len(whole) - offload.CHECK.size - 1):
        damaged = bytearray(whole)
        damaged[at] ^= 0x01
        assert offload.read_frame(io.BytesIO(bytes(damaged))) is None


def test_an_impossible_length_is_not_read():
    head = offload.FRAME.pack(offload.MAX_FRAME + 1)
    assert offload.read_frame(io.BytesIO(head + b"x" * 100)) is None

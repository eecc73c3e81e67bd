"""Part of a command's work done in a worker process on the machine's other CPU.

A worker is `python -m qmkar.worker MODULE`: a plain child process in a session of its
own, not a multiprocessing one. It imports nothing of the caller's script (a script without
a `__main__` guard is not run again), and a terminal's Ctrl-C reaches the caller alone,
which stops it (`stop`). It runs the qmkar this process imported and says so first
(`greeted`); a worker that reports another copy is not used. It reads its job in frames
on stdin and answers in frames on stdout; MODULE's `serve(stdin, stdout)` does the job.
Its users (ahead.py: questions made ahead; readers.py: part of the transcripts reports read;
rescore.py: a transcript's second half) do the work themselves whenever the worker cannot
start, fails or dies.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import IO

HERE = str(Path(__file__).resolve().parent)  # which qmkar this is: the worker's must be the same
FRAME = struct.Struct("<Q")  # a frame's length, before its body


def cpus() -> int:
    """The CPUs this process may run on: with one, a worker would only take turns with it."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def write_frame(stream: IO[bytes], body: bytes) -> None:
    stream.write(FRAME.pack(len(body)) + body)
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's body, or None at the end of the stream."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def start(module: str, job: bytes) -> subprocess.Popen[bytes] | None:
    """`python -m qmkar.worker MODULE`, finding this very qmkar first on its path, sent `job`
    as its first frame; None when it cannot be started."""
    environment = dict(os.environ)
    package_root = str(Path(HERE).parent)
    environment["PYTHONPATH"] = os.pathsep.join(
        [package_root, *([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else [])])
    try:
        process = subprocess.Popen([sys.executable, "-m", "qmkar.worker", module], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=environment,
                                   start_new_session=True)
    except (OSError, ValueError):
        return None
    try:
        assert process.stdin is not None
        write_frame(process.stdin, job)
    except (OSError, ValueError):  # it died at once: it is stopped, and not used
        stop(process)
        return None
    return process


def greeted(stream: IO[bytes]) -> bool:
    """Whether the worker's first frame says it runs this qmkar (False: it did not start, or
    runs another copy)."""
    hello = read_frame(stream)
    return hello is not None and hello.decode(errors="replace") == HERE


def stop(process: subprocess.Popen[bytes]) -> None:
    """End a worker: closing its stdin ends it; it is killed if it has not ended within a
    second. Its stdout is left to the caller (a thread may be reading it)."""
    try:
        if process.stdin is not None:
            process.stdin.close()
    except OSError:
        pass
    try:
        process.wait(timeout=1)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def serve(module: str) -> None:
    """The worker's side: say which qmkar it runs, then let MODULE's `serve` do the job."""
    from importlib import import_module

    write_frame(sys.stdout.buffer, HERE.encode())
    import_module(module).serve(sys.stdin.buffer, sys.stdout.buffer)

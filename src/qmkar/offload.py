"""Part of a command's work done in a worker process on the machine's other CPU.

A worker is `python -m qmkar.worker MODULE`: a plain child process in a session of its
own, not a multiprocessing one. It imports nothing of the caller's script (a script without
a `__main__` guard is not run again), and a terminal's Ctrl-C reaches the caller alone,
which stops it (`stop`). It runs the qmkar this process imported and says so first
(`greeted`); a worker that reports another copy is not used. It reads its job in frames
on stdin and answers in frames on stdout; MODULE's `serve(stdin, stdout)` does the job.
Its users (ahead.py: questions made ahead; readers.py: part of the transcripts reports
read; rescore.py: a transcript's second half) do the work themselves whenever the worker
cannot start, fails or dies. A frame that arrives damaged (its checksum does not match, as
happened with py-spy --subprocesses sampling both processes) reads as the end of the
stream, so that too leaves the rest to them. A worker that failed on its own is not silent,
though: its stderr is kept in a temporary file, and `stop` notes the last line it wrote
(`failures`), which cli.main prints as a warning when the command ends.

A worker can be started before its job is known (`prestart`, which launch.py calls before the
command's own imports): it imports its module meanwhile, and `start` sends the job to it
instead of starting another. A worker starts in about a third of a second, most of it its
imports, and the command's own imports took as long before it could start one.

No worker outlives its command. Its users stop it in `finally` blocks; a Ctrl-C or SIGTERM
that comes while a worker starts waits until `start` has it (`_signals_held`), and one that
comes after, before its user's `finally` is entered, leaves it to `stop_all`, which cli.main
calls last; it also stops a worker started early that the command did not use. One whose
command ended before cli.main ran reads the end of its stdin and ends. Both a command and a
worker end with `end_uncollected`, which spares their exit the interpreter's last garbage
collections.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

HERE = str(Path(__file__).resolve().parent)  # which qmkar this is: the worker's must be the same
FRAME = struct.Struct("<Q")  # a frame's length, before its body
CHECK = struct.Struct("<I")  # the body's CRC-32, after it
MAX_FRAME = 1 << 34  # a longer length is a damaged stream, not a frame (a reply is at most a few GB)
_stderr: dict[int, IO[bytes]] = {}  # a running worker's pid -> the file its stderr goes to
_running: dict[int, subprocess.Popen[bytes]] = {}  # workers started and not stopped yet
_failures: list[str] = []  # what workers that failed on their own said last, in order
_early: dict[str, subprocess.Popen[bytes]] = {}  # module -> a worker prestarted for it, not given a job yet


def cpus() -> int:
    """The CPUs this process may run on: with one, a worker would only take turns with it."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def write_frame(stream: IO[bytes], *parts: bytes) -> None:
    """One frame whose body is the parts, one after the other. They are written as they are:
    joined first, a chunk of questions (most of a megabyte) would be copied for nothing."""
    stream.write(FRAME.pack(sum(map(len, parts))))
    check = 0
    for part in parts:
        stream.write(part)
        check = zlib.crc32(part, check)
    stream.write(CHECK.pack(check))
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's body; None at the end of the stream, and for a frame that is cut off
    or damaged (its length impossible or its checksum wrong): what follows cannot be trusted."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    if size > MAX_FRAME:
        return None
    try:
        body = stream.read(size)
    except MemoryError:  # a damaged length this process cannot hold
        return None
    check = stream.read(CHECK.size)
    if len(body) != size or len(check) != CHECK.size or CHECK.unpack(check)[0] != zlib.crc32(body):
        return None
    return body


def prestart(module: str) -> None:
    """Start a worker for MODULE now, for a `start` to come: it imports MODULE while the
    command imports its own. Nothing happens when it cannot be started (`start` tries again)."""
    if module not in _early:
        process = _spawn(module)
        if process is not None:
            _early[module] = process


def start(module: str, job: bytes) -> subprocess.Popen[bytes] | None:
    """A worker for MODULE, sent `job` as its first frame: the one `prestart` started when it
    is still running, else `python -m qmkar.worker MODULE` started now; None when it cannot be
    started."""
    process = _early.pop(module, None)
    if process is None or process.poll() is not None:  # a prestarted one that died is stop_all's
        process = _spawn(module)
    if process is None:
        return None
    try:
        assert process.stdin is not None
        write_frame(process.stdin, job)
    except (OSError, ValueError):  # it died at once: it is stopped, and not used
        stop(process)
        return None
    return process


def _spawn(module: str) -> subprocess.Popen[bytes] | None:
    """`python -m qmkar.worker MODULE`, finding this very qmkar first on its path."""
    environment = dict(os.environ)
    package_root = str(Path(HERE).parent)
    environment["PYTHONPATH"] = os.pathsep.join(
        [package_root, *([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else [])])
    try:
        errors = tempfile.TemporaryFile()
    except OSError:
        return None
    with _signals_held():
        try:
            process = subprocess.Popen([sys.executable, "-m", "qmkar.worker", module], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=errors, env=environment,
                                       start_new_session=True)
        except (OSError, ValueError):
            errors.close()
            return None
        _stderr[process.pid], _running[process.pid] = errors, process
    return process


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait while a worker is started: raised inside Popen, they would leave
    a child that nothing stops. Only the main thread can hold them; elsewhere, and in a run's
    event loop (whose own handlers never raise: runner.Stopping), this does nothing."""
    if threading.current_thread() is not threading.main_thread() or _in_event_loop():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, lambda number, _: caught.append(number)) for number in held}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for held_back in caught:  # now as if they came now, to whatever handled them before
            signal.raise_signal(held_back)


def _in_event_loop() -> bool:
    asyncio = sys.modules.get("asyncio")  # not imported: no loop runs (and report need not import it)
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def stop_all() -> None:
    """Kill every worker still running (cli.main calls it last: a signal can come between a
    worker's start and its user's `finally`), those prestarted and never used among them."""
    _early.clear()
    for process in list(_running.values()):
        stop(process, kill=True)


def greeted(stream: IO[bytes]) -> bool:
    """Whether the worker's first frame says it runs this qmkar (False: it did not start, or
    runs another copy)."""
    hello = read_frame(stream)
    return hello is not None and hello.decode(errors="replace") == HERE


def stop(process: subprocess.Popen[bytes], kill: bool = False) -> None:
    """End a worker: closing its stdin ends it (`kill`: killing it, when what it has not sent
    is no longer wanted); it is killed if it has not ended within a second. A worker that had
    ended by then on its own with an error is noted in `failures`. Its stdout is left to the
    caller (a thread may be reading it)."""
    code = process.poll()  # a worker ends when told to: before that, only by failing
    if kill and code is None:
        process.kill()
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
    _running.pop(process.pid, None)
    errors = _stderr.pop(process.pid, None)
    if errors is None:
        return
    with errors:
        if code:
            _failures.append(_last_words(errors, code))


def _last_words(errors: IO[bytes], code: int) -> str:
    """The last line a failed worker wrote to stderr (a traceback's ends with the error), or
    how it ended."""
    errors.seek(0, 2)
    errors.seek(max(0, errors.tell() - 4096))
    lines = [line.strip() for line in errors.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else (f"killed by signal {-code}" if code < 0 else f"exit code {code}")


def failures() -> list[str]:
    """What each worker that failed on its own said last (its work was done without it)."""
    return list(_failures)


def serve(module: str) -> None:
    """The worker's side: say which qmkar it runs, then let MODULE's `serve` do the job."""
    from importlib import import_module

    write_frame(sys.stdout.buffer, HERE.encode())
    import_module(module).serve(sys.stdin.buffer, sys.stdout.buffer)
    end_uncollected()


def end_uncollected() -> None:
    """What a qmkar process does last, once its work is done and its files closed (cli.main,
    and a worker's `serve`): leave its objects out of the full garbage collections the
    interpreter runs on the way out, which walk every object the process imported or made.
    They took most of the 0.1 to 0.2 s each command and worker spent exiting
    (docs/performance.md), and a command waits for a worker's exit when it stops one. Objects
    are still freed as their last reference goes; only cycles left at the exit are not
    collected (Python does not promise that they are)."""
    gc.freeze()

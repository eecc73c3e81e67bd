"""A large transcript rescored in two parts at once: the second by a worker process.

rescore.py reads the first part itself while a worker (offload.py; its side is
rescore.serve) rescores the second, from a line boundary to the end, into a temporary file
beside the output; this process then appends that file to its output. The worker hands
back only what it rescored exactly as the one pass would have: anything else (a line that
needs the whole pass's state, an error, a worker that cannot start, fails or dies) leaves
the second part to this process, which goes on reading it as if nothing had been split.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import IO

from qmkar import offload
from qmkar.transcript import line_start

# Below this size a transcript is rescored in one process. A worker costs about 0.35 s of
# start-up (Python, then qmkar's imports; bytecode compiled) before it reads a line, and
# rescore reads 25 to 30 MB a second on an idle machine. Measured there (whole processes,
# split against one): 10 MB 1.0 s against 0.9 s, 20 MB 1.1 s against 1.2 s, 39 MB 1.4 s
# against 1.7 s, 59 MB 1.7 s against 2.3 s. From 32 MB the gain is clear, with room for a
# busy machine, where the worker has no CPU to itself and its start-up is lost.
SPLIT_MIN = 32 << 20
# Bytes this process reads beyond the worker, for the worker's start-up: the worker's part is
# (size - HEAD) / 2. On an idle machine the worker then ends just before this process (100k
# records: 8 MB waited 0 to 0.07 s for it, no head 0.09 to 0.27 s). Since the `qmkar` command
# starts the worker before its own imports (launch.py), no head was no faster (5 rounds,
# together with a larger share for readers.py's reader).
HEAD = 8 << 20
COPY_BUFFER = 1 << 20


class SecondPart:
    """A worker rescoring the transcript (of `size` bytes when split) from byte `start` to the
    end into `part`."""

    def __init__(self, start: int, part: Path, process: subprocess.Popen[bytes], size: int) -> None:
        self.start, self.part, self.process, self.size = start, part, process, size

    def result(self) -> tuple[int, int] | None:
        """The worker's counts (records, changed) once it has rescored the whole second part;
        None when this process must rescore it instead. Waits for the worker."""
        stream = self.process.stdout
        assert stream is not None
        try:
            if not offload.greeted(stream):
                return None
            body = offload.read_frame(stream)
        except OSError:
            return None
        return None if body is None else pickle.loads(body)

    def append_to(self, out: IO[bytes]) -> None:
        with self.part.open("rb") as part:
            shutil.copyfileobj(part, out, COPY_BUFFER)

    def close(self) -> None:
        """Stop the worker and remove its file, whatever happened."""
        offload.stop(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.part.unlink(missing_ok=True)


def second_part(source: Path, folder: Path) -> SecondPart | None:
    """A worker started on the second part of `source` (its file in `folder`), or None: a
    small transcript, a machine with one CPU, no line to split at, no worker."""
    try:
        size = source.stat().st_size
    except OSError:
        return None  # the pass reading it says why
    if size < SPLIT_MIN or offload.cpus() < 2:
        return None
    start = line_start(source, (size + HEAD) // 2)
    if start is None:
        return None
    try:
        descriptor, name = tempfile.mkstemp(dir=folder, prefix=".qmkar-", suffix=".part")
        os.close(descriptor)
    except OSError:
        return None
    part = Path(name)
    process = offload.start("qmkar.rescore", pickle.dumps((source.absolute(), start, part.absolute())))
    if process is None:
        part.unlink(missing_ok=True)
        return None
    return SecondPart(start, part, process, size)

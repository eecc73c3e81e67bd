"""Processes of commands under test: the workers (python -m qmkar.worker) a command started, and
qmkar run with a file size limit (a full disk, for real)."""

from __future__ import annotations

import sys
from pathlib import Path


def workers_marked(mark: str) -> list[int]:
    """Pids of live worker processes whose environment holds `mark` (a command's workers
    inherit its environment)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes() and \
                    b"qmkar.worker" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def qmkar_limited_to(max_bytes: int) -> list[str]:
    """The start of a command line running `python -m qmkar` whose files cannot grow past
    `max_bytes` (RLIMIT_FSIZE, POSIX): a write past it fails as on a full disk (SIGXFSZ is
    ignored, so the write returns an error instead of killing the process). Pipes are not
    limited, so its output still reads whole."""
    code = ("import resource, runpy, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({max_bytes}, {max_bytes}))\n"
            "sys.argv = ['qmkar', *sys.argv[1:]]\n"
            "runpy.run_module('qmkar', run_name='__main__')\n")
    return [sys.executable, "-c", code]

"""Finding the worker processes (python -m qmkar.worker) a command under test started."""

from __future__ import annotations

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

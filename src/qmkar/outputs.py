"""Every file qmkar writes whole (datasets, rescored transcripts, reports, figures, exports).

A file is written to a temporary file in its own folder and renamed over its name only
once it is complete, so a failure or Ctrl-C leaves the old file as it was and no temporary
file behind. OS errors (a read-only or missing folder, a folder in the way, a name too
long, a full disk) become an OutputError naming the path and the reason. Transcripts are
appended to instead (writer.TranscriptWriter).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from qmkar.errors import OutputError

# The start of a line qmkar writes into transcripts (schema 2), or of a schema-1 record.
QMKAR_LINE = re.compile(rb'\s*\{\s*"(kind"\s*:\s*"(run|item|template|answer)"|schema_version"|model")')


def reason(exc: OSError) -> str:
    """An OS error in words, without the path (the caller names it)."""
    return exc.strerror or str(exc)


def fail(path: Path, exc: OSError, doing: str = "write") -> OutputError:
    return OutputError(f"cannot {doing} {path}: {reason(exc)}")


def append_whole(descriptor: int, data: bytes, size: int | None = None) -> None:
    """Append `data` (whole lines) to a file opened with O_APPEND in one `write`. A failed or
    short write (a full disk) is cut back off to `size` (the file's size before, by default),
    so the file keeps only whole lines, and raises the OSError."""
    if size is None:
        size = os.fstat(descriptor).st_size
    try:
        if os.write(descriptor, data) != len(data):
            raise OSError(28, os.strerror(28))
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(descriptor, size)
        raise


def probe(path: Path) -> str:
    """What is at `path`: "missing", "folder", "file" (or anything else that is not a folder);
    an OS error other than a missing path (a name too long, no access) is an OutputError."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        raise fail(path, exc) from None
    return "folder" if stat.S_ISDIR(mode) else "file"


def make_folder(folder: Path) -> None:
    """Create `folder` and its parents, or say in one line why not."""
    if probe(folder) == "file":
        raise OutputError(f"cannot write into {folder}: it is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(folder, exc, "create the folder") from None


def check_file_target(path: Path) -> None:
    """Refuse a target that is a folder; create its missing parent folders."""
    if probe(path) == "folder":
        raise OutputError(f"cannot write {path}: it is a folder; give a file name")
    make_folder(path.parent)


def first_line(path: Path) -> bytes | None:
    """The first non-blank line of a file, None when it has none (OSError when unreadable)."""
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                return line
    return None


def is_transcript(path: Path) -> bool:
    """Whether `path` is a file whose first non-blank line looks like a qmkar transcript line
    (what qmkar will not overwrite). Appending asks more: writer.first_line_is_ours."""
    try:
        line = first_line(path)
    except OSError:
        return False
    return line is not None and QMKAR_LINE.match(line) is not None


def _mode_for(path: Path) -> int:
    """The permissions the new file gets: the old file's, else what the umask allows."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[IO[bytes]]:
    """A binary handle whose bytes become `path` when the block ends without error; on an
    error the temporary file is removed and `path` is left as it was."""
    with temporary_name(path) as temporary:
        try:
            handle = temporary.open("wb")
        except OSError as exc:
            raise fail(path, exc) from None
        with handle:
            yield handle


def write_text(path: Path, text: str) -> int:
    """Write `text` to `path` whole or not at all; return its size in bytes."""
    data = text.encode()
    with replacing(path) as handle:
        handle.write(data)
    return len(data)


def write_bytes(path: Path, data: bytes) -> int:
    with replacing(path) as handle:
        handle.write(data)
    return len(data)


@contextlib.contextmanager
def temporary_name(path: Path, suffix: str = "") -> Iterator[Path]:
    """For a library that writes a file by name: a temporary name beside `path`, renamed to
    `path` when the block ends without error and removed otherwise."""
    check_file_target(path)
    try:
        descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=".qmkar-", suffix=suffix or ".tmp")
        os.close(descriptor)
    except OSError as exc:
        raise fail(path, exc) from None
    temporary = Path(name)
    try:
        yield temporary
        os.chmod(temporary, _mode_for(path))
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise fail(path, exc) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def refuse_existing(path: Path, force: bool) -> None:
    """Refuse to replace an existing file unless `force`; never replace a folder."""
    found = probe(path)
    if found == "folder":
        raise OutputError(f"cannot write {path}: it is a folder; give a file name")
    if found == "file" and not force:
        what = "a qmkar transcript" if is_transcript(path) else "a file"
        raise OutputError(f"{path} exists ({what}); choose another -o, or pass --force to replace it")

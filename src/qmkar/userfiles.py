"""Reading the files a user hands qmkar (datasets, replay answers, endpoints, prices,
templates) as text, with one clear line for every way that can fail.

A missing file, a folder, a file that cannot be opened, bytes that are not UTF-8 text
(a binary file, a file saved as UTF-16) all raise the caller's QmkarError subclass naming
the file, and the line where the bad bytes are. A UTF-8 byte-order mark is accepted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from qmkar.errors import QmkarError
from qmkar.readprogress import ReadProgress, Told

BOM = b"\xef\xbb\xbf"


def _opening_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a file, or None when it can be tried."""
    if not path.exists():
        return "does not exist"
    if path.is_dir():
        return "is a folder, not a file"
    if not path.is_file():
        return "is not a regular file"
    return None


def check_readable(path: Path, what: str, error: type[QmkarError]) -> None:
    """Raise `error` unless `path` is an existing regular file."""
    problem = _opening_problem(path)
    if problem is not None:
        raise error(f"{what} {path} {problem}")


def _decode(data: bytes, path: Path, what: str, error: type[QmkarError], line: int | None) -> str:
    where = f" line {line}" if line is not None else ""
    if b"\x00" in data:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")) or data[1:2] == b"\x00" or data[:1] == b"\x00":
            raise error(f"{what} {path}{where} is UTF-16 (or another wide encoding), not UTF-8 text; "
                        "save it as UTF-8")
        raise error(f"{what} {path}{where} holds NUL bytes: it is a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start:exc.start + 1].hex()
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        if line is None:
            line_number = data.count(b"\n", 0, exc.start) + 1
            where = f" line {line_number}"
        raise error(f"{what} {path}{where} is not UTF-8 text (byte 0x{bad} at column "
                    f"{column}); is it a binary file? "
                    "Save it as UTF-8") from None


def read_text(path: Path, what: str, error: type[QmkarError]) -> str:
    """The whole text of a small file (a TOML table, a template, a blog JSON file)."""
    check_readable(path, what, error)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    return _decode(data.removeprefix(BOM), path, what, error, None)


def read_lines(path: Path, what: str, error: type[QmkarError],
               progress: ReadProgress | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a file read a line at a time (a JSONL dataset,
    a replay file), so a large file is never held whole. `progress` is told the bytes read
    (readprogress.Told; whoever starts the reading tells it the total)."""
    check_readable(path, what, error)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    told = Told(progress)
    mark, offset = told.mark, 0
    with handle:
        for number, raw in enumerate(handle, start=1):
            offset += len(raw)
            if offset >= mark:
                mark = told.tell(offset)
            data = raw.removeprefix(BOM) if number == 1 else raw
            yield number, _decode(data, path, what, error, number)
    told.tell(offset)


def head(path: Path, what: str, error: type[QmkarError], size: int = 1024) -> str:
    """The first characters of a file (at most `size` bytes, cut to whole characters)."""
    check_readable(path, what, error)
    try:
        with path.open("rb") as handle:
            data = handle.read(size)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    return data.removeprefix(BOM).decode("utf-8", errors="ignore")

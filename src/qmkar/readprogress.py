"""What a reading tells whoever shows how much of its input it has read (the CLI's bar).

The readers (slim.py, readers.py, rescore.py, transcript.Reading, and userfiles.read_lines for
a dataset's check) take a `ReadProgress` and tell it the bytes they read through a `Told`;
whoever starts a reading tells it the total first (`begin`). cli_progress.ReadingBar is the
one that shows it. A resume's naming of its plan (ahead.outlines) tells a ReadProgress the
same way in questions (cli_progress.CountingBar).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol


class ReadProgress(Protocol):
    """Whoever shows how much of a command's input has been read (the CLI's reading bar).
    Readers tell it every `step` bytes (a few MB: never per line, their line loops are the
    commands' hot path) and at the end of each part they read."""

    step: int

    def start(self, total: int) -> None:
        """The bytes to read in all, told once before reading."""

    def advance(self, done: int) -> None:
        """`done` more bytes read."""


class Told:
    """How much of a reading a ReadProgress has been told of. A line loop compares its offset
    with `mark` (one comparison per line) and calls `tell` when it passes it, so `progress`
    hears every `step` bytes, never per line; `tell` again at the end tells the rest."""

    __slots__ = ("mark", "progress", "told")

    def __init__(self, progress: ReadProgress | None, at: int = 0) -> None:
        self.progress, self.told = progress, at
        self.mark = at + progress.step if progress is not None else sys.maxsize

    def tell(self, at: int) -> int:
        """Tell `progress` the bytes read up to offset `at`; returns the next mark."""
        if self.progress is not None and at > self.told:
            self.progress.advance(at - self.told)
            self.told, self.mark = at, at + self.progress.step
        return self.mark


def begin(progress: ReadProgress | None, paths: Iterable[Path]) -> None:
    """Tell `progress`, when there is one, the bytes of `paths` in all, before reading them.
    A file that cannot be looked at counts 0 (its reading says what is wrong)."""
    if progress is not None:
        progress.start(sum(map(file_size, paths)))


def file_size(path: Path) -> int:
    """A file's size in bytes; 0 when it cannot be looked at."""
    try:
        return path.stat().st_size
    except OSError:
        return 0

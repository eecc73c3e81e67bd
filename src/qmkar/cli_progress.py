"""The progress of reading transcripts (report, compare, plot, the HTML report, rescore, show,
runs, export, a search's last reading, and eval's reading of the transcript it resumes and of
the answers its summary counts): a bar of the bytes read, on stderr, on a terminal only, for
inputs large enough to wait for, and gone when the reading ends, so what the command prints
after it is unchanged. A resume of a generated plan names its questions before it asks
(runner.Run.name_questions): CountingBar shows that the same way, in questions.

The readers tell it what they read (readprogress.ReadProgress); this module only shows it.
Without a terminal nothing is shown: these commands take seconds, not the hours of a run
(eval prints a progress line every 10 s to a log), and a pipe or a log gets no lines from them.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from qmkar.cli_errors import err

# No bar below this many bytes in all. report reads a transcript of 100k answers (200 MB) in
# about 3 s, rescore in about 5 (benchmarks/downstream.py): a smaller input is done in a second
# or two, where a bar would only flash. Decided once from the input's size (not after a delay),
# so a bar is there from the start or not at all.
SHOWN_FROM = 50 << 20
# Bytes read between two advances: ten or so a second at those speeds, as often as rich draws
# the bar, and never per line (the readers' line loops are the commands' hot path).
STEP = 4 << 20
# No question bar below this many questions. Naming a plan of 500 pairs takes about 10 s at
# 50,000 questions on two CPUs (docs/performance.md): 2 s or less below this.
QUESTIONS_SHOWN_FROM = 10_000
# Questions named between two advances.
QUESTIONS_STEP = 1_000


class ReadingBar:
    """readprogress.ReadProgress as a rich bar: `start` shows it, when the console is a terminal
    and the total is at least SHOWN_FROM; leaving the `with` block removes it. `done` counts
    the bytes told, shown or not."""

    step = STEP

    def __init__(self, description: str, console: Console | None = None) -> None:
        self.console = console or err
        # Never redirect stdout: while shown, rich would send what is printed there to stderr.
        self.progress = Progress(TextColumn(description, markup=False), BarColumn(), self.amount(),
                                 TimeRemainingColumn(), console=self.console, transient=True,
                                 redirect_stdout=False)
        self.bar: TaskID | None = None
        self.total = self.done = 0

    def __enter__(self) -> ReadingBar:
        return self

    def __exit__(self, *exc: object) -> None:
        # Also on an error or Ctrl-C: the error line comes after the bar is gone. Only a bar
        # shown is stopped: rich's stop() prints an empty line on a console that is no terminal.
        if self.bar is not None:
            self.progress.stop()

    def start(self, total: int) -> None:
        self.total = total
        if self.bar is None and self.console.is_terminal and total >= self.shown_from():
            self.bar = self.progress.add_task("", total=total)
            self.progress.start()

    def advance(self, done: int) -> None:
        self.done += done
        if self.bar is not None:
            self.progress.advance(self.bar, done)

    def amount(self) -> ProgressColumn:
        """The column saying how much is done: bytes."""
        return DownloadColumn()

    def shown_from(self) -> int:
        return SHOWN_FROM  # read when shown, so a test can change it


class CountingBar(ReadingBar):
    """ReadingBar in questions: from QUESTIONS_SHOWN_FROM on, told every QUESTIONS_STEP."""

    step = QUESTIONS_STEP

    def amount(self) -> ProgressColumn:
        return MofNCompleteColumn()

    def shown_from(self) -> int:
        return QUESTIONS_SHOWN_FROM

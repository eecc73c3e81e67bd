"""Runs: one condition's latest answers on one task in one transcript, as compare, plot,
lengths and the HTML report read them.

Transcripts are read slim (slim.py), two at a time where that helps (readers.py): a run
holds its latest record per question and sample, without contexts. Runs are labelled by
what sets their conditions apart (condition.labels), and by the file when the same label
comes from two files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from qmkar.condition import Condition
from qmkar.condition import labels as condition_labels
from qmkar.errors import UsageError
from qmkar.readers import read_each
from qmkar.readprogress import ReadProgress
from qmkar.selection import Selection
from qmkar.slim import SlimRecord, slim_of
from qmkar.transcript import Record, files, latest


class Run(NamedTuple):
    """One condition's latest answers on one task in one transcript file."""

    label: str  # the model name and what sets its condition apart (and the file, when needed)
    model: str
    task: str
    file: Path
    records: list[SlimRecord]  # latest record per question and sample, errors included
    condition: Condition

    @property
    def question_set(self) -> str:
        """Short fingerprint of the questions asked; equal fingerprints mean the same item ids."""
        ids = "\n".join(sorted(r.item.id for r in self.records))
        return hashlib.sha256(ids.encode()).hexdigest()[:6]

    @property
    def answered(self) -> dict[tuple[str, int], SlimRecord]:
        """Answered records by (question, sample)."""
        return {(r.item.id, r.sample): r for r in self.records if r.error is None and r.score is not None}


def read_all(paths: Iterable[Path], warn: Callable[[str], None] | None = None,
             selection: Selection | None = None, progress: ReadProgress | None = None) -> list[SlimRecord]:
    """The latest records `selection` keeps of transcripts or folders of them; none is an error.
    `progress` is told the bytes to read and read (readers.read_each)."""
    paths = list(paths)
    selection = selection or Selection()
    found = [record for records in read_each(files(paths), warn, progress=progress)
             for record in _kept(records, selection)]
    if not found:
        kept = f" matching {selection.describe()}" if selection else ""
        raise UsageError(f"no transcript records{kept} in " + ", ".join(map(str, paths)))
    return found


def load_runs(paths: Iterable[Path], warn: Callable[[str], None] | None = None,
              selection: Selection | None = None, contents: bool = True,
              progress: ReadProgress | None = None) -> list[Run]:
    """Runs (one condition on one task in one file) from transcripts or folders, in the
    order first seen, of the records `selection` keeps. Rows are labelled by
    condition.labels; the same condition in two files is two runs, whose labels name the file.
    Runs are paired (compare.pair) by their questions' fingerprints: `contents=False` leaves
    them out, for readers that never pair (plot). `progress`: as for read_all."""
    paths = list(paths)
    selection = selection or Selection()
    listed = files(paths)
    found = [group for file, records in zip(listed, read_each(listed, warn, contents, progress), strict=True)
             for group in _groups(_kept(records, selection), file)]
    if not found:
        kept = f" matching {selection.describe()}" if selection else ""
        raise UsageError(f"no transcript records{kept} in " + ", ".join(map(str, paths)))
    return labelled(found)


def _kept(records: list[SlimRecord], selection: Selection) -> list[SlimRecord]:
    return [record for record in records if selection.keeps(record)] if selection else records


def runs_of(records: Iterable[Record | SlimRecord], file: Path) -> list[Run]:
    """The runs of some records of one file (a sweep's own questions), the latest of each
    question, condition and sample counting."""
    return labelled(_groups(latest(slim_of(record) for record in records).values(), file))


def _groups(records: Iterable[SlimRecord], file: Path) -> list[tuple[str, Path, list[SlimRecord]]]:
    """(task, file, records) per task and condition, in the order first seen; the records are
    the latest of their keys already (readers.read_latest, runs_of)."""
    groups: dict[tuple[str, str], list[SlimRecord]] = {}
    for record in records:
        groups.setdefault((record.item.task, record.condition_id), []).append(record)
    return [(task, file, group) for (task, _), group in groups.items()]


def labelled(found: list[tuple[str, Path, list[SlimRecord]]],
             strip: frozenset[str] = frozenset()) -> list[Run]:
    """Runs from (task, file, records) groups, labelled by what sets their conditions apart
    (the task options in `strip` left out) and, for the same label in two files, the file."""
    labels: list[str] = []
    for task in dict.fromkeys(task for task, _, _ in found):
        rows = [(records[0].model, records[0].condition.without_params(strip), records[0].label)
                for t, _, records in found if t == task]
        labels.extend(condition_labels(rows))
    order = [(task, file, records) for task in dict.fromkeys(t for t, _, _ in found)
             for t, file, records in found if t == task]
    files_per_label: dict[tuple[str, str], set[Path]] = {}
    for label, (task, file, _) in zip(labels, order, strict=True):
        files_per_label.setdefault((task, label), set()).add(file)
    stems = [file.stem for file in {f for _, f, _ in found}]
    runs = []
    for label, (task, file, records) in zip(labels, order, strict=True):
        if len(files_per_label[(task, label)]) > 1:
            # The stem is shorter; the path is needed only when two files share a stem.
            label = f"{label} @ {file.stem if stems.count(file.stem) == 1 else file}"
        runs.append(Run(label, records[0].model, task, file, records, records[0].condition))
    return runs

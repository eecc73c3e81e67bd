"""Runs: one condition's latest answers on one task in one transcript, as compare, plot,
lengths and the HTML report read them; and report's tallies of the same answers.

Transcripts are read slim (slim.py), two at a time where that helps (readers.py): a run
holds its latest record per question and sample, without contexts. Runs are labelled by
what sets their conditions apart (condition.labels), and by the file when the same label
comes from two files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from pathlib import Path
from typing import NamedTuple

from qmkar.condition import Condition
from qmkar.condition import labels as condition_labels
from qmkar.errors import UsageError
from qmkar.readers import count_each, read_each
from qmkar.readprogress import ReadProgress
from qmkar.selection import Selection
from qmkar.slim import SlimRecord
from qmkar.tally import Tallies, Tally
from qmkar.transcript import files


class Run(NamedTuple):
    """One condition's latest answers on one task in one transcript file."""

    label: str  # the model name and what sets its condition apart (and the file, when needed)
    model: str
    task: str
    file: Path
    records: list[SlimRecord]  # latest record per question and sample, errors included (none: eval's own)
    condition: Condition
    tally: Tally  # those records counted (tally.py): what the grid and the length tables read

    @property
    def question_set(self) -> str:
        """Short fingerprint of the questions asked; equal fingerprints mean the same item ids."""
        ids = "\n".join(sorted(r.item.id for r in self.records))
        return hashlib.sha256(ids.encode()).hexdigest()[:6]

    @property
    def answered(self) -> dict[tuple[str, int], SlimRecord]:
        """Answered records by (question, sample)."""
        return {(r.item.id, r.sample): r for r in self.records if r.error is None and r.score is not None}


def count_latest(paths: Iterable[Path], warn: Callable[[str], None] | None = None,
                 selection: Selection | None = None, progress: ReadProgress | None = None) -> list[Tally]:
    """Tallies of the latest records `selection` keeps of transcripts or folders of them
    (tally.tallies, in the order first seen: report's), each file's records counted and let
    go before the next file's are read, part of them counted by a reader process
    (readers.count_each); none at all is an error, raised once every file is read.
    `progress` is told the bytes to read and read."""
    found = Tallies()
    for _, counted in _each_counted(paths, warn, selection, progress):
        found.extend(counted)
    return list(found.values())


def _each_counted(paths: Iterable[Path], warn: Callable[[str], None] | None, selection: Selection | None,
                  progress: ReadProgress | None) -> Iterator[tuple[Path, list[Tally]]]:
    """Each file's tallies (readers.count_each), then, once every file is read, the error of
    nothing found and the warning of each file that holds no answers."""
    paths = list(paths)
    selection = selection or Selection()
    listed = files(paths)
    found = False
    empty: list[Path] = []
    with closing(count_each(listed, selection, warn, progress)) as each:
        for file, counted in zip(listed, each, strict=True):
            if not counted.records:
                empty.append(file)
            found = found or bool(counted.tallies)
            yield file, counted.tallies
    _check_found(found, paths, selection, empty, warn)


def load_runs(paths: Iterable[Path], warn: Callable[[str], None] | None = None,
              selection: Selection | None = None, contents: bool = True,
              progress: ReadProgress | None = None) -> list[Run]:
    """Runs (one condition on one task in one file) from transcripts or folders, in the
    order first seen, of the records `selection` keeps. Rows are labelled by
    condition.labels; the same condition in two files is two runs, whose labels name the file.
    Runs are paired (compare.pair) by their questions' fingerprints: `contents=False` leaves
    them out, for readers that never pair. `progress`: as for count_latest."""
    paths = list(paths)
    selection = selection or Selection()
    listed = files(paths)
    found: list[Group] = []
    empty: list[Path] = []
    with closing(read_each(listed, warn, contents, progress)) as each:  # counted while the next is read
        for file, records in zip(listed, each, strict=True):
            if not records:
                empty.append(file)
            found += _groups(selection.kept(records), file)
    _check_found(bool(found), paths, selection, empty, warn)
    return labelled(found)


def count_runs(paths: Iterable[Path], warn: Callable[[str], None] | None = None,
               selection: Selection | None = None, progress: ReadProgress | None = None) -> list[Run]:
    """Runs as load_runs gives them, with their tallies and no records: what plot draws.
    Each file's latest records are counted as count_latest counts them (readers.count_each:
    part of them by a reader process, which sends tallies), each file's tallies its runs."""
    each = _each_counted(paths, warn, selection, progress)
    return labelled([Group(tally.task, file, [], tally) for file, counted in each for tally in counted])


def _check_found(found: bool, paths: list[Path], selection: Selection, empty: list[Path],
                 warn: Callable[[str], None] | None) -> None:
    """Nothing found is an error. Otherwise a file that holds no answer at all (a run stopped
    before its first, say) is left out with a warning: two files given to compare, one of
    them empty, would otherwise show one run as if it were all."""
    if not found:
        kept = f" matching {selection.describe()}" if selection else ""
        raise UsageError(f"no transcript records{kept} in " + ", ".join(map(str, paths)))
    if warn is not None:
        for file in empty:
            warn(f"{file}: holds no answers; left out")


def tallied_runs(found: list[Tally], file: Path) -> list[Run]:
    """The runs of a run's own tallies (eval counts its answers and keeps no records)."""
    return labelled([Group(tally.task, file, [], tally) for tally in found])


class Group(NamedTuple):
    """One task and condition's latest records in one file, counted."""

    task: str
    file: Path
    records: list[SlimRecord]
    tally: Tally


def _groups(records: Iterable[SlimRecord], file: Path) -> list[Group]:
    """A group per task and condition, in the order first seen; the records are the latest
    of their keys already (readers.read_latest)."""
    groups: dict[tuple[str, str], Group] = {}
    for record in records:
        key = (record.item.task, record.condition_id)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(record.item.task, file, [], Tally(record.item.task, record))
        group.records.append(record)
        group.tally.add(record)
    return list(groups.values())


def labelled(found: list[Group], strip: frozenset[str] = frozenset()) -> list[Run]:
    """Runs from groups, labelled by what sets their conditions apart (the task options in
    `strip` left out) and, for the same label in two files, the file."""
    labels: list[str] = []
    for task in dict.fromkeys(group.task for group in found):
        rows = [(group.tally.model, _condition(group).without_params(strip), group.tally.label)
                for group in found if group.task == task]
        labels.extend(condition_labels(rows))
    order = [group for task in dict.fromkeys(g.task for g in found) for group in found if group.task == task]
    files_per_label: dict[tuple[str, str], set[Path]] = {}
    for label, group in zip(labels, order, strict=True):
        files_per_label.setdefault((group.task, label), set()).add(group.file)
    stems = [file.stem for file in {group.file for group in found}]
    runs = []
    for label, group in zip(labels, order, strict=True):
        task, file, records, tally = group
        if len(files_per_label[(task, label)]) > 1:
            # The stem is shorter; the path is needed only when two files share a stem.
            label = f"{label} @ {file.stem if stems.count(file.stem) == 1 else file}"
        runs.append(Run(label, tally.model, task, file, records, _condition(group), tally))
    return runs


def _condition(group: Group) -> Condition:
    assert group.tally.condition is not None  # a group holds at least one record
    return group.tally.condition

"""A grid of conditions (context size, targets, ...) asked of one or more models.

A sweep is many small evals written to one transcript. Each cell's items are the
task's ordinary seeded items (their ids already differ by options, so resume works
exactly as for `eval`), labelled with the cell in `item.params` (key `cell`) so a
reader of the transcript sees which grid point a record belongs to. The plan quacks
like eval's (plans.Plan); compare.grid_tables shows the result.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any, NamedTuple

from qmkar.ahead import ahead as made_ahead
from qmkar.compare import Cell
from qmkar.errors import UsageError
from qmkar.sizing import Sizing
from qmkar.tasks import TaskSpec, check_count, generate, make_spec, option_specs
from qmkar.tasks.base import Item, option_name
from qmkar.tokens import show_size

# The options a sweep can vary, in the order cells are labelled and asked: placement and
# every whole-number option of any family (the blog's sizes first, so cell labels keep
# their order), so a new family's size option is an axis with no change here. make_spec
# refuses an option that does not apply to the task.
AXES = tuple(dict.fromkeys(
    ["pairs", "targets", "queries", "length", "placement"]
    + [spec.name for spec in option_specs() if spec.kind is int]
))


def parse_values(text: str, option: str) -> list[int]:
    """"50,100,200" -> [50, 100, 200]."""
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            values.append(int(part))
        except ValueError:
            raise UsageError(
                f"{option} takes whole numbers separated by commas (for example 50,100,200), "
                f"not {text!r}"
            ) from None
    if not values:
        raise UsageError(f"{option} needs at least one value (for example 50,100,200)")
    return list(dict.fromkeys(values))


def parse_placements(text: str) -> list[str]:
    """"start,end,depth:0.1,0.5,0.9" -> ["start", "end", "depth:0.1,0.5,0.9"].

    Commas separate placements, except that numbers after a `depth:` placement are
    its depths; make_spec checks each placement when the cells are built.
    """
    placements: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if placements and placements[-1].startswith("depth:") and _is_number(part):
            placements[-1] += f",{part}"
        else:
            placements.append(part)
    if not placements:
        raise UsageError("--placement needs at least one value (for example start,end,spread)")
    return list(dict.fromkeys(placements))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class SweepCell(NamedTuple):
    label: str  # e.g. "pairs=50 targets=3"
    spec: TaskSpec


class SweepPlan:
    """The cells of a sweep and their items; quacks like the eval plan the CLI runs."""

    def __init__(self, task: str, options: dict[str, Any], n: int, seed: int,
                 sizing: Sizing | None = None) -> None:
        """`options` are the task options given; those in AXES are comma-separated text. With
        `sizing`, its token targets are one more axis (`tokens=4k`)."""
        check_count(n)
        fixed = {name: value for name, value in options.items() if name not in AXES}
        varied: dict[str, list[Any]] = {name: parse_placements(value) if name == "placement"
                  else parse_values(value, option_name(name))
                  for name, value in options.items() if name in AXES}
        names = [name for name in AXES if name in varied]
        self.cells: list[SweepCell] = []
        self.base_specs: list[TaskSpec] = []  # one per combination of the axes, before sizing
        for combination in itertools.product(*(varied[name] for name in names)):
            options = dict(zip(names, combination, strict=True))
            label = " ".join(f"{name}={value}" for name, value in options.items()) or "default"
            spec = make_spec(task, **fixed, **options)
            self.base_specs.append(spec)
            if sizing is None:
                self.cells.append(SweepCell(label, spec))
                continue
            for fit in sizing.fits(spec, seed):
                tokens = f"tokens={show_size(fit.target)}"
                self.cells.append(SweepCell(tokens if label == "default" else f"{label} {tokens}", fit.spec))
        self.task, self.sizing = task, sizing
        self.n, self.seed = n, seed
        self.count = n * len(self.cells)
        self.name = f"sweep-{task}-n{n}-seed{seed}"

    def items(self, ahead: bool = False) -> Iterator[Item]:
        for cell in self.cells:
            for item in (made_ahead if ahead else generate)(cell.spec, self.n, self.seed):
                # The label is not part of the id's hash, so it changes no id.
                item.params = item.params.model_copy(update={"cell": cell.label})
                yield self.sizing.annotate(item) if self.sizing is not None else item

    def ids(self) -> set[str]:
        return {item.id for item in self.items()}


GRID_NOTE = ("each cell: accuracy (correct/answered); questions with errors are not counted; "
             "run the same sweep again to retry them")


def grid_json(cells: list[Cell]) -> str:
    """`sweep --format json`: one object per cell."""
    return json.dumps([c.model_dump(mode="json") for c in cells], indent=2)

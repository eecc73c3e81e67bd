"""Which records a report looks at: --model, --task and --where on the condition.

report, compare, plot and the HTML report read whole transcripts; a Selection keeps the
records whose model (name or --label), task and condition fields match. `--where` names
a condition field as `Condition.flat()` spells it: provider, endpoint, model, template,
task, renderer, settings.<name> or params.<name>.
"""

from __future__ import annotations

import fnmatch
from typing import Any, NamedTuple

from qmkar.errors import UsageError
from qmkar.slim import SlimRecord
from qmkar.transcript import Record

FIELDS = ("provider", "endpoint", "model", "template", "task", "renderer")


class Selection(NamedTuple):
    """Records kept: any of `models` (glob patterns on the name or label), any of `tasks`,
    and every `where` (condition field, value) pair. Empty parts keep everything."""

    models: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    where: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, models: list[str] | None, tasks: list[str] | None, where: list[str] | None) -> Selection:
        """From the command line; a malformed --where is a UsageError that says the form."""
        pairs = []
        for text in where or []:
            field, sep, value = text.partition("=")
            field = field.strip()
            if not sep or not field:
                raise UsageError(f"--where {text!r} must look like FIELD=VALUE, e.g. params.pairs=500 "
                                 "or settings.temperature=0")
            if field not in FIELDS and not field.startswith(("settings.", "params.")):
                raise UsageError(f"--where {text!r}: {field!r} is not a condition field; use one of "
                                 f"{', '.join(FIELDS)}, settings.<name> or params.<name>")
            pairs.append((field, value.strip()))
        return cls(tuple(models or ()), tuple(tasks or ()), tuple(pairs))

    def __bool__(self) -> bool:
        return bool(self.models or self.tasks or self.where)

    def keeps(self, record: Record | SlimRecord) -> bool:
        if self.models and not any(fnmatch.fnmatchcase(name, pattern) for pattern in self.models
                                   for name in (record.model, record.label or "")):
            return False
        if self.tasks and record.condition.task not in self.tasks:
            return False
        flat = record.condition.flat()
        return all(field in flat and matches(flat[field], value) for field, value in self.where)

    def kept(self, records: list[SlimRecord]) -> list[SlimRecord]:
        """The records it keeps, in order (the list itself when it keeps everything)."""
        return [record for record in records if self.keeps(record)] if self else records

    def describe(self) -> str:
        """The selection as the options that made it, for a message."""
        parts = [f"--model {m}" for m in self.models] + [f"--task {t}" for t in self.tasks]
        return " ".join(parts + [f"--where {f}={v}" for f, v in self.where])


def matches(value: Any, wanted: str) -> bool:
    """A condition value against the text of --where: numbers as numbers, null as unset."""
    if value is None:
        return wanted.lower() in ("null", "none", "unset", "")
    if isinstance(value, bool):
        return wanted.lower() == str(value).lower()
    if isinstance(value, int | float):
        try:
            return float(wanted) == float(value)
        except ValueError:
            return False
    return str(value) == wanted

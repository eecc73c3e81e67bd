"""A condition: everything that can change an answer, and the short id that names it.

Every transcript record carries the condition it was asked under: the provider, the
address requests went to, the model, the generation settings really sent, the prompt
template (by content), the task and the options that shaped its questions, and the
version of qmkar's prompt rendering. Resume, the response cache, reports, compare,
sweep grids and plots key on it, never on a model name alone. `labels` names
conditions for people: the model, plus whatever differs between the conditions shown.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import Any

from pydantic import ConfigDict, Field

from qmkar.deferred import DeferredModel

# Bump when render.py changes the text a template produces for the same item.
RENDERER_VERSION = 1


class Condition(DeferredModel):
    """What a question was asked under. Equal ids mean it was asked the same way."""

    model_config = ConfigDict(frozen=True)

    provider: str = Field(description="Provider prefix: openai, anthropic, deepseek, sim, oracle, replay...")
    endpoint: str | None = Field(
        default=None, description="The address requests went to; null for models answered on this machine.")
    model: str = Field(description="The model as its provider knows it (gpt-4o, sim's memory and options, "
                       "replay's file and its content hash).")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="Generation settings as sent (the first sample's seed).")
    template: str = Field(description="sha256 of the prompt template's text (12 hex digits).")
    task: str = Field(description="Task family.")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The task options that shaped the questions (the seed and per-item fields left out).")
    renderer: int = Field(default=RENDERER_VERSION, description="Version of qmkar's prompt rendering.")
    inferred: bool = Field(
        default=False, description="Reconstructed from a transcript written before conditions were "
        "recorded: the endpoint is unknown (null) and the template known only by its origin.")

    def key(self) -> str:
        """The condition's id: 12 hex digits of sha256 over its fields (not `inferred`)."""
        return self._key

    @cached_property
    def _key(self) -> str:  # once per condition: it is frozen, and resume asks for it per question
        text = json.dumps(self.model_dump(mode="json", exclude={"inferred"}), sort_keys=True,
                          separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Condition:
        """A copy; with `update`, its id is computed afresh."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            copied.__dict__.pop("_key", None)
        return copied

    def without_params(self, names: Iterable[str]) -> Condition:
        """The same condition but for the task options named (a grid's own axes)."""
        names = set(names)
        return self.model_copy(update={"params": {k: v for k, v in self.params.items() if k not in names}})

    def flat(self) -> dict[str, Any]:
        """Every field as one level: settings.temperature, params.pairs, ..."""
        flat: dict[str, Any] = {"provider": self.provider, "endpoint": self.endpoint, "model": self.model}
        flat.update({f"settings.{k}": v for k, v in sorted(self.settings.items())})
        flat.update({"template": self.template, "task": self.task})
        flat.update({f"params.{k}": v for k, v in sorted(self.params.items())})
        flat["renderer"] = self.renderer
        return flat

    def matches(self, other: Condition) -> bool:
        """Same condition; for one reconstructed from an old transcript, the same in every
        field it knows (its endpoint was never recorded)."""
        if self.key() == other.key():
            return True
        if not (self.inferred or other.inferred):
            return False
        mine, theirs = self.flat(), other.flat()
        unknown = {"endpoint"}
        return all(mine.get(k) == theirs.get(k) for k in set(mine) | set(theirs) if k not in unknown)


def differences(a: Condition, b: Condition) -> list[str]:
    """What differs between two conditions, as 'name: old -> new' (for one line to the user)."""
    old, new = a.flat(), b.flat()
    return [f"{name}: {_shown(old.get(name))} -> {_shown(new.get(name))}"
            for name in dict.fromkeys([*old, *new]) if old.get(name) != new.get(name)]


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


# Fields a label never needs: the model name already says the provider and model.
_NOT_IN_LABELS = {"provider", "model", "task", "renderer"}


def labels(rows: Iterable[tuple[str, Condition, str | None]]) -> list[str]:
    """A display name per (model name, condition, user's label) row, in order.

    A user's --label wins. Otherwise the model name, followed by whatever differs
    between the conditions shown for that model name, e.g. `gpt-4o (params.pairs=2000,
    params.targets=5)`. Rows alike in everything shown get the condition id as well."""
    rows = list(rows)
    by_model: dict[str, list[Condition]] = {}
    for name, condition, _ in rows:
        by_model.setdefault(name, []).append(condition)
    shown: list[str] = []
    for name, condition, label in rows:
        if label:
            shown.append(label)
            continue
        others = by_model[name]
        if len({c.key() for c in others}) <= 1:
            shown.append(name)
            continue
        flats = [c.flat() for c in others]
        varying = [k for k in dict.fromkeys(k for f in flats for k in f) if k not in _NOT_IN_LABELS
                   and len({json.dumps(f.get(k), sort_keys=True) for f in flats}) > 1]
        mine = condition.flat()
        parts = [f"{_short_name(k)}={_shown(mine.get(k))}" for k in varying]
        shown.append(f"{name} ({', '.join(parts) or condition.key()})")
    return _unique(shown, rows)


def _short_name(field: str) -> str:
    """params.pairs -> pairs; settings.temperature -> temperature (the prefix is implied)."""
    return field.split(".", 1)[1] if field.startswith(("params.", "settings.")) else field


def _unique(shown: list[str], rows: list[tuple[str, Condition, str | None]]) -> list[str]:
    """Labels that still collide (a user gave two conditions one label) get the condition id."""
    seen: dict[str, set[str]] = {}
    for label, (_, condition, _) in zip(shown, rows, strict=True):
        seen.setdefault(label, set()).add(condition.key())
    return [f"{label} [{condition.key()}]" if len(seen[label]) > 1 else label
            for label, (_, condition, _) in zip(shown, rows, strict=True)]

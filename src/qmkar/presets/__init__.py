"""Presets: a whole comparison in one TOML file, for `qmkar eval --preset NAME-or-FILE`.

A preset names its models (each with its provider, generation settings and display
label, and optionally the datasets it is asked), its questions (datasets, or a task to
generate) and how many samples each question gets. Two ship inside this folder:
`blog-2025` (the blog's models as named today, on its three problem sets) and
`frontier-2026`. The format, checked by the pydantic models below (one line naming the
key path on any mistake):

    description = "..."
    datasets = ["blog:qmkar", "blog:mqar"]   # or a [questions] table: task, n, seed, options
    samples = 1

    [[models]]
    model = "gpt-4o"                     # provider:model, or a bare name qmkar resolves
    label = "ChatGPT 4o"                 # shown in reports
    settings = { max_tokens = 2048 }     # temperature, max_tokens, reasoning_effort, thinking_budget
    datasets = ["blog:counting"]         # optional: ask it only these of the preset's datasets
"""

from __future__ import annotations

import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ConfigDict, Field, ValidationError, model_validator

from qmkar import defaults
from qmkar.deferred import DeferredModel
from qmkar.errors import QmkarError, UsageError
from qmkar.providers import registry

BOUNDS = defaults.SEND_BOUNDS


class Settings(DeferredModel):
    """Generation settings of one model; those left out follow the command line, then the
    model's rule (providers/rules.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The command line's bounds (defaults.SEND_BOUNDS): a preset cannot send what a flag could not.
    temperature: float | None = Field(default=None, ge=BOUNDS["temperature"][0], le=BOUNDS["temperature"][1],
                                      description="Sampling temperature.")
    max_tokens: int | None = Field(default=None, ge=BOUNDS["max_tokens"][0], le=BOUNDS["max_tokens"][1],
                                   description="Answer token limit, reasoning included.")
    reasoning_effort: str | None = Field(default=None, description="Reasoning effort (low, medium, high...).")
    thinking_budget: int | None = Field(default=None, ge=BOUNDS["thinking_budget"][0],
                                        le=BOUNDS["thinking_budget"][1],
                                        description="Thinking tokens (Claude, Gemini).")

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class ModelEntry(DeferredModel):
    """One model of a preset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1, description="provider:model, or a bare name (gpt-4o, claude-...).")
    label: str | None = Field(default=None, min_length=1, description="Display name in reports.")
    settings: Settings = Field(default_factory=lambda: Settings())
    datasets: list[str] | None = Field(default=None, min_length=1, description="Ask it only these datasets.")
    note: str | None = Field(default=None, description="Why this model, or what to know about it (not sent).")


class Questions(DeferredModel):
    """Questions generated instead of read from datasets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = "qmkar"
    n: int = Field(defaults.EVAL_N, ge=1)
    seed: int = defaults.SEED
    options: dict[str, Any] = Field(default_factory=dict, description="Task options (pairs, targets...).")


class Preset(DeferredModel):
    """A comparison: models x questions, each asked `samples` times."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    datasets: list[str] | None = Field(default=None, min_length=1)
    questions: Questions | None = None
    samples: int = Field(1, ge=BOUNDS["samples"][0], le=BOUNDS["samples"][1])
    models: list[ModelEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Preset:
        if (self.datasets is None) == (self.questions is None):
            raise ValueError("give either datasets = [...] or a [questions] table (not both)")
        for index, entry in enumerate(self.models):
            unknown = [d for d in entry.datasets or [] if d not in (self.datasets or [])]
            if unknown:
                raise ValueError(f"models[{index}].datasets: {', '.join(unknown)} is not one of the "
                                 "preset's datasets")
        seen: set[str] = set()
        for index, entry in enumerate(self.models):
            key = json.dumps([entry.model, entry.settings.given()], sort_keys=True)
            if key in seen:
                raise ValueError(f"models[{index}]: {entry.model} with these settings is already listed")
            seen.add(key)
        return self

    def asks(self, dataset: str) -> list[ModelEntry]:
        """The models asked `dataset` (a generated preset's one set is None)."""
        return [m for m in self.models if m.datasets is None or dataset in m.datasets]


class Loaded(NamedTuple):
    name: str  # the shipped name or the file's stem: names the results folder
    source: str  # where it was read from
    preset: Preset


def shipped() -> list[str]:
    """The names of the presets that ship with qmkar."""
    return sorted(p.name.removesuffix(".toml") for p in resources.files(__name__).iterdir()
                  if p.name.endswith(".toml"))


def load(reference: str, options: dict[str, Any] | None = None) -> Loaded:
    """A preset by shipped name or file path, checked: every key and every model name."""
    path = Path(reference).expanduser()
    if path.is_file():
        text, name, source = _read(path), path.stem, str(path)
    elif reference in shipped():
        text = resources.files(__name__).joinpath(f"{reference}.toml").read_text(encoding="utf-8")
        name, source = reference, f"{reference} (shipped)"
    else:
        raise UsageError(f"--preset {reference}: no such file, and not a shipped preset "
                         f"({', '.join(shipped())})")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"preset {source} is not valid TOML: {exc}") from None
    try:
        preset = Preset.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _path(first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise UsageError(f"preset {source}: {where + ': ' if where else ''}{message}") from None
    for index, entry in enumerate(preset.models):
        try:
            registry.canonical(entry.model, options)
        except QmkarError as exc:
            raise UsageError(f"preset {source}: models[{index}].model: {exc}") from None
    return Loaded(name, source, preset)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read preset {path}: {exc}") from None


def _path(loc: tuple[int | str, ...]) -> str:
    """('models', 2, 'settings', 'temperature') -> models[2].settings.temperature"""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text

"""Pydantic models built from values already known to be valid, without validating them again.

For the paths that build a model for each line of a file (rescore reads 100k items and grades
100k answers): what `model_construct` returns, without its loop over the fields. Only for
models with no aliases, private attributes or extra fields, given values of exactly their
fields' types; the tests of each caller hold what it builds equal to what validation builds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

Model = TypeVar("Model", bound=BaseModel)


def built(model: type[Model], fields: dict[str, Any], fields_set: set[str]) -> Model:
    """An instance of `model` holding `fields` as they are, every field in the model's order:
    model_construct(fields_set, **fields)."""
    made = model.__new__(model)
    object.__setattr__(made, "__dict__", fields)
    object.__setattr__(made, "__pydantic_fields_set__", fields_set)
    object.__setattr__(made, "__pydantic_extra__", None)
    object.__setattr__(made, "__pydantic_private__", None)
    return made


def builder(model: type[Model]) -> Callable[..., Model]:
    """A function building `model` from its required fields and any others, given by name, the
    rest their defaults (a default factory called for each instance): model_construct(**given).
    A closure: a class with __call__ cost nearly as much as validating."""
    defaults: dict[str, Any] = {}  # every field, in order; the given ones replace theirs
    factories: list[tuple[str, Callable[[], Any]]] = []
    for name, field in model.model_fields.items():
        if field.default_factory is not None:
            factories.append((name, field.default_factory))  # type: ignore[arg-type]
        defaults[name] = None if field.is_required() or field.default_factory else field.default

    def build(**given: Any) -> Model:
        fields = {**defaults, **given}
        for name, factory in factories:
            if name not in given:
                fields[name] = factory()
        return built(model, fields, set(given))

    return build

"""Pydantic models built from values already known to be valid, without validating them again.

For the paths that build a model for each line of a file (rescore reads 100k of them): what
`model_construct` returns, without its loop over the fields. Only for models with no aliases,
private attributes or extra fields, given values of exactly their fields' types; the tests of
each caller hold what it builds equal to what validation builds.
"""

from __future__ import annotations

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

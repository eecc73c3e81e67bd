"""The base of qmkar's pydantic models: each builds its validator and serializer when first used.

Pydantic builds them when the class is defined by default, which for qmkar's forty-odd models
was about a sixth of the imports every command and worker process pays before its first step
(`qmkar --help` included), while most commands use a handful of the models: a report never
validates a run's settings, a preset or a batch's state. Built on first use, each costs the
same once, and only where it is used.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class DeferredModel(BaseModel):
    """pydantic.BaseModel, its validator and serializer built on first use (defer_build)."""

    model_config = ConfigDict(defer_build=True)

"""The base of qmkar's pydantic models: each builds its validator and serializer when first used.

Pydantic builds them when the class is defined by default: every command and worker process
built all of qmkar's forty-odd models while importing, though most commands use a handful (a
report never validates a run's settings, a preset or a batch's state) and `--help` none. Built
on first use, each costs the same once, and only where it is used: `benchmarks/startup.py`
measured `qmkar --help` 11% faster for it, the worker processes' start 15 to 24%
(docs/performance.md, twenty-third pass).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class DeferredModel(BaseModel):
    """pydantic.BaseModel, its validator and serializer built on first use (defer_build)."""

    model_config = ConfigDict(defer_build=True)

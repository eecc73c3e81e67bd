"""Helpers shared by the hosted-provider tests (their fixtures are in tests/conftest.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from qmkar.asking import RunStats, Sending, run_model
from qmkar.render import default_template
from qmkar.retry import RetryPolicy
from qmkar.runner import Answered
from qmkar.tasks import generate, make_spec
from qmkar.transcript import TranscriptWriter, read

PLANTED_KEY = "sk-planted-4f1c9e2a7b3d5e8f0a6c"


def items(n: int, pairs: int = 10, seed: int = 0):
    return list(generate(make_spec("qmkar", pairs=pairs), n, seed))


class Sleeps:
    """An injected sleep that records what it was asked to wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)


def policy(**overrides) -> tuple[RetryPolicy, Sleeps]:
    sleeps = Sleeps()
    values = {"max_retries": 4, "budget": 60.0, "timeout": 5.0, "sleep": sleeps}
    values.update(overrides)
    return RetryPolicy(**values), sleeps


def run(provider, questions, path: Path, sending: Sending, concurrency: int = 8, settings=None):
    """Run one provider over the questions into a transcript; return (records, stats)."""
    stats = RunStats()

    async def go() -> None:
        try:
            with TranscriptWriter(path) as writer:
                await run_model(provider, questions, default_template, settings or {}, writer, Answered(),
                                stats, concurrency, sending=sending)
        finally:
            await provider.aclose()

    asyncio.run(go())
    return read(path).records, stats

"""Fixtures for the hosted-provider tests: a real fault-injecting server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakeserver import FaultServer  # noqa: E402

from qmkar.render import default_template  # noqa: E402
from qmkar.retry import RetryPolicy  # noqa: E402
from qmkar.runner import RunStats, Sending, run_model  # noqa: E402
from qmkar.tasks import generate, make_spec  # noqa: E402
from qmkar.transcript import TranscriptWriter, read  # noqa: E402

PLANTED_KEY = "sk-planted-4f1c9e2a7b3d5e8f0a6c"


@pytest.fixture
def server() -> Iterator[FaultServer]:
    running = FaultServer().start()
    yield running
    running.stop()


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> str:
    """A planted key in the variables the hosted providers read."""
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "FAKE_API_KEY"):
        monkeypatch.setenv(variable, PLANTED_KEY)
    return PLANTED_KEY


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never touch the user's response cache or endpoint file."""
    monkeypatch.setenv("QMKAR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("QMKAR_ENDPOINTS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "cache"


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
                await run_model(provider, questions, default_template, settings or {}, writer, set(),
                                stats, concurrency, sending=sending)
        finally:
            await provider.aclose()

    asyncio.run(go())
    return read(path).records, stats

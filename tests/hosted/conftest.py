"""Fixtures for the hosted-provider tests: a real fault-injecting server on 127.0.0.1."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hosted_fakeserver import FaultServer  # noqa: E402
from hosted_helpers import PLANTED_KEY  # noqa: E402


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

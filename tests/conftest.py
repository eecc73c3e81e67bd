"""Shared fixtures: the blog data folder and a CLI runner (hand-made items: factories.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

BLOG_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "blog-qmkar"


@pytest.fixture
def blog_dir() -> Path:
    if not BLOG_DIR.is_dir():
        pytest.skip(f"the blog's problem sets are not at {BLOG_DIR} (../shared beside the repo)")
    return BLOG_DIR


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()

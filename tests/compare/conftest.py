"""Fixtures and helpers for the compare / sweep / plot / html tests.

This folder is a package (it has __init__.py), so this file is `compare.conftest` and
never shadows the top-level tests' `from conftest import ...`.

Transcripts are made by the real CLI. Datasets come from `qmkar generate`, answers
from the oracle and from replay files whose answers follow a rule per item (drop a
value, add a wrong one, say nothing), and every transcript is written by `qmkar eval`
or `qmkar sweep`. Nothing here builds a metric by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar.cli import app
from qmkar.tasks.datasets import read_items


class Cli:
    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str, ok: bool = True):
        result = self.runner.invoke(app, [str(a) for a in args])
        if ok and result.exit_code != 0:
            raise AssertionError(f"qmkar {' '.join(map(str, args))} failed ({result.exit_code}):\n"
                                 f"{result.output}\n{result.exception!r}")
        return result


@pytest.fixture
def cli() -> Cli:
    return Cli()


def write_replay(dataset: Path, path: Path, answer: Callable[[int, object], str | None]) -> Path:
    """A replay file answering item i of `dataset` with answer(i, item); None leaves it out."""
    with path.open("w", encoding="utf-8") as out:
        for index, item in enumerate(read_items(dataset)):
            text = answer(index, item)
            if text is not None:
                out.write(json.dumps({"id": item.id, "answer": text}) + "\n")
    return path


def values(item, drop_last: bool = False, extra: int | None = None) -> str:
    chosen = list(item.expected[:-1] if drop_last else item.expected)
    if extra is not None:
        chosen.append(extra)
    return ", ".join(str(v) for v in chosen)


@pytest.fixture
def recall_runs(tmp_path: Path, cli: Cli):
    """One qmkar dataset of 24 questions asked of the oracle and two replay models.

    Model A misses the last target value on items 0-5 (i % 4 == 0 also adds a value of
    another key); model B misses it on items 3-14. So on the 24 shared questions:
    both right 9, only A 9, only B 3, neither 3.
    """
    dataset = tmp_path / "ds.jsonl"
    cli("generate", "-o", dataset, "-n", 24, "--pairs", 60, "--seed", 7)

    def answer_a(i, item):
        if i < 6:
            other = next(v for k, v in item.pairs if k != item.query[0])
            return values(item, drop_last=True, extra=other if i % 4 == 0 else None)
        return values(item)

    def answer_b(i, item):
        return values(item, drop_last=3 <= i < 15)

    a = write_replay(dataset, tmp_path / "a.jsonl", answer_a)
    b = write_replay(dataset, tmp_path / "b.jsonl", answer_b)
    transcript = tmp_path / "run.jsonl"
    cli("eval", "-m", "oracle", "-m", f"replay:{a}", "-m", f"replay:{b}", "--dataset", dataset,
        "-o", transcript)
    return {"dataset": dataset, "transcript": transcript, "a": f"replay:{a}", "b": f"replay:{b}"}

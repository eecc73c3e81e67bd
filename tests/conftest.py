"""Fixtures every test can use: the blog's data folder, CLI runners, the fault server,
transcripts made by the CLI, and a private cache and home for every test.

Helpers (hand-made items, the fault server, replay files) are in tests/support/."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.batchserver import BatchServer
from tests.support.fakeserver import FaultServer
from tests.support.hosted import PLANTED_KEY
from tests.support.transcripts import Cli, values, write_replay


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as a terminal sends it, whoever started the suite. A shell without job control
    starts a command put in the background (`(pytest &)`) with SIGINT ignored; Python then
    never raises KeyboardInterrupt, nor do the qmkar processes the tests start, and the tests
    of Ctrl-C fail for the launcher's sake (three did so, in a run started that way)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

BLOG_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "blog-qmkar"


@pytest.fixture
def blog_dir() -> Path:
    if not BLOG_DIR.is_dir():
        pytest.skip(f"the blog's problem sets are not at {BLOG_DIR} (../shared beside the repo)")
    return BLOG_DIR


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def cli() -> Cli:
    return Cli()


@pytest.fixture
def server() -> Iterator[FaultServer]:
    running = FaultServer().start()
    yield running
    running.stop()


@pytest.fixture
def batch_server() -> Iterator[BatchServer]:
    """OpenAI's Files and Batches and Anthropic's Message Batches on 127.0.0.1."""
    running = BatchServer().start()
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
    """Never touch the user's response cache or endpoint file, nor the network for the blog's
    problem sets: they are read from ../shared, and a fetch would go to a closed port."""
    monkeypatch.setenv("QMKAR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("QMKAR_DATA_DIR", str(BLOG_DIR))
    monkeypatch.setenv("QMKAR_BLOG_MIRROR", "http://127.0.0.1:9/")
    monkeypatch.delenv("QMKAR_ENDPOINTS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "cache"


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


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """What a counting reader process (readers.count_each) sent, in order: "tallies" for each
    part it counted, "records" for a part whose records were asked for."""
    from qmkar import readers

    sent: list[str] = []
    take_tallied, take_held = readers.Reader.take_tallied, readers.Reader.take_held

    def tallied(self):
        found = take_tallied(self)
        sent.extend(["tallies"] if found is not None else [])
        return found

    def held(self, later):
        found = take_held(self, later)
        sent.extend(["records"] if found is not None else [])
        return found

    monkeypatch.setattr(readers.Reader, "take_tallied", tallied)
    monkeypatch.setattr(readers.Reader, "take_held", held)
    return sent


@pytest.fixture
def replies(monkeypatch) -> list[int]:
    """How many records each reply of a reader process (readers.py) held, in order."""
    from qmkar import readers

    counts: list[int] = []
    original = readers._records

    def counted(reply):
        counts.append(len(reply.records))
        return original(reply)

    monkeypatch.setattr(readers, "_records", counted)
    return counts

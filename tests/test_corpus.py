"""The corpus of bad inputs: every command line of tests/corpus/cases.txt, run through the
CLI in a copy of tests/corpus/, is refused with one clear line and touches no file.

Each case must exit non-zero with exactly one line on stderr, starting "error:" and
holding the case's expected text (literally: brackets in names are not read as markup),
raise no exception other than the exit, and leave every file of the folder
byte-identical, with none added.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar.cli import app

CORPUS = Path(__file__).parent / "corpus"


def _cases() -> list[pytest.param]:
    cases = []
    for number, line in enumerate((CORPUS / "cases.txt").read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        expect, _, command = line.partition(" | ")
        cases.append(pytest.param(expect.strip(), shlex.split(command), id=f"{number}:{command[:60]}"))
    return cases


def digests(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def corpus_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("corpus") / "corpus"
    shutil.copytree(CORPUS, copy)
    return copy


def test_the_table_is_broad() -> None:
    assert len(_cases()) >= 150


@pytest.mark.parametrize(("expect", "args"), _cases())
def test_refused_in_one_line(expect: str, args: list[str], corpus_copy: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(corpus_copy)
    before = digests(corpus_copy)
    result = CliRunner().invoke(app, args)
    shown = f"stdout: {result.stdout!r}\nstderr: {result.stderr!r}"
    assert result.exception is None or isinstance(result.exception, SystemExit), shown
    assert result.exit_code not in (0, None), shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, shown
    assert lines[0].startswith("error: "), shown
    assert expect.lower() in lines[0].lower(), shown
    assert "Traceback" not in result.output, shown
    assert digests(corpus_copy) == before

"""The one printer: tables that fit a terminal without dropping a column, and CSV of numbers."""

from __future__ import annotations

import csv
import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from qmkar.cli import app
from qmkar.tables import Accuracy, Count, Interval, Pct, Shown, Table, folds, print_rich, to_csv


def test_folds_keep_the_first_column_and_fit_the_room():
    header = ["a long model name", *(f"col{i}" for i in range(1, 7))]
    rows = [["x" * 17, *("12345" for _ in range(6))]]
    chunks = folds(header, rows, Console(width=40))
    assert len(chunks) > 1 and all(chunk[0] == 0 for chunk in chunks)
    assert sorted(i for chunk in chunks for i in chunk[1:]) == list(range(1, 7))  # none dropped
    assert folds(header, rows, Console(width=200)) == [[0, 1, 2, 3, 4, 5, 6]]


def test_every_part_of_a_folded_table_repeats_its_key_columns(cli, tmp_path):
    """At 80 columns compare's paired table is folded; each part still says which pair
    (task, A, B) a row is, and the sweep grid keeps model and targets in every part."""
    from qmkar import compare

    run, sweep = tmp_path / "c.jsonl", tmp_path / "s.jsonl"
    cli("eval", "-m", "oracle", "-m", "sim:delta", "-m", "sim:linear", "-n", 6, "--pairs", 20, "-o", run)
    cli("sweep", "-m", "oracle", "--pairs", ",".join(str(10 * k) for k in range(2, 12)), "--targets", "3,5",
        "-n", 1, "-o", sweep)
    screen = ""
    for runs in ([run], [sweep]):
        console = Console(width=80, record=True, color_system=None)
        print_rich(compare.tables(compare.compare(compare.load_runs(runs))), console)
        screen += console.export_text()
    assert max(len(line) for line in screen.splitlines()) <= 80
    parts = re.split(r"^(?=[a-z])", screen, flags=re.M)  # each title starts a part
    paired = [part for part in parts if part.startswith("paired: same questions")]
    grid = [part for part in parts if part.startswith("qmkar: accuracy by number of pairs")]
    assert len(paired) >= 2 and len(grid) >= 2
    for part in paired:
        assert re.search(r"^\s+task\s+A\s+B\s", part, re.M), part
        for a, b in [("oracle", "sim:delta"), ("oracle", "sim:linear"), ("sim:delta", "sim:linear")]:
            assert re.search(rf"^\s+qmkar\s+{a}\s+{b}\s", part, re.M), (a, b, part)
    assert any("Holm p" in part for part in paired) and any("only A" in part for part in paired)
    for part in grid:
        assert re.search(r"^\s+model\s+targets\s", part, re.M), part
        assert re.search(r"^\s+oracle\s+5\s", part, re.M), part


@pytest.mark.parametrize("width", [60, 80, 120])
def test_every_column_of_the_quickstart_tables_is_on_screen(width, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["eval", "-m", "sim:softmax", "-m", "sim:linear", "-m", "sim:delta",
                                      "-n", "4", "--pairs", "50", "--format", "json", "-o", "t.jsonl"])
    assert result.exit_code == 0, result.output
    from qmkar import report, transcript

    shown = report.tables(report.summaries(transcript.read(tmp_path / "t.jsonl").records))
    console = Console(width=width, record=True, color_system=None)
    print_rich(shown, console)
    screen = console.export_text()
    assert max(len(line) for line in screen.splitlines()) <= width
    for table in shown:
        for name in table.header:
            assert re.search(rf"(^|\s){re.escape(name)}(\s|$)", screen, re.M), (name, width)
        for row in table.rows:
            assert str(row[0]) in screen


def test_csv_is_one_header_and_numbers():
    tables = [
        Table("a", ["model", "n", "accuracy", "95% CI"], [["m1", 4, Pct(0.25), Interval(0.05, 0.7)]]),
        Table("b", ["model", "FN-D0-20%", "p", "20"], [["m1", Count(1, 3), Shown(0.0001, "<0.001"),
                                                       Accuracy(3, 4, 1)]]),
    ]
    rows = list(csv.DictReader(io.StringIO(to_csv(tables))))
    assert [r["table"] for r in rows] == ["a", "b"]
    a, b = rows
    assert (float(a["accuracy"]), float(a["95% CI low"]), float(a["95% CI high"])) == (0.25, 0.05, 0.7)
    assert (int(b["FN-D0-20% part"]), int(b["FN-D0-20% whole"]), float(b["p"])) == (1, 3, 0.0001)
    assert (float(b["20 accuracy"]), int(b["20 n"]), int(b["20 errors"])) == (0.75, 4, 1)
    assert a["p"] == "" and b["n"] == ""  # a column another table lacks is empty, never a header row

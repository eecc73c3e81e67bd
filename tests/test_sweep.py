"""`qmkar sweep`: a grid of cells in one transcript, labelled, resumable, printed as a grid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qmkar import transcript
from tests.support.transcripts import values, write_replay

PAIRS, TARGETS, N = (20, 40), (3, 5), 3


@pytest.fixture
def sweep_replay(tmp_path: Path, cli) -> str:
    """Replay answers for every cell: right at 20 pairs, a target missed at 40 pairs.

    Each cell's questions are made by `qmkar generate` with the cell's options and the
    sweep's seed, so their ids are the ids the sweep asks.
    """
    answers = tmp_path / "answers.jsonl"
    with answers.open("w") as out:
        for pairs in PAIRS:
            for targets in TARGETS:
                cell = tmp_path / f"cell-{pairs}-{targets}.jsonl"
                cli("generate", "-o", cell, "-n", N, "--pairs", pairs, "--targets", targets, "--seed", 3)
                part = write_replay(cell, tmp_path / "part.jsonl",
                                    lambda i, item, p=pairs: values(item, drop_last=p == 40))
                out.write(part.read_text())
    return f"replay:{answers}"


def run_sweep(cli, output: Path, models: list[str], pairs: str = "20,40", fmt: str = "json", code: int = 0):
    args = ["sweep", "--pairs", pairs, "--targets", "3,5", "-n", N, "--seed", 3, "-o", output,
            "--format", fmt]
    for model in models:
        args += ["-m", model]
    return cli(*args, code=code)


def test_every_cell_is_asked_labelled_and_tabulated(cli, tmp_path, sweep_replay):
    output = tmp_path / "sweep.jsonl"
    grid = json.loads(run_sweep(cli, output, ["oracle", sweep_replay]).stdout)

    records = transcript.read(output).records
    assert len(records) == 2 * len(PAIRS) * len(TARGETS) * N
    assert all(r.error is None for r in records)  # the replay file had every cell's ids
    for record in records:
        item = record.item
        assert item.params.extra("cell") == f"pairs={item.size} targets={len(item.expected)}"
    assert {(c["model"], c["size"], c["width"]) for c in grid} == {
        (m, p, t) for m in ("oracle", sweep_replay) for p in PAIRS for t in TARGETS
    }
    for cell in grid:
        assert cell["n"] == N and cell["errors"] == 0
        wrong = cell["model"] == sweep_replay and cell["size"] == 40
        assert cell["accuracy"] == (0.0 if wrong else 1.0)


def test_the_grid_table_has_a_column_per_size(cli, tmp_path):
    table = run_sweep(cli, tmp_path / "sweep.jsonl", ["oracle"], fmt="table").output
    assert "qmkar: accuracy by number of pairs" in table
    header = next(line for line in table.splitlines() if "targets" in line and "model" in line)
    assert header.split() == ["model", "targets", "20", "40"]
    assert table.count("100.0% (3/3)") == 4


def answers(path: Path) -> int:
    """The answer lines of a transcript (it also holds run, item and template lines)."""
    return sum(1 for line in path.read_text().splitlines() if json.loads(line).get("kind") == "answer")


def test_running_again_resumes_and_widening_asks_only_new_cells(cli, tmp_path, sweep_replay):
    output = tmp_path / "sweep.jsonl"
    first = run_sweep(cli, output, ["oracle", sweep_replay]).stdout
    size = answers(output)

    before = output.read_bytes()
    assert run_sweep(cli, output, ["oracle", sweep_replay]).stdout == first
    assert output.read_bytes() == before  # nothing to ask, nothing written

    # A run cut short: the last five lines never arrived.
    lines = output.read_text().splitlines(keepends=True)
    output.write_text("".join(lines[:-5]))
    assert run_sweep(cli, output, ["oracle", sweep_replay]).stdout == first
    assert answers(output) == size
    assert len(transcript.latest(transcript.read(output).records)) == size

    wider = json.loads(run_sweep(cli, output, ["oracle"], pairs="20,40,60").stdout)
    assert answers(output) == size + len(TARGETS) * N
    assert sorted({c["size"] for c in wider}) == [20, 40, 60]
    assert {c["model"] for c in wider} == {"oracle"}  # the grid shows the models asked


def test_cells_with_errors_show_them_and_are_asked_again(cli, tmp_path, sweep_replay):
    output = tmp_path / "sweep.jsonl"
    missing = sweep_replay.replace(".jsonl", "-part.jsonl")
    full = Path(sweep_replay.removeprefix("replay:")).read_text().splitlines(keepends=True)
    Path(missing.removeprefix("replay:")).write_text("".join(full[N:]))  # first cell unanswered
    grid = json.loads(run_sweep(cli, output, [missing], code=3).stdout)
    first = next(c for c in grid if c["size"] == 20 and c["width"] == 3)
    assert (first["n"], first["errors"]) == (0, N)
    table = run_sweep(cli, output, [missing], fmt="table", code=3).output
    assert f"- {N} err" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pairs", "20,x"], "--pairs takes whole numbers separated by commas"),
        (["--pairs", ","], "--pairs needs at least one value"),
        (["--task", "mqar", "--targets", "3,5"], "--targets does not apply to --task mqar"),
        (["--targets", "3,700"], "cannot exceed --pairs"),
        (["-n", "0"], "-n must be at least 1"),
        (["--format", "html"], "unknown --format 'html'"),
    ],
)
def test_user_mistakes_give_one_line(cli, tmp_path, args, message):
    result = cli("sweep", "-m", "oracle", "-o", tmp_path / "s.jsonl", *args, ok=False)
    assert result.exit_code == 1
    assert message in result.output
    assert result.output.startswith("error:") and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "s.jsonl").exists()


def test_other_tasks_sweep_their_own_axes(cli, tmp_path):
    mqar = json.loads(cli("sweep", "-m", "oracle", "--task", "mqar", "--pairs", "20,40",
                          "--queries", "1,2", "-n", 2, "-o", tmp_path / "m.jsonl",
                          "--format", "json").stdout)
    assert {(c["size"], c["width"]) for c in mqar} == {(20, 1), (20, 2), (40, 1), (40, 2)}
    counting = cli("sweep", "-m", "oracle", "--task", "counting", "--length", "30,60", "-n", 2,
                   "-o", tmp_path / "c.jsonl").output
    assert "counting: accuracy by number of values" in counting
    assert counting.count("100.0% (2/2)") == 2


def test_placement_is_an_axis_and_depth_lists_keep_their_commas(cli, tmp_path):
    output = tmp_path / "placed.jsonl"
    grid = json.loads(cli("sweep", "-m", "oracle", "--pairs", "20,40",
                          "--placement", "start,end,depth:0.1,0.5,0.9", "-n", 2, "-o", output,
                          "--format", "json").stdout)
    assert {(c["size"], c["placement"]) for c in grid} == {
        (size, placement) for size in (20, 40) for placement in ("start", "end", "depth:0.1,0.5,0.9")
    }
    labels = {r.item.params.extra("cell") for r in transcript.read(output).records}
    assert "pairs=40 placement=depth:0.1,0.5,0.9" in labels and len(labels) == 6
    table = cli("sweep", "-m", "oracle", "--pairs", "20,40", "--placement",
                "start,end,depth:0.1,0.5,0.9", "-n", 2, "-o", output).stdout
    header = next(line for line in table.splitlines() if "placement" in line)
    assert header.split() == ["model", "targets", "placement", "20", "40"]


def test_a_bad_placement_is_refused_before_anything_is_asked(cli, tmp_path):
    result = cli("sweep", "-m", "oracle", "--placement", "start,middle", "-o", tmp_path / "p.jsonl",
                 ok=False)
    assert result.exit_code == 1 and "unknown --placement 'middle'" in result.output
    assert not (tmp_path / "p.jsonl").exists()


def test_sequence_tasks_sweep_their_length(cli, tmp_path):
    grid = json.loads(cli("sweep", "-m", "oracle", "--task", "parity", "--length", "16,32", "-n", 2,
                          "-o", tmp_path / "parity.jsonl", "--format", "json").stdout)
    assert {(c["size"], c["width"], c["accuracy"]) for c in grid} == {(16, None, 1.0), (32, None, 1.0)}
    table = cli("sweep", "-m", "oracle", "--task", "parity", "--length", "16,32", "-n", 2,
                "-o", tmp_path / "parity.jsonl").stdout
    assert "parity: accuracy by number of symbols" in table


def test_any_whole_number_option_of_a_family_is_an_axis(cli, tmp_path):
    output = tmp_path / "near.jsonl"
    cli("sweep", "-m", "oracle", "--pairs", "30", "--near-keys", "2,4", "-n", 2, "-o", output)
    labels = {r.item.params.extra("cell") for r in transcript.read(output).records}
    assert labels == {"pairs=30 near_keys=2", "pairs=30 near_keys=4"}
    shown = cli("report", output, "--format", "json").stdout
    assert {row["label"] for row in json.loads(shown)} == {"oracle (near_keys=2)", "oracle (near_keys=4)"}

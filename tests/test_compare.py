"""`qmkar compare`: one table across runs, paired breakdowns, and refusal to pair different questions."""

from __future__ import annotations

import csv
import io
import json
import math
from fractions import Fraction

import pytest

from qmkar.compare import mcnemar_exact
from tests.support.transcripts import values, write_replay


def compare_json(cli, *paths) -> dict:
    return json.loads(cli("compare", "--format", "json", *paths).stdout)


def find_pair(data: dict, a: str, b: str) -> dict:
    (found,) = [p for p in data["paired"] if {p["a"], p["b"]} == {a, b}]
    return found


@pytest.mark.parametrize(
    ("only_a", "only_b", "expected"),
    [
        # Reference values: R's binom.test(x, n, 0.5)$p.value.
        (9, 3, 0.14599609375),  # binom.test(3, 12)
        (6, 14, 0.11531829833984375),  # binom.test(6, 20)
        (14, 0, 2 / 2**14),
        (0, 0, 1.0),
        (1, 1, 1.0),
        (5, 6, 1.0),
    ],
)
def test_mcnemar_exact_matches_the_two_sided_binomial_test(only_a, only_b, expected):
    assert mcnemar_exact(only_a, only_b) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact(only_b, only_a) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("only_a", "only_b"), [
    (1200, 1150),  # near even: summed over the middle between the tails
    (600, 520),
    (1000, 10),  # the tail
    (1074, 0),  # 2**-1073, a subnormal float
    (1076, 0),  # 2**-1075, which rounds to 0.0
    (1200, 3),  # far below the smallest float: 0.0 without summing
    (2000, 1999),  # one apart: 1.0
])
def test_mcnemar_exact_is_the_binomial_tail_rounded_once(only_a, only_b):
    """The definition, summed with math.comb and divided as a Fraction, to the last bit."""
    n, k = only_a + only_b, min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    expected = float(min(Fraction(1), Fraction(2 * tail, 2**n)))
    assert mcnemar_exact(only_a, only_b) == mcnemar_exact(only_b, only_a) == expected


def test_two_models_on_the_same_questions_get_the_paired_breakdown(cli, recall_runs):
    data = compare_json(cli, recall_runs["transcript"])
    pair = find_pair(data, recall_runs["a"], recall_runs["b"])
    assert pair["a"] == recall_runs["a"]  # runs keep the order they were asked in
    assert (pair["n"], pair["both"], pair["only_a"], pair["only_b"], pair["neither"]) == (24, 9, 9, 3, 3)
    assert pair["p_value"] == pytest.approx(0.14599609375)
    assert pair["accuracy_a"] == pytest.approx(18 / 24)
    assert pair["accuracy_b"] == pytest.approx(12 / 24)
    assert pair["note"] == ""
    oracle_a = find_pair(data, "oracle", recall_runs["a"])
    assert (oracle_a["only_a"], oracle_a["only_b"]) == (6, 0)
    assert oracle_a["p_value"] == pytest.approx(2 / 2**6)


def test_the_table_has_a_row_per_model_with_blog_columns(cli, recall_runs):
    data = compare_json(cli, recall_runs["transcript"])
    summaries = {run["label"]: run["summary"] for run in data["runs"]}
    assert list(summaries) == ["oracle", recall_runs["a"], recall_runs["b"]]
    a = summaries[recall_runs["a"]]
    # A dropped the last target on 6 questions, and added another key's value on 2 of them.
    assert (a["correct"], a["fn"], a["fp"]) == (18, 6, 2)
    assert a["outcomes"] == {"true": 18, "fn": 4, "fp": 0, "both": 2}
    assert a["fn_by_position"] == [0, 0, 6]
    assert sum(a["fp_kinds"].values()) == 2
    assert len({run["questions"] for run in data["runs"]}) == 1

    table = cli("compare", recall_runs["transcript"]).output
    for needle in ("qmkar: questions", "qmkar: values", "paired: same questions", "FN-Pos2",
                   "McNemar p", "0.146", recall_runs["b"]):
        assert needle in table


def test_markdown_and_csv_carry_the_same_tables(cli, recall_runs):
    markdown = cli("compare", "--format", "markdown", recall_runs["transcript"]).output
    assert "### qmkar: questions" in markdown
    assert "### paired: same questions, A against B" in markdown
    assert "| task | A | B | n | both | only A | only B | neither |" in markdown

    # One header for the whole stream, numbers as numbers.
    stream = cli("compare", "--format", "csv", recall_runs["transcript"]).stdout
    rows = list(csv.DictReader(io.StringIO(stream)))
    paired = [row for row in rows if row["table"] == "paired: same questions, A against B"]
    row = next(r for r in paired if r["A"] == recall_runs["a"] and r["B"] == recall_runs["b"])
    assert [row[k] for k in ("n", "both", "only A", "only B", "neither")] == ["24", "9", "9", "3", "3"]
    assert round(float(row["McNemar p"]), 3) == 0.146 and float(row["acc A"]) == 0.75


def test_runs_on_different_datasets_are_listed_but_never_paired(cli, recall_runs, tmp_path):
    other = tmp_path / "other.jsonl"
    cli("generate", "-o", other, "-n", 10, "--pairs", 60, "--seed", 8)
    other_run = tmp_path / "other-run.jsonl"
    cli("eval", "-m", "oracle", "--dataset", other, "-o", other_run)

    data = compare_json(cli, recall_runs["transcript"], other_run)
    labels = [run["label"] for run in data["runs"]]
    assert "oracle @ run" in labels and "oracle @ other-run" in labels
    sets = {run["label"]: run["questions"] for run in data["runs"]}
    assert sets["oracle @ run"] != sets["oracle @ other-run"]
    cross = find_pair(data, recall_runs["a"], "oracle @ other-run")
    assert cross["n"] == 0
    assert cross["p_value"] is None
    assert cross["note"].startswith("not paired: no question answered by both")
    table = cli("compare", recall_runs["transcript"], other_run).output
    assert "not paired" in table


def test_same_ids_with_different_content_are_refused(cli, recall_runs, tmp_path):
    # A dataset edited by hand keeps its ids; its questions are no longer the same.
    lines = recall_runs["dataset"].read_text().splitlines()
    edited_item = json.loads(lines[0])
    edited_item["pairs"][0][1] += 1
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join([json.dumps(edited_item), *lines[1:]]) + "\n")
    edited_run = tmp_path / "edited-run.jsonl"
    cli("eval", "-m", "oracle", "--dataset", edited, "-o", edited_run)

    data = compare_json(cli, recall_runs["transcript"], edited_run)
    pair = find_pair(data, "oracle @ run", "oracle @ edited-run")
    assert pair["n"] == 0 and pair["p_value"] is None
    assert "question ids are shared but the questions differ" in pair["note"]


def test_runs_read_without_fingerprints_are_never_paired_as_the_same(recall_runs):
    from qmkar import compare

    runs = compare.load_runs([recall_runs["transcript"]], contents=False)
    assert len(runs) >= 2
    with pytest.raises(ValueError, match="cannot be paired"):
        compare.pair(runs[0], runs[1])
    paired = compare.pair(*compare.load_runs([recall_runs["transcript"]])[:2])
    assert paired.n > 0


def test_questions_only_one_run_answered_are_left_out_and_said_so(cli, recall_runs, tmp_path):
    # C has no answer for the first 4 questions: they are errors (missing), not wrong answers.
    c = write_replay(recall_runs["dataset"], tmp_path / "c.jsonl",
                     lambda i, item: None if i < 4 else values(item))
    run_c = tmp_path / "run-c.jsonl"
    cli("eval", "-m", f"replay:{c}", "--dataset", recall_runs["dataset"], "-o", run_c, code=3)

    data = compare_json(cli, recall_runs["transcript"], run_c)
    pair = find_pair(data, recall_runs["a"], f"replay:{c}")
    # A is wrong on items 0-5, C right on 4-23: on the 20 shared, A wrong on 4, 5 only.
    assert (pair["n"], pair["both"], pair["only_a"], pair["only_b"], pair["neither"]) == (20, 18, 0, 2, 0)
    assert pair["note"] == "shared questions only; left out: 4 more in A"
    summary = next(run["summary"] for run in data["runs"] if run["label"] == f"replay:{c}")
    assert summary["errors"] == 4 and summary["n"] == 20


def test_a_folder_is_read_like_the_transcripts_in_it(cli, recall_runs, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "run.jsonl").write_bytes(recall_runs["transcript"].read_bytes())
    from_folder = compare_json(cli, folder)
    from_file = compare_json(cli, recall_runs["transcript"])
    assert from_folder["paired"] == from_file["paired"]
    assert [r["summary"] for r in from_folder["runs"]] == [r["summary"] for r in from_file["runs"]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.jsonl"], "missing.jsonl does not exist"),
        (["--format", "yaml", "RUN"], "unknown --format 'yaml'"),
        (["EMPTY"], "holds no transcript (*.jsonl) files"),
    ],
)
def test_user_mistakes_give_one_line(cli, recall_runs, tmp_path, args, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [str(recall_runs["transcript"]) if a == "RUN" else str(empty) if a == "EMPTY" else a
            for a in args]
    result = cli("compare", *args, ok=False)
    assert result.exit_code == 1
    assert message in result.output
    assert result.output.startswith("error:") and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_transcript_path_in_labels_when_stems_collide(cli, recall_runs, tmp_path):
    twin = tmp_path / "twin" / "run.jsonl"
    twin.parent.mkdir()
    cli("eval", "-m", "oracle", "--dataset", recall_runs["dataset"], "-o", twin)
    data = compare_json(cli, recall_runs["transcript"], twin)
    labels = {run["label"] for run in data["runs"]}
    assert f"oracle @ {twin}" in labels and f"oracle @ {recall_runs['transcript']}" in labels
    pair = find_pair(data, f"oracle @ {recall_runs['transcript']}", f"oracle @ {twin}")
    assert (pair["n"], pair["both"], pair["p_value"]) == (24, 24, 1.0)



def test_one_model_on_several_tasks_keeps_its_name_and_each_question_set(cli, tmp_path):
    runs = []
    for task, size in (("qmkar", "--pairs"), ("counting", "--length")):
        dataset = tmp_path / f"{task}-ds.jsonl"
        cli("generate", "-t", task, size, 30, "-n", 3, "-o", dataset)
        runs.append(tmp_path / f"{task}-run.jsonl")
        cli("eval", "-m", "oracle", "--dataset", dataset, "-o", runs[-1])
    data = compare_json(cli, *runs)
    assert [(r["label"], r["task"]) for r in data["runs"]] == [("oracle", "qmkar"), ("oracle", "counting")]
    rows = list(csv.reader(io.StringIO(cli("compare", "--format", "csv", *runs).stdout)))
    shown = {row[0]: row[2] for row in rows if row[1] == "oracle"}
    assert shown["qmkar: questions"] == data["runs"][0]["questions"]
    assert shown["counting"] == data["runs"][1]["questions"]
    assert data["runs"][0]["questions"] != data["runs"][1]["questions"]


def test_simulated_memories_compared_on_the_same_questions(cli, tmp_path):
    run = tmp_path / "sim.jsonl"
    cli("eval", "-m", "sim:softmax", "-m", "sim:delta", "-n", 15, "--pairs", 60, "-o", run)
    data = compare_json(cli, run)
    summaries = {r["label"]: r["summary"] for r in data["runs"]}
    pair = find_pair(data, "sim:softmax", "sim:delta")
    assert pair["n"] == 15 and pair["note"] == ""
    assert pair["both"] + pair["only_a"] == summaries["sim:softmax"]["correct"]
    assert pair["both"] + pair["only_b"] == summaries["sim:delta"]["correct"]
    assert pair["p_value"] == pytest.approx(mcnemar_exact(pair["only_a"], pair["only_b"]))
    # The blog's claim, through qmkar: softmax keeps every value, the delta rule does not.
    assert pair["only_a"] > pair["only_b"] and pair["p_value"] < 0.01


def test_a_run_with_no_answers_is_not_paired_and_keeps_its_place(cli, tmp_path):
    nothing = tmp_path / "nothing.jsonl"
    nothing.write_text("")
    parity = tmp_path / "parity-run.jsonl"
    cli("eval", "-m", "oracle", "-m", f"replay:{nothing}", "-t", "parity", "-n", 6, "-o", parity, code=3)
    qmkar = tmp_path / "qmkar-run.jsonl"
    cli("eval", "-m", "oracle", "-n", 2, "--pairs", 20, "-o", qmkar)
    data = compare_json(cli, parity, qmkar)
    pair = find_pair(data, "oracle", f"replay:{nothing}")
    assert pair["n"] == 0
    assert pair["note"] == "not paired: no question answered by both (A answered 6, B 0 of the same 6)"
    parity_cells = [c["model"] for c in data["grid"] if c["task"] == "parity"]
    # Rows keep the order the runs were given, per task, even when a label recurs in another task.
    assert parity_cells == sorted(parity_cells, key=lambda m: m != "oracle")
    assert parity_cells[0] == "oracle" and parity_cells[-1] == f"replay:{nothing}"

"""The command line as a user drives it: eval, report, rescore, generate, errors, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar.ahead import CHUNK
from qmkar.asking import RunStats
from qmkar.cli import app
from qmkar.plans import DatasetPlan, GeneratedPlan
from qmkar.providers.registry import resolve
from qmkar.render import Templates
from qmkar.runner import Run
from qmkar.tasks import make_spec
from qmkar.transcript import Reading, read

SUMMARY_KEYS = {"task", "model", "n", "accuracy", "accuracy_ci", "tp", "fp", "fn",
                "fn_by_position", "outcomes", "fp_kinds", "errors"}


def run(runner: CliRunner, *args: str, code: int = 0):
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result


def report_json(runner: CliRunner, *files: Path) -> list[dict]:
    return json.loads(run(runner, "report", *map(str, files), "--format", "json").stdout)


@pytest.mark.parametrize("task", ["qmkar", "mqar", "counting"])
def test_oracle_scores_everything(runner: CliRunner, tmp_path: Path, task: str) -> None:
    out = tmp_path / "t.jsonl"
    run(runner, "eval", "--model", "oracle", "--task", task, "-n", "6", "--seed", "0", "-o", str(out))
    [summary] = report_json(runner, out)
    assert SUMMARY_KEYS <= set(summary)
    assert (summary["task"], summary["n"], summary["accuracy"], summary["errors"]) == (task, 6, 1.0, 0)
    assert set(summary["outcomes"]) == {"true", "fn", "fp", "both"}
    if task == "counting":
        assert summary["exact"] == 6 and summary["mae"] == 0
    else:
        assert summary["fn"] == 0 and summary["fp"] == 0 and len(summary["fn_by_position"]) == 3


def test_blog_dataset_with_oracle(runner: CliRunner, tmp_path: Path, blog_dir: Path) -> None:
    out = tmp_path / "blog.jsonl"
    run(runner, "eval", "-m", "oracle", "--dataset", str(blog_dir / "qmkar_problems.json"), "-o", str(out))
    reading = Reading(out)
    records = list(reading)
    assert len(records) == 100 and len({r.item.id for r in records}) == 100
    [summary] = report_json(runner, out)
    assert summary["accuracy"] == 1.0 and summary["n"] == 100
    problem = json.loads((blog_dir / "qmkar_problems.json").read_text())[0]
    assert reading.prompt(records[0])[0]["content"] == problem["kv_pairs"] + "\n\n" + problem["question"]


def test_replay_scores_answers_in_many_shapes(runner: CliRunner, tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    run(runner, "generate", "--task", "qmkar", "-n", "5", "--seed", "1", "-o", str(dataset))
    items = [json.loads(line) for line in dataset.read_text().splitlines()]
    a, b, c = (items[0]["expected"], items[1]["expected"], items[2]["expected"])
    key = items[1]["query"][0]
    wrong = next(v for k, v in items[2]["pairs"] if k != items[2]["query"][0])
    answers = [
        {"id": items[0]["id"], "answer": f"<think>hmm 1111</think>**{a[0]}**, {a[1]:,}, {a[2]}"},
        {"id": items[1]["id"], "answer": f"k: {key}, v: {b[1]}\nk: {key}, v: {b[2]}"},
        {"id": items[2]["id"], "answer": f"The values are {c[0]}, {c[1]}, {c[2]} and {wrong}."},
        {"id": items[3]["id"], "answer": "I'm sorry, I cannot answer that."},
    ]  # items[4] has no answer: it must be reported missing, not guessed
    replay = tmp_path / "answers.jsonl"
    replay.write_text("".join(json.dumps(x) + "\n" for x in answers))
    out = tmp_path / "t.jsonl"
    # One question has no answer in the file: a permanent error, so the run exits 3.
    run(runner, "eval", "-m", f"replay:{replay}", "--dataset", str(dataset), "-o", str(out), code=3)
    [s] = report_json(runner, out)
    assert (s["n"], s["correct"], s["errors"], s["errors_by_kind"]) == (4, 1, 1, {"missing": 1})
    assert (s["tp"], s["fp"], s["fn"]) == (3 + 2 + 3, 1, 1 + 3)
    assert s["fn_by_position"] == [2, 1, 1]
    assert s["outcomes"] == {"true": 1, "fn": 2, "fp": 1, "both": 0}
    assert s["refused"] == 1


def test_rerun_resumes_without_duplicates(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    run(runner, "eval", "-m", "oracle", "-n", "4", "-o", str(out))
    result = run(runner, "eval", "-m", "oracle", "-n", "6", "-o", str(out))
    assert "4 of 6 already answered" in result.output
    ids = [r.item.id for r in read(out).records]
    assert len(ids) == 6 == len(set(ids))


def test_a_resume_starts_after_the_questions_answered_first(runner: CliRunner, tmp_path: Path) -> None:
    """A resume names the plan's questions once (the outline, two processes making it) and
    hands the send loop only the chunks (ahead.CHUNK questions) not answered whole: those are
    counted as skipped, never generated again. The transcript ends as a fresh run's."""
    out, fresh = tmp_path / "t.jsonl", tmp_path / "fresh.jsonl"
    run(runner, "eval", "-m", "oracle", "-n", "300", "--pairs", "20", "-o", str(fresh))
    run(runner, "eval", "-m", "oracle", "-n", "200", "--pairs", "20", "-o", str(out))
    plan = GeneratedPlan(make_spec("qmkar", pairs=20), 300, 0)
    provider = resolve("oracle")
    resumed = Run(plan, [provider], out, Templates(), {})
    assert resumed.already_answered(provider) == 200
    outline = list(resumed.outline())
    assert [q.id for q in outline] == [item.id for item in plan.items()]
    assert len({id(q.params) for q in outline}) == 1  # equal params, one object
    stats = RunStats(item_ids=set())
    to_ask = [item.id for item in resumed._to_ask(provider, stats)]
    assert CHUNK == 32  # chunks 0-191 answered whole; 192-223 holds 8 answered, made again
    assert to_ask == [q.id for q in outline[192:]]
    assert stats.skipped == {"oracle": 192} and stats.item_ids == {q.id for q in outline[:192]}
    result = run(runner, "eval", "-m", "oracle", "-n", "300", "--pairs", "20", "-o", str(out))
    assert "200 of 300 already answered" in result.output
    ids = [r.item.id for r in read(out).records]
    assert len(ids) == 300 == len(set(ids))
    assert report_json(runner, out) == report_json(runner, fresh)


def test_a_resume_makes_only_the_chunks_with_questions_left(runner: CliRunner, tmp_path: Path) -> None:
    """Questions left unanswered here and there (their answers gone) are asked again without
    the chunks answered whole between them being generated again."""
    out, fresh = tmp_path / "t.jsonl", tmp_path / "fresh.jsonl"
    run(runner, "eval", "-m", "oracle", "-n", "300", "--pairs", "20", "-o", str(fresh))
    plan = GeneratedPlan(make_spec("qmkar", pairs=20), 300, 0)
    ids = [item.id for item in plan.items()]
    left = {ids[5], ids[250], ids[299]}
    out.write_text("".join(line for line in fresh.read_text().splitlines(keepends=True)
                           if not ('"kind":"answer"' in line and json.loads(line)["item_id"] in left)))
    provider = resolve("oracle")
    resumed = Run(plan, [provider], out, Templates(), {})
    assert resumed.already_answered(provider) == 297
    stats = RunStats(item_ids=set())
    made = [item.id for item in resumed._to_ask(provider, stats)]
    assert made == ids[0:32] + ids[224:256] + ids[288:300]  # the three chunks with a question left
    assert stats.skipped == {"oracle": 300 - len(made)} and stats.item_ids == set(ids) - set(made)
    result = run(runner, "eval", "-m", "oracle", "-n", "300", "--pairs", "20", "-o", str(out))
    assert "297 of 300 already answered" in result.output
    assert sorted(r.item.id for r in read(out).records) == sorted(ids)
    assert report_json(runner, out) == report_json(runner, fresh)


def test_a_resume_of_a_dataset_reads_it_only_to_check_it_and_only_the_chunks_with_questions_left(
        runner: CliRunner, tmp_path: Path, monkeypatch) -> None:
    """A dataset's outline is kept by its plan from the pass that checks the file, as a
    generated plan's is kept: naming the questions reads nothing more, each model's count and
    each send loop use it, and the send loop reads only the items of the chunks with a
    question left (none at all when every question is answered)."""
    from qmkar.tasks import datasets

    dataset, out, fresh = tmp_path / "d.jsonl", tmp_path / "t.jsonl", tmp_path / "fresh.jsonl"
    run(runner, "generate", "-o", str(dataset), "-n", "300", "--pairs", "20")
    run(runner, "eval", "-m", "oracle", "--dataset", str(dataset), "-o", str(fresh))
    plan = DatasetPlan(dataset)
    ids = [item.id for item in plan.items()]
    left = {ids[5], ids[250]}
    out.write_text("".join(line for line in fresh.read_text().splitlines(keepends=True)
                           if not ('"kind":"answer"' in line and json.loads(line)["item_id"] in left)))
    readings: list[int] = []
    original = datasets._raw_items

    def counted(*args, **kwargs):
        readings.append(1)
        yield from original(*args, **kwargs)

    monkeypatch.setattr(datasets, "_raw_items", counted)
    provider = resolve("oracle")
    resumed = Run(plan, [provider], out, Templates(), {})
    readings.clear()  # the run has read its plan's first item
    resumed.name_questions(None)
    assert readings == [] and [q.id for q in resumed.outline()] == ids
    assert resumed.already_answered(provider) == 298 and readings == []
    stats = RunStats(item_ids=set())
    made = [item.id for item in resumed._to_ask(provider, stats)]
    assert made == ids[0:32] + ids[224:256]  # the two chunks with a question left
    assert stats.skipped == {"oracle": 300 - len(made)} and stats.item_ids == set(ids) - set(made)
    result = run(runner, "eval", "-m", "oracle", "--dataset", str(dataset), "-o", str(out))
    assert "298 of 300 already answered" in result.output
    assert sorted(r.item.id for r in read(out).records) == sorted(ids)
    assert report_json(runner, out) == report_json(runner, fresh)
    answered = Run(plan, [provider], out, Templates(), {})
    answered.name_questions(None)
    readings.clear()  # its first item, and the outline
    assert list(answered._to_ask(provider, RunStats(item_ids=set()))) == [] and readings == []


def test_torn_last_line_is_reported_and_the_run_completes(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    run(runner, "eval", "-m", "oracle", "-n", "3", "-o", str(out))
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:2]) + lines[2][:100])  # a crash mid-write of the third
    result = run(runner, "eval", "-m", "oracle", "-n", "3", "-o", str(out))
    assert "unfinished line" in result.output
    ids = [r.item.id for r in read(out).records]
    assert len(ids) == 3 == len(set(ids))
    assert report_json(runner, out)[0]["n"] == 3


def test_a_file_without_answers_among_others_is_left_out_with_a_warning(runner: CliRunner,
                                                                         tmp_path: Path) -> None:
    """A run stopped before its first answer leaves a transcript of a run line and a template:
    compare and report say it added nothing rather than show the other file's run alone."""
    out = tmp_path / "t.jsonl"
    run(runner, "eval", "-m", "oracle", "-n", "3", "-o", str(out))
    stopped, empty = tmp_path / "stopped.jsonl", tmp_path / "empty.jsonl"
    stopped.write_text("".join(out.read_text().splitlines(keepends=True)[:2]))
    empty.write_text("")
    alone = run(runner, "compare", str(out), "--format", "json").stdout
    for command in ("compare", "report"):
        result = run(runner, command, str(out), str(stopped), str(empty), "--format", "json")
        assert f"{stopped}: holds no answers; left out" in result.stderr
        assert f"{empty}: holds no answers; left out" in result.stderr
        assert f"{out}:" not in result.stderr
    assert result.stdout == run(runner, "report", str(out), "--format", "json").stdout
    assert run(runner, "compare", str(out), str(empty), "--format", "json").stdout == alone
    # Alone, a file without answers is still the error it was, with no warning besides.
    result = run(runner, "report", str(empty), code=1)
    assert "no transcript records in" in result.stderr and "left out" not in result.stderr


def test_several_models_in_one_eval(runner: CliRunner, tmp_path: Path) -> None:
    replay = tmp_path / "none.jsonl"
    replay.write_text("")
    out = tmp_path / "t.jsonl"
    # The replay file answers nothing: three permanent errors, so the run exits 3.
    result = run(runner, "eval", "-m", "oracle", "-m", f"replay:{replay}", "-n", "3", "-o", str(out), code=3)
    assert "oracle" in result.stdout and "replay:" in result.stdout
    by_model = {s["model"]: s for s in report_json(runner, out)}
    assert by_model["oracle"]["accuracy"] == 1.0
    assert by_model[f"replay:{replay}"]["errors"] == 3


def test_rescore_writes_a_new_file_and_never_overwrites_silently(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    run(runner, "eval", "-m", "oracle", "--task", "counting", "-n", "3", "-o", str(out))
    # Pretend the stored scores came from an older, broken parser.
    records = out.read_text().splitlines()
    broken = []
    for line in records:
        record = json.loads(line)
        if record.get("kind") == "answer":
            record["parsed"]["values"] = [0]
            record["score"]["correct"] = False
        broken.append(json.dumps(record))
    out.write_text("\n".join(broken) + "\n")
    before = out.read_bytes()
    # report does not trust grades that do not follow from the answers: it grades them again
    reported = run(runner, "report", str(out), "--format", "json")
    assert json.loads(reported.stdout)[0]["correct"] == 3
    assert "3 answer(s) have a stored score that does not follow" in reported.stderr
    result = run(runner, "rescore", str(out), "-o", str(out), code=1)
    assert "pass --force" in result.output and out.read_bytes() == before
    new = tmp_path / "new.jsonl"
    run(runner, "rescore", str(out), "-o", str(new))
    assert out.read_bytes() == before
    assert report_json(runner, new)[0]["correct"] == 3
    run(runner, "rescore", str(out), "-o", str(out), "--force")
    assert report_json(runner, out)[0]["correct"] == 3


def test_generate_is_reproducible(runner: CliRunner, tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path in (a, b):
        run(runner, "generate", "--task", "counting", "-n", "3", "--seed", "7", "-o", str(path))
    assert a.read_bytes() == b.read_bytes()
    first = json.loads(a.read_text().splitlines()[0])
    assert {"id", "task", "expected", "target_positions"} <= set(first)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["eval", "-m", "nonsense"], "Known providers"),
        (["eval", "-m", "oracle", "--pairs", "2", "--targets", "3"], "cannot exceed"),
        (["eval", "-m", "oracle", "-n", "0"], "-n must be at least 1"),
        (["eval", "-m", "oracle", "--dataset", "no/such.jsonl"], "does not exist"),
        (["eval", "-m", "oracle", "--template", "no/such.txt"], "does not exist"),
        (["eval", "-m", "replay"], "replay needs a file"),
        (["eval", "-m", "oracle", "--format", "xml"], "unknown --format"),
        (["report", "no/such.jsonl"], "does not exist"),
        (["eval", "-m", "oracle", "--task", "mqar", "--dataset", "{qmkar_dataset}"],
         "does not match the dataset"),
        (["generate", "--task", "counting", "--pairs", "3", "-o", "x.jsonl"], "does not apply"),
    ],
)
def test_user_mistakes_give_one_line_and_no_traceback(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], fragment: str
) -> None:
    monkeypatch.chdir(tmp_path)
    if "{qmkar_dataset}" in args:  # a qmkar dataset made here, so no file outside the repo is needed
        run(runner, "generate", "-n", "2", "--pairs", "10", "-o", "qmkar.jsonl")
        args = [arg.replace("{qmkar_dataset}", "qmkar.jsonl") for arg in args]
    result = run(runner, *args, code=1)
    assert fragment in result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(
        result.exception, SystemExit)
    assert len(result.output.strip().splitlines()) == 1


def test_report_of_a_file_that_is_not_a_transcript(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"hello": 1}\n{"world": 2}\n')
    result = run(runner, "report", str(path), code=1)
    assert "line 1 is not a qmkar transcript record" in result.output


@pytest.mark.slow
def test_kill_9_then_rerun_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """A real process killed mid-run with SIGKILL, then the same command again."""
    out = tmp_path / "t.jsonl"
    command = [sys.executable, "-m", "qmkar", "eval", "-m", "oracle", "-n", "3000",
               "--concurrency", "4", "-o", str(out)]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 400_000):
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    written = read(out)
    assert 0 < len(written.records) < 3000, "the kill must land mid-run"
    finished = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    ids = [r.item.id for r in read(out).records]
    assert len(ids) == 3000 == len(set(ids))
    assert f"{len(written.records)} of 3000 already answered" in finished.stderr


@pytest.mark.slow
def test_ctrl_c_keeps_answers_and_prints_the_resume_command(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    command = [sys.executable, "-m", "qmkar", "eval", "-m", "oracle", "-n", "3000", "-o", str(out)]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 400_000):
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "resume with: qmkar eval -m oracle -n 3000" in stderr
    assert "Traceback" not in stderr
    contents = read(out)
    assert contents.torn_bytes == 0 and 0 < len(contents.records) < 3000


@pytest.mark.parametrize("args", [
    ["generate", "-n", "2", "-o", "-"],
    ["eval", "-m", "oracle", "-n", "2", "--output=-"],
    ["rescore", "{t}", "-o-"],
    ["report", "{t}", "--format", "html", "-o", "-"],
    ["plot", "{t}", "--output", "-"],
    ["export", "{t}", "--format", "eee", "-o", "-"],
    ["sweep", "-m", "oracle", "--pairs", "10,20", "-n", "2", "-o", "-"],
])
def test_dash_is_no_output_name(runner: CliRunner, tmp_path: Path, monkeypatch, args: list[str]) -> None:
    # Many tools read `-o -` as standard output; qmkar writes files and folders, and made one
    # named "-" instead.
    transcript = tmp_path / "t.jsonl"
    run(runner, "eval", "-m", "oracle", "-n", "2", "-o", str(transcript))
    monkeypatch.chdir(tmp_path)
    result = run(runner, *[arg.format(t=transcript) for arg in args], code=2)
    assert "'-' is not standard output here" in result.output and len(result.output.splitlines()) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t.jsonl"]

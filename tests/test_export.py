"""Export to the viewers researchers already use: inspect_ai logs and Every Eval Ever records."""

from __future__ import annotations

import hashlib
import json
import math
import re
import signal
import subprocess
from pathlib import Path

import pytest

from qmkar.transcript import read
from tests.support.processes import qmkar_limited_to


@pytest.fixture
def exported_run(cli, tmp_path) -> Path:
    """oracle and a replay model that answers 4 of 6 questions (2 wrong), sampled twice."""
    dataset = tmp_path / "d.jsonl"
    cli("generate", "-n", 6, "--pairs", 20, "-o", dataset)
    items = [json.loads(line) for line in dataset.read_text().splitlines()]
    replay = tmp_path / "answers.jsonl"
    answers = [", ".join(map(str, item["expected"][: 3 if i < 2 else 2])) for i, item in enumerate(items[:4])]
    replay.write_text("".join(json.dumps({"id": item["id"], "answer": answer}) + "\n"
                              for item, answer in zip(items, answers, strict=False)))
    run = tmp_path / "run.jsonl"
    cli("eval", "-m", "oracle", "-m", f"replay:{replay}", "--dataset", dataset, "-o", run, code=3)
    return run


def test_inspect_logs_read_back_with_inspect_ais_own_reader(cli, exported_run, tmp_path):
    log_module = pytest.importorskip("inspect_ai.log")
    folder = tmp_path / "logs"
    written = cli("export", exported_run, "--format", "inspect", "-o", folder).output
    paths = sorted(folder.glob("*.eval"))
    assert len(paths) == 2 and all(str(p) in written.replace("\n", "") for p in paths)
    records = read(exported_run).records
    for path in paths:
        log = log_module.read_eval_log(str(path))
        assert log.status == "success"
        model = "oracle" if "oracle" in log.eval.model else "replay"
        mine = [r for r in records if r.condition.provider == model]
        assert len(log.samples) == len(mine) == 6
        scores = {s.name: s.metrics for s in log.results.scores}
        answered = [r for r in mine if r.score is not None]
        assert scores["correct"]["accuracy"].value == pytest.approx(
            sum(r.correct for r in answered) / len(answered))
        assert scores["fn"]["sum"].value == sum(r.score.fn for r in answered)
        by_id = {(s.id, s.epoch): s for s in log.samples}
        for record in mine:
            sample = by_id[(record.item_id, 1)]
            assert sample.target == [str(v) for v in record.item.expected]
            assert sample.metadata["length"] == 20
            assert sample.metadata["positions"] == record.item.target_positions
            if record.error is None:
                value = sample.scores["qmkar"].value
                assert value == {"tp": record.score.tp, "fp": record.score.fp, "fn": record.score.fn,
                                 "correct": int(record.correct)}
                assert sample.output.completion == record.answer
            else:
                assert sample.error is not None and "missing" in sample.error.message and not sample.scores
        header = log_module.read_eval_log(str(path), header_only=True)
        assert header.samples is None and header.eval.task == "qmkar/qmkar"


def test_inspect_log_of_a_run_where_every_question_errored_says_error_and_has_no_accuracy(cli, tmp_path):
    """A replay file with no answer for any question: nothing was scored, so the log has no
    accuracy (not 0%), and inspect shows the run as failed, not successful."""
    log_module = pytest.importorskip("inspect_ai.log")
    dataset = tmp_path / "d.jsonl"
    cli("generate", "-n", 3, "--pairs", 20, "-o", dataset)
    replay = tmp_path / "answers.jsonl"
    replay.write_text(json.dumps({"id": "not-in-the-dataset", "answer": "1"}) + "\n")
    run = tmp_path / "run.jsonl"
    cli("eval", "-m", f"replay:{replay}", "-m", "oracle", "--dataset", dataset, "-o", run, code=3)
    folder = tmp_path / "logs"
    cli("export", run, "--format", "inspect", "-o", folder)
    logs = {("oracle" if "oracle" in log.eval.model else "replay"): log
            for log in map(log_module.read_eval_log, map(str, folder.glob("*.eval")))}
    failed, fine = logs["replay"], logs["oracle"]
    assert failed.status == "error" and "3 samples ended in an error" in failed.error.message
    assert failed.results.completed_samples == 0 and failed.results.scores == []
    assert len(failed.samples) == 3 and all(s.error is not None for s in failed.samples)
    assert fine.status == "success" and fine.error is None
    assert {s.name: s.metrics for s in fine.results.scores}["correct"]["accuracy"].value == 1.0


UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_every_eval_ever_records_keep_the_layout_and_fields_its_checker_requires(cli, exported_run, tmp_path):
    out = tmp_path / "eee"
    cli("export", exported_run, "--format", "eee", "-o", out, "--organization", "a lab")
    aggregates = sorted(out.glob("data/*/*/*/*.json"))
    assert len(aggregates) == 2
    for path in aggregates:
        assert UUID4.match(path.stem) and path.parts[-5] == "data"
        record = json.loads(path.read_text())
        sidecar = path.with_name(f"{path.stem}_samples.jsonl")
        body = sidecar.read_bytes()
        lines = [json.loads(line) for line in body.decode().splitlines()]
        detail = record["detailed_evaluation_results"]
        assert detail["file_path"] == sidecar.relative_to(out).as_posix()
        assert detail["total_rows"] == len(lines) and detail["checksum"] == hashlib.sha256(body).hexdigest()
        assert record["schema_version"] == "0.3.0" and record["retrieved_timestamp"].isdigit()
        assert record["source_metadata"]["source_organization_name"] == "a lab"
        assert record["source_metadata"]["source_type"] == "evaluation_run"
        assert set(record["model_info"]["additional_details"]) == {"deployment_type", "model_availability"}
        (result,) = record["evaluation_results"]
        score = result["score_details"]["score"]
        assert result["metric_config"]["lower_is_better"] is False
        assert 0 <= score <= 1 and math.isfinite(score)
        interval = result["score_details"]["uncertainty"]["confidence_interval"]
        assert interval["lower"] <= score <= interval["upper"]
        assert all(isinstance(v, str) for v in result["score_details"]["details"].values())
        assert score == pytest.approx(sum(line["evaluation"]["is_correct"] for line in lines) / len(lines))
        for line in lines:
            assert line["evaluation_id"] == record["evaluation_id"]
            assert line["model_id"] == record["model_info"]["id"]
            assert line["interaction_type"] == "single_turn" and line["messages"] is None
            assert all(isinstance(v, str) for v in line["input"]["reference"] + line["output"]["raw"])
            assert all(isinstance(v, str) for v in line["metadata"].values())
    # The replay model left two questions unanswered: not sample lines, but counted as errors.
    details = [json.loads(p.read_text())["evaluation_results"][0]["score_details"]["details"]
               for p in aggregates]
    assert sorted(d["errors"] for d in details) == ["0", "2"]


def test_export_refuses_what_it_cannot_write(cli, exported_run, tmp_path):
    wrong = cli("export", exported_run, "--format", "parquet", "-o", tmp_path / "x", ok=False)
    assert wrong.exit_code == 1 and "unknown --format 'parquet'" in wrong.output


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="file size limits are POSIX")
def test_a_full_disk_while_writing_an_inspect_log_is_one_error_and_leaves_no_file(exported_run, tmp_path):
    # inspect_ai's zip writer, left open by the failed write, failed again when collected and
    # printed that as a traceback after qmkar's own error line.
    pytest.importorskip("inspect_ai.log")
    out = tmp_path / "logs"
    done = subprocess.run([*qmkar_limited_to(4_000), "export", str(exported_run), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "error: cannot write" in done.stderr and "File too large" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert not any(out.iterdir())

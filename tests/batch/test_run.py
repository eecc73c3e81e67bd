"""`qmkar eval --batch` through the real openai and anthropic SDKs against a batch server on
127.0.0.1: whole runs, --no-wait then collect, partial failures, expiry, cancel, flaky
status calls, splitting, a lost submit reply, and endpoints without a batch API."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar.batch.state import BatchState, state_path
from qmkar.cli import app
from qmkar.providers import openai as openai_provider
from qmkar.providers.base import BatchLimits
from qmkar.transcript import latest, read
from tests.support.batchserver import batch_args, right_answer

runner = CliRunner()
MODELS = ["openai:gpt-4o", "anthropic:claude-3-5-sonnet-20241022"]


def invoke(*args: str, code: int = 0):
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, f"{result.output}\n{result.exception!r}"
    return result


def answered_once(out: Path, n: int) -> None:
    """Every question has exactly one answer, and it is right."""
    records = read(out).records
    answers = Counter(r.item_id for r in records if r.answered)
    assert len(answers) == n and set(answers.values()) == {1}
    assert all(r.correct for r in latest(records).values())


@pytest.mark.parametrize("model", MODELS)
def test_a_whole_run_is_one_batch_of_right_answers(batch_server, keyed, tmp_path, model):
    out = tmp_path / "t.jsonl"
    result = invoke(*batch_args(batch_server, out, model=model, n=40))
    (batch,) = batch_server.created()
    assert len(batch.requests) == 40
    records = read(out).records
    assert len(records) == 40 and all(r.answered and r.correct for r in records)
    assert {r.extra["batch"] for r in records} == {batch.id}
    assert all(len(r.attempts) == 1 for r in records)
    assert "40 of 40 done" in result.output and "100.0%" in result.output
    # The output came back shuffled and was matched by custom_id: every answer is its own.
    order = [line["custom_id"] for line in batch.output]
    assert order != sorted(order, key=lambda c: int(c.rsplit("-", 1)[1]))
    state = BatchState(state_path(out))
    (kept,) = state.batches.values()
    assert kept.batch_id == batch.id and kept.collected is not None and kept.collected.answered == 40
    assert keyed not in state_path(out).read_text()  # the variable's name is kept, never the key
    # The same command again asks nothing and submits nothing.
    again = invoke(*batch_args(batch_server, out, model=model, n=40))
    assert len(batch_server.created()) == 1 and "resuming" in again.output
    assert len(read(out).records) == 40


def test_openai_batches_are_files_of_chat_completions(batch_server, keyed, tmp_path):
    invoke(*batch_args(batch_server, tmp_path / "t.jsonl", "--max-tokens", "50", n=5))
    (upload,) = batch_server.uploads
    assert upload["purpose"] == "batch" and upload["filename"].endswith(".jsonl")
    (batch,) = batch_server.created()
    assert batch.fields["endpoint"] == "/v1/chat/completions"
    assert batch.fields["metadata"]["qmkar_submission"].startswith("qb")
    line = batch.requests[0]
    assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
    assert line["body"]["model"] == "gpt-4o" and line["body"]["max_tokens"] == 50
    assert line["body"]["temperature"] == 0.0 and line["body"]["seed"] == 0


def test_anthropic_batches_carry_the_messages_parameters(batch_server, keyed, tmp_path):
    invoke(*batch_args(batch_server, tmp_path / "t.jsonl", model="claude-3-5-sonnet-20241022", n=5))
    (batch,) = batch_server.created()
    params = batch.requests[0]["params"]
    assert params["model"] == "claude-3-5-sonnet-20241022" and params["max_tokens"] == 1024
    assert params["temperature"] == 0.0 and "extra_body" not in params
    assert ("GET", f"/v1/messages/batches/{batch.id}/results") in batch_server.requests


def test_batch_answers_share_the_condition_of_answers_asked_one_by_one(batch_server, keyed, tmp_path):
    """A batch answer and an ordinary answer of the same question are one condition: the
    same transcript resumes either way and reports pool them."""
    out = tmp_path / "t.jsonl"
    invoke(*batch_args(batch_server, out, "--no-cache", n=10))
    plain = ["eval", "-m", "openai:gpt-4o", "-n", "20", "--pairs", "10", "-o", str(out), "--no-cache",
             "--base-url", batch_server.base_url, "--api-key-env", "FAKE_API_KEY"]
    result = invoke(*plain)
    assert "resuming openai:gpt-4o: 10 of 20 already answered" in result.output
    assert batch_server.requests.count(("POST", "/v1/chat/completions")) == 10
    records = read(out).records
    assert len({r.condition_id for r in records}) == 1
    assert sum(1 for r in records if "batch" in r.extra) == 10
    (row,) = json.loads(invoke("report", str(out), "--format", "json").output)  # pooled in one row
    assert row["n"] == 20 and row["accuracy"] == 1.0
    invoke(*batch_args(batch_server, out, n=20))
    assert len(batch_server.created()) == 1  # nothing left to submit
    answered_once(out, 20)


def test_no_wait_submits_then_the_same_command_collects(batch_server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    submitted = invoke(*batch_args(batch_server, out, "--no-wait", n=12))
    assert "running at the provider" in submitted.output and "collect with:" in submitted.output
    assert "qmkar batch status" in submitted.output
    assert not out.exists() or not read(out).records
    (batch,) = batch_server.created()
    assert batch.polls == 0  # submitted, never waited for
    still = invoke(*batch_args(batch_server, out, "--no-wait", n=12))  # checks once, submits nothing
    assert len(batch_server.created()) == 1 and "running at the provider" in still.output
    invoke(*batch_args(batch_server, out, n=12))
    assert len(batch_server.created()) == 1
    answered_once(out, 12)


def test_asking_one_by_one_what_a_live_batch_holds_is_warned_about(batch_server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    invoke(*batch_args(batch_server, out, "--no-wait", n=4))
    batch_only = ("--batch", "--batch-poll", "0.01")
    plain = [arg for arg in batch_args(batch_server, out, n=4) if arg not in batch_only]
    said = " ".join(invoke(*plain).output.split())
    assert "4 questions of these models are in batches still running at the provider" in said
    assert "pays for them twice" in said


@pytest.mark.parametrize("model", MODELS)
def test_failed_requests_are_errors_and_the_next_run_resubmits_only_them(batch_server, keyed, tmp_path,
                                                                         model):
    failing: set[str] = set()  # the right answers of the questions whose requests fail
    batch_server.request_fault = lambda body: "500" if right_answer(body["messages"]) in failing else None
    out = tmp_path / "t.jsonl"
    first = invoke(*batch_args(batch_server, out, "--no-wait", model=model, n=40))
    (batch,) = batch_server.created()
    key = "body" if model.startswith("openai") else "params"
    failing.update(right_answer(r[key]["messages"]) for r in batch.requests[::5])  # 8 of 40
    assert len(failing) == 8 and "running at the provider" in first.output
    result = invoke(*batch_args(batch_server, out, model=model, n=40), code=3)
    assert "may pass if asked again" in result.output
    records = read(out).records
    errors = [r for r in records if r.error is not None]
    assert len(records) == 40 and len(errors) == 8
    assert {r.error.kind for r in errors} == {"http_500"} and not any(r.error.permanent for r in errors)
    assert len(batch_server.created()) == 1  # failures wait for the next run
    batch_server.request_fault = None
    invoke(*batch_args(batch_server, out, model=model, n=40))
    first_batch, retry = batch_server.created()
    assert len(retry.requests) == 8
    answered_once(out, 40)


def test_requests_refused_for_good_are_not_submitted_again(batch_server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    batch_server.request_fault = lambda body: "400"
    result = invoke(*batch_args(batch_server, out, n=5), code=3)
    assert "cannot be fixed by asking again" in result.output
    assert all(r.error.permanent for r in read(out).records)
    invoke(*batch_args(batch_server, out, n=5), code=3)
    assert len(batch_server.created()) == 1


@pytest.mark.parametrize("model", MODELS)
def test_an_expired_batch_keeps_its_answers_and_the_rest_are_resubmitted(batch_server, keyed, tmp_path,
                                                                         model):
    out = tmp_path / "t.jsonl"
    batch_server.expire_keep = 25
    invoke(*batch_args(batch_server, out, model=model, n=40), code=3)
    records = read(out).records
    assert sum(r.answered for r in records) == 25
    expired = [r for r in records if r.error is not None]
    assert len(expired) == 15 and {r.error.kind for r in expired} == {"batch_expired"}
    assert "expired" in expired[0].error.message
    batch_server.expire_keep = None
    invoke(*batch_args(batch_server, out, model=model, n=40))
    assert [len(b.requests) for b in batch_server.created()] == [40, 15]
    answered_once(out, 40)


@pytest.mark.parametrize("model", MODELS)
def test_status_calls_that_fail_now_and_then_do_not_stop_a_run(batch_server, keyed, tmp_path, model):
    batch_server.status_fault_every = 2
    batch_server.ends_after = 4
    out = tmp_path / "t.jsonl"
    invoke(*batch_args(batch_server, out, model=model, n=10))
    assert batch_server.status_calls >= 8  # half of them failed and were asked again
    answered_once(out, 10)


@pytest.mark.parametrize("model", MODELS)
def test_a_status_outage_longer_than_the_retries_is_waited_out(batch_server, keyed, tmp_path, model):
    """Twelve failures in a row, with one retry per check: each poll's check gives up, the
    run keeps polling, and collects when the status endpoint answers again."""
    batch_server.status_outage = 12
    batch_server.ends_after = 2
    out = tmp_path / "t.jsonl"
    invoke(*batch_args(batch_server, out, "--max-retries", "1", model=model, n=10))
    assert batch_server.status_outage == 0 and len(batch_server.created()) == 1
    answered_once(out, 10)


def test_one_batchs_status_outage_is_timed_on_its_own(batch_server, keyed, tmp_path, monkeypatch):
    """Two batches, the second's status endpoint down for good: the first's answers do not
    restart the second's outage clock, so the wait ends once that outage passes the limit."""
    from qmkar.batch import run as batch_run

    monkeypatch.setattr(openai_provider, "BATCH_LIMITS", BatchLimits(requests=5, bytes=10**9))
    monkeypatch.setattr(batch_run, "BATCH_STATUS_OUTAGE", 0.5)
    batch_server.status_down = 1
    # The first batch ends only after many checks, each a success: with one clock for all
    # batches they kept restarting the second's outage until the first was collected.
    batch_server.ends_after = 300
    out = tmp_path / "t.jsonl"
    result = invoke(*batch_args(batch_server, out, "--max-retries", "0", n=10), code=3)
    assert len(batch_server.created()) == 2
    assert "stopped asking openai:gpt-4o: HTTP 503: this batch's status is down" in result.output
    assert batch_server.created()[0].polls < 300  # given up before the first batch ended
    assert not [r for r in read(out).records if r.answered]


@pytest.mark.parametrize("model", MODELS)
def test_cancel_keeps_what_the_batch_finished(batch_server, keyed, tmp_path, model):
    out = tmp_path / "t.jsonl"
    invoke(*batch_args(batch_server, out, "--no-wait", model=model, n=10))
    cancelled = invoke("batch", "cancel", str(out))
    (batch,) = batch_server.created()
    assert f"cancelling {batch.id}" in cancelled.output
    invoke(*batch_args(batch_server, out, model=model, n=10), code=3)
    records = read(out).records
    assert sum(r.answered for r in records) == 5
    assert {r.error.kind for r in records if r.error} == {"batch_cancelled"}
    with pytest.raises(AssertionError):  # nothing is running any more
        invoke("batch", "cancel", str(out))


def test_a_batch_refused_whole_is_submitted_again_by_the_next_run(batch_server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    batch_server.refuse_with = "token_limit_exceeded"
    result = invoke(*batch_args(batch_server, out, n=6), code=3)
    assert "Enqueued token limit reached for gpt-4o" in " ".join(result.output.split())
    records = read(out).records
    assert len(records) == 6 and {r.error.kind for r in records} == {"batch_failed"}
    batch_server.refuse_with = None
    invoke(*batch_args(batch_server, out, n=6))
    assert [len(b.requests) for b in batch_server.created()] == [6, 6]
    answered_once(out, 6)


def test_batches_split_at_the_providers_limits(batch_server, keyed, tmp_path, monkeypatch):
    monkeypatch.setattr(openai_provider, "BATCH_LIMITS", BatchLimits(requests=15, bytes=10**9))
    out = tmp_path / "t.jsonl"
    invoke(*batch_args(batch_server, out, n=40))
    assert [len(b.requests) for b in batch_server.created()] == [15, 15, 10]
    one_line = len(json.dumps(batch_server.created()[0].requests[0], separators=(",", ":"))) + 1
    monkeypatch.setattr(openai_provider, "BATCH_LIMITS", BatchLimits(requests=50_000, bytes=one_line * 7))
    invoke(*batch_args(batch_server, tmp_path / "u.jsonl", "--no-cache", n=20))
    sizes = [len(b.requests) for b in batch_server.created()[3:]]
    assert sum(sizes) == 20 and max(sizes) <= 7 and len(sizes) >= 3
    answered_once(out, 40)


@pytest.mark.parametrize("model", MODELS)
def test_a_submission_whose_reply_was_lost_is_found_not_sent_again(batch_server, keyed, tmp_path, model):
    """Killed between sending a batch and writing its id: the next run finds it at the
    provider (OpenAI by its metadata, Anthropic by its time and size)."""
    out = tmp_path / "t.jsonl"
    invoke(*batch_args(batch_server, out, "--no-wait", model=model, n=8))
    path = state_path(out)
    lines = path.read_text().splitlines(keepends=True)
    assert [json.loads(line)["event"] for line in lines] == ["submitting", "submitted"]
    path.write_text(lines[0])  # as if killed before the reply was written
    invoke(*batch_args(batch_server, out, model=model, n=8))
    assert len(batch_server.created()) == 1
    (batch,) = BatchState(path).batches.values()
    assert batch.submitted is not None and batch.submitted.found
    answered_once(out, 8)


def test_a_submission_that_never_arrived_is_sent_again(batch_server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    invoke(*batch_args(batch_server, out, "--no-wait", n=8))
    path = state_path(out)
    path.write_text(path.read_text().splitlines(keepends=True)[0])
    batch_server.batches.clear()  # the provider never got it
    invoke(*batch_args(batch_server, out, n=8))
    assert len(batch_server.created()) == 1
    batches = list(BatchState(path).batches.values())
    assert batches[0].abandoned is not None and batches[1].collected is not None
    answered_once(out, 8)


def test_an_endpoint_without_a_batch_api_is_one_clear_line(batch_server, keyed, tmp_path):
    batch_server.no_batch_api = True
    out = tmp_path / "t.jsonl"
    result = invoke(*batch_args(batch_server, out, n=4), code=3)
    said = " ".join(result.output.split())
    line = f"{batch_server.base_url} does not offer the OpenAI Batch API (POST /v1/files answered 404)"
    assert line in said
    assert "run it without --batch" in said and "Traceback" not in result.output
    assert batch_server.requests == [("POST", "/v1/files")]
    (batch,) = BatchState(state_path(out)).batches.values()
    assert batch.abandoned is not None  # the next run will not look for it


def test_a_model_answered_on_this_machine_has_no_batch_api(tmp_path):
    result = runner.invoke(app, ["eval", "-m", "sim:delta", "-n", "2", "-o", str(tmp_path / "t.jsonl"),
                                 "--batch"])
    assert result.exit_code == 1 and "sim:delta has no batch API; run it without --batch" in result.output


def test_no_wait_needs_batch(tmp_path):
    result = runner.invoke(app, ["eval", "-m", "oracle", "-n", "2", "-o", str(tmp_path / "t.jsonl"),
                                 "--no-wait"])
    assert result.exit_code == 1 and "--no-wait goes with --batch" in result.output


def test_dry_run_with_batch_shows_both_prices(batch_server, tmp_path):
    result = invoke("eval", "-m", "gpt-4o", "-m", "claude-3-5-sonnet-20241022", "-n", "4", "--pairs", "20",
                    "-o", str(tmp_path / "t.jsonl"), "--batch", "--dry-run",
                    "--base-url", batch_server.base_url)
    lines = [line for line in result.output.splitlines() if "questions" in line]
    assert len(lines) == 2
    assert all("estimated cost ~$" in line and "; as a batch ~$" in line for line in lines)
    full, half = (float(part.split("~$")[1].split()[0].rstrip(";"))
                  for part in lines[0].split("; as a batch"))
    assert half == pytest.approx(full / 2, abs=1e-4)
    assert batch_server.requests == []


def test_samples_and_sweeps_go_in_batches_too(batch_server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    invoke(*batch_args(batch_server, out, "--samples", "2", n=3))
    (batch,) = batch_server.created()
    assert sorted(line["body"]["seed"] for line in batch.requests) == [0, 0, 0, 1, 1, 1]
    assert sorted(r.sample for r in read(out).records) == [0, 0, 0, 1, 1, 1]
    sweep = tmp_path / "sweep.jsonl"
    invoke("sweep", "-m", "openai:gpt-4o", "--pairs", "10,20", "-n", "3", "-o", str(sweep), "--base-url",
           batch_server.base_url, "--api-key-env", "FAKE_API_KEY", "--batch", "--batch-poll", "0.01")
    # The pairs=10 cell asks the questions above again: the response cache answers them.
    assert len(batch_server.created()) == 2 and len(batch_server.created()[1].requests) == 3
    records = read(sweep).records
    assert len(records) == 6 and all(r.correct for r in records)
    assert sum(r.extra.get("cache") == "hit" for r in records) == 3

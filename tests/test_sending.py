"""The send path under hostile conditions: signals, huge or trickling answers, 200s carrying
errors, a --tpm no request fits, credentials in URLs, a retry budget that starts at the first
attempt, and what `qmkar --help` and `report` import."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar.asking import RunStats, Sending, ask, run_model
from qmkar.cli import app
from qmkar.limits import Limiter
from qmkar.providers.base import ModelRequest
from qmkar.providers.registry import resolve
from qmkar.render import default_template, render
from qmkar.runner import Answered
from qmkar.transcript import TranscriptWriter, read
from tests.support.hosted import items, policy, run
from tests.support.processes import qmkar_limited_to

runner = CliRunner()


def hosted(server, out: Path, *extra: str, n: int = 3) -> list[str]:
    return ["eval", "-m", "openai:gpt-4o", "-n", str(n), "--pairs", "10", "--base-url", server.base_url,
            "--api-key-env", "FAKE_API_KEY", "-o", str(out), *extra]


def command(base_url: str, out: Path, n: int, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "qmkar", "eval", "-m", "openai:gpt-4o", "-n", str(n), "--pairs", "10",
            "--base-url", base_url, "--api-key-env", "FAKE_API_KEY", "-o", str(out),
            "--concurrency", str(concurrency), "--no-cache"]


def wait_for_lines(out: Path, count: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < count):
        time.sleep(0.02)


@pytest.mark.slow
def test_sigterm_gets_ctrl_c_treatment_with_credentials_masked(server, keyed, tmp_path):
    server.delay = 0.3
    out = tmp_path / "t.jsonl"
    url = server.base_url.replace("http://", "http://me:hunter2secret@")
    env = {**os.environ, "FAKE_API_KEY": keyed}
    running = subprocess.Popen(command(url, out, 100, 4), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    wait_for_lines(out, 4)
    sent_before = len(server.requests)
    running.send_signal(signal.SIGTERM)
    stderr = running.communicate(timeout=30)[1]
    assert running.returncode == 143, stderr
    assert "stopped by SIGTERM: answers received so far are in" in stderr
    assert "resume with: qmkar eval -m openai:gpt-4o -n 100" in stderr
    assert "Traceback" not in stderr
    # Stopped sending at once; what was in flight was answered and written.
    records = read(out).records
    assert len(server.requests) <= sent_before + 4
    assert len(records) == len(server.requests) and all(r.answered for r in records)
    # The password is in no line printed and nowhere in the transcript.
    assert "hunter2secret" not in stderr and "***@" in stderr
    assert "hunter2secret" not in out.read_text()
    assert records[0].condition.endpoint == url.replace("me:hunter2secret@", "***@").rstrip("/")


@pytest.mark.slow
def test_a_second_signal_cuts_the_grace_and_keeps_every_answer_received(server, keyed, tmp_path):
    server.delay = 0.5
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "FAKE_API_KEY": keyed}
    running = subprocess.Popen(command(server.base_url, out, 400, 16), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_lines(out, 20)
    running.send_signal(signal.SIGINT)
    time.sleep(0.2)
    answered_by_then = server.answered
    time.sleep(0.3)  # long enough for those answers to be read and written
    started = time.monotonic()
    running.send_signal(signal.SIGTERM)
    stderr = running.communicate(timeout=30)[1]
    assert time.monotonic() - started < 5, "the second signal must not wait out the grace period"
    assert running.returncode == 130, stderr  # the first signal names the exit
    assert "Traceback" not in stderr and "resume with:" in stderr
    contents = read(out)
    assert contents.torn_bytes == 0
    assert all(r.answered for r in contents.records)
    assert len(contents.records) >= answered_by_then


def test_an_answer_past_the_limit_is_cut_and_marked(server, keyed, tmp_path):
    server.answer = "1234, " * 1000
    out = tmp_path / "t.jsonl"
    result = runner.invoke(app, hosted(server, out, "--max-answer-chars", "100", "--temperature", "0"))
    assert result.exit_code == 0, result.output
    records = read(out).records
    assert all(len(r.answer or "") == 100 and r.extra["cut"] == {"answer": 6000} for r in records)
    assert "1234, " * 100 not in out.read_text()
    # The cache keeps the cut answer too: the same command again is served from it.
    again = runner.invoke(app, hosted(server, tmp_path / "u.jsonl", "--max-answer-chars", "100",
                                      "--temperature", "0"))
    assert again.exit_code == 0
    cached = read(tmp_path / "u.jsonl").records
    assert all(r.extra.get("cache") == "hit" and len(r.answer or "") == 100 for r in cached)


def test_the_default_answer_limit_is_a_million_characters():
    from qmkar.defaults import MAX_ANSWER_CHARS
    from qmkar.plans import SendOptions

    assert MAX_ANSWER_CHARS == 1_000_000 == SendOptions().max_answer_chars == Sending().max_answer


def test_a_200_carrying_an_error_reports_the_servers_message(server, keyed, tmp_path):
    server.script = lambda body, seen: "error-200"
    out = tmp_path / "t.jsonl"
    result = runner.invoke(app, hosted(server, out, "--max-retries", "0", n=1))
    assert result.exit_code == 3
    (record,) = read(out).records
    assert record.error is not None and record.error.kind == "bad_response"
    assert "upstream model is overloaded, try later" in record.error.message
    assert "no choices" not in record.error.message


def test_an_answer_of_the_wrong_shape_is_one_bad_response(server, keyed, tmp_path):
    # The body is JSON, but the answer's text is a number: read into qmkar's few fields
    # (providers/openai.py's Completion), it is an unreadable response, not a crash.
    server.script = lambda body, seen: "wrong-shape"
    out = tmp_path / "t.jsonl"
    result = runner.invoke(app, hosted(server, out, "--max-retries", "0", n=1))
    assert result.exit_code == 3, result.output
    (record,) = read(out).records
    assert record.error is not None and record.error.kind == "bad_response"
    assert "unreadable response" in record.error.message and "content" in record.error.message


def test_a_trickling_server_cannot_stretch_an_attempt_past_its_timeout(server, keyed):
    server.script = lambda body, seen: "trickle"
    provider = resolve("openai:gpt-4o", {"base_url": server.base_url, "api_key_env": "FAKE_API_KEY",
                                         "timeout": 1.0})
    retry, _ = policy(max_retries=0, timeout=1.0)
    question = items(1)[0]
    request = ModelRequest(messages=render(question, default_template("qmkar")),
                           settings=provider.settings_for({"seed": 0}))

    async def go():
        try:
            return await ask(provider, question, request, Sending(retry))
        finally:
            await provider.aclose()

    started = time.monotonic()
    response, attempts, error, _ = asyncio.run(go())
    assert response is None and error is not None and error.kind == "timeout"
    assert attempts[0].seconds < 3 and time.monotonic() - started < 5


def test_tpm_below_one_request_is_refused_with_one_line_and_nothing_sent(server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    started = time.monotonic()
    result = runner.invoke(app, hosted(server, out, "--tpm", "100"))
    assert time.monotonic() - started < 30
    assert result.exit_code == 1
    assert result.output.startswith("error: openai:gpt-4o: --tpm 100 is below the ")
    assert "raise --tpm to at least" in result.output and len(result.output.strip().splitlines()) == 1
    assert server.requests == [] and not out.exists()


def test_the_retry_budget_starts_at_the_first_attempt_not_in_the_queue(server, keyed, tmp_path):
    """Eight questions behind one slot, each request 0.2 s: the last waits 1.4 s or more before
    it is first sent, longer than the whole 1 s budget. Each question's first attempt fails
    (a 500); all are still retried, as their budget starts when they are first sent."""
    server.delay = 0.2
    server.script = lambda body, seen: "500" if seen == 0 else None
    retry, _ = policy(budget=1.0, max_retries=3, initial_wait=0.01, max_wait=0.01)
    provider = resolve("openai:gpt-4o", {"base_url": server.base_url, "api_key_env": "FAKE_API_KEY"})
    records, stats = run(provider, items(8), tmp_path / "t.jsonl", Sending(retry, Limiter(1)), 8)
    assert len(records) == 8 and all(r.answered for r in records)
    assert all(len(r.attempts) == 2 for r in records)
    assert max(r.attempts[0].waited for r in records) > 1.0  # the queue was longer than the budget


@pytest.mark.parametrize("args", [["--help"], ["report", "{transcript}"], ["eval", "--help"]])
def test_help_and_report_import_no_sdk_numpy_matplotlib_or_tiktoken(tmp_path, args):
    printed = after_command(with_transcript(tmp_path, args), (
        "heavy = ('openai', 'anthropic', 'numpy', 'matplotlib', 'tiktoken')\n"
        "print('IMPORTED', sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"))
    assert "IMPORTED []" in printed, printed[-500:]


@pytest.mark.parametrize("args", [["--help"], ["eval", "--help"], ["report", "{transcript}"],
                                  ["compare", "{transcript}", "{transcript}"], ["runs", "{transcript}"],
                                  ["show", "{transcript}", "--wrong"], ["models"]])
def test_commands_that_send_nothing_import_no_send_path(tmp_path, args):
    """The send path (runner, asking, the batch runs; asyncio and tenacity under them) is
    imported by what sends: a command that reads transcripts or prints help does not pay for
    it at start-up (docs/performance.md, the thirtieth pass)."""
    printed = after_command(with_transcript(tmp_path, args), (
        "sending = ('asyncio', 'tenacity', 'qmkar.runner', 'qmkar.asking', 'qmkar.batch.run', "
        "'qmkar.batch.manage', 'qmkar.limits', 'qmkar.retry')\n"
        "print('IMPORTED', sorted(m for m in sending if m in sys.modules))\n"))
    assert "IMPORTED []" in printed, printed[-500:]


@pytest.mark.parametrize(("model", "variable"), [("gpt-4o", "OPENAI_API_KEY"),
                                               ("claude-sonnet-4-6", "ANTHROPIC_API_KEY"),
                                               ("deepseek-chat", "DEEPSEEK_API_KEY")])
def test_a_missing_key_is_said_before_any_sdk_is_imported(tmp_path, monkeypatch, model, variable):
    monkeypatch.delenv(variable, raising=False)
    printed = after_command(["eval", "-m", model, "-n", "2", "-o", str(tmp_path / "t.jsonl")], (
        "print('IMPORTED', sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic')))\n"))
    assert "IMPORTED []" in printed, printed[-500:]
    assert f"set {variable}" in printed
    assert not (tmp_path / "t.jsonl").exists()


def with_transcript(tmp_path: Path, args: list[str]) -> list[str]:
    """`args` with {transcript} replaced by a transcript of two oracle answers, made here."""
    transcript = tmp_path / "t.jsonl"
    made = runner.invoke(app, ["eval", "-m", "oracle", "-n", "2", "-o", str(transcript)])
    assert made.exit_code == 0, made.output
    return [a.replace("{transcript}", str(transcript)) for a in args]


def after_command(argv: list[str], then: str) -> str:
    """What a fresh interpreter prints running `qmkar ARGV` (its exit caught), then `then`:
    its output, then its errors."""
    script = ("import sys; sys.argv = ['qmkar', *" + json.dumps(argv) + "]\n"
              "from qmkar.cli import main\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n" + then)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize("args", [["--help"], ["eval", "--help"], ["report", "--help"]])
def test_help_builds_no_pydantic_model(args):
    """Every model of qmkar's builds its validator on first use (deferred.DeferredModel), so
    that no command pays at start for the models it never uses: printing help uses none. A
    model made a plain BaseModel again, or validation run while a module is imported, shows
    here as a model built."""
    printed = after_command(args, (
        "from pydantic import BaseModel\n"
        "todo, models = [BaseModel], []\n"
        "while todo:\n"
        "    todo += todo.pop().__subclasses__()\n"
        "    models += [c for c in todo if c.__module__.startswith('qmkar.') and c not in models]\n"
        "print('MODELS', len(models))\n"
        "print('BUILT', sorted(c.__qualname__ for c in models if c.__pydantic_complete__))\n"))
    assert int(printed.split("MODELS ")[1].split()[0]) >= 30  # every module with models was imported
    assert "BUILT []" in printed, printed[-500:]


def test_when_the_questions_source_fails_the_questions_in_flight_are_answered_and_written(
        server, keyed, tmp_path):
    # A source of questions that fails mid-run (a dataset changed under the run, a damaged
    # worker stream) must not leave requests running against a closed client: those in
    # flight are answered and written, then the error goes up, and no task is left behind.
    server.delay = 0.3
    questions = items(12)

    def failing():
        yield from questions[:8]
        raise OSError("the source failed")

    provider = resolve("openai:gpt-4o", {"base_url": server.base_url, "api_key_env": "FAKE_API_KEY"})
    retry, _ = policy()
    left: list[asyncio.Task] = []

    async def go() -> None:
        try:
            with TranscriptWriter(tmp_path / "t.jsonl") as writer:
                await run_model(provider, failing(), default_template, {}, writer, Answered(), RunStats(),
                                8, sending=Sending(retry))
        finally:
            await provider.aclose()
            left.extend(t for t in asyncio.all_tasks() if t is not asyncio.current_task())

    with pytest.raises(OSError, match="the source failed"):
        asyncio.run(go())
    assert not left
    records = read(tmp_path / "t.jsonl").records
    assert len(records) == 8 and all(r.answered for r in records)


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="file size limits are POSIX")
def test_a_transcript_that_cannot_be_written_stops_the_sending_with_one_error(server, keyed, tmp_path):
    # A full disk, made real with a file size limit on the whole eval process: the answers
    # that could not be written must not be paid for by the hundred, nor each print a traceback.
    out = tmp_path / "t.jsonl"
    _, _, _, *args = command(server.base_url, out, 300, 4)  # python -m qmkar ARGS
    done = subprocess.run([*qmkar_limited_to(20_000), *args], env={**os.environ, "FAKE_API_KEY": keyed},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "error: cannot write to the transcript" in done.stderr
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr
    written = read(out).records
    assert written and read(out).torn_bytes == 0
    assert server.answered <= len(written) + 4 + 1  # those in flight when the write failed, at most

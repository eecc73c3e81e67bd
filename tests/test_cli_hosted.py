"""`qmkar eval` against the fault server: keys, stopping, caching, endpoints, dry runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar.cli import app
from qmkar.transcript import latest, read
from tests.support.hosted import PLANTED_KEY
from tests.support.ports import free_port

runner = CliRunner()


def eval_args(server, out: Path, *extra: str, model: str = "openai:gpt-4o", n: int = 6) -> list[str]:
    return ["eval", "-m", model, "-n", str(n), "--pairs", "10", "-o", str(out),
            "--base-url", server.base_url, "--api-key-env", "FAKE_API_KEY", *extra]


def test_missing_key_is_one_error_before_any_request(server, monkeypatch, tmp_path):
    monkeypatch.delenv("FAKE_API_KEY", raising=False)
    result = runner.invoke(app, eval_args(server, tmp_path / "t.jsonl"))
    assert result.exit_code == 1
    assert "set FAKE_API_KEY" in result.output and "Traceback" not in result.output
    assert server.requests == []


def test_missing_provider_key_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    result = runner.invoke(app, ["eval", "-m", "deepseek-chat", "-n", "2", "-o", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 1 and "DEEPSEEK_API_KEY" in result.output


def test_bad_key_stops_the_model_with_one_message(server, keyed, tmp_path):
    server.script = lambda body, seen: "401"
    out = tmp_path / "t.jsonl"
    result = runner.invoke(app, eval_args(server, out, "--concurrency", "2", n=40))
    assert result.exit_code == 3  # the run is incomplete: a model was stopped
    assert result.output.count("stopped asking") == 1 and "API key was refused" in result.output
    # Not 40 identical failures: at most the questions already in flight were sent.
    assert len(server.requests) <= 3
    assert all(r.error.status == 401 for r in read(out).records)


def test_failed_questions_are_errors_and_the_next_run_retries_them(server, keyed, tmp_path):
    server.script = lambda body, seen: "500" if seen < 2 else None
    out = tmp_path / "t.jsonl"
    first = runner.invoke(app, eval_args(server, out, "--max-retries", "1", "--retry-budget", "30"))
    assert first.exit_code == 3, first.output  # questions ended in errors
    assert "may pass if asked again" in first.output
    records = read(out).records
    assert len(records) == 6 and all(r.error.kind == "http_500" for r in records)
    assert all(len(r.attempts) == 2 for r in records)
    second = runner.invoke(app, eval_args(server, out, "--max-retries", "1"))
    assert second.exit_code == 0, second.output
    final = latest(read(out).records)
    assert len(final) == 6 and all(r.answered for r in final.values())


def test_a_server_that_cannot_be_reached_stops_its_model_after_the_first_questions(keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    address = f"http://127.0.0.1:{free_port()}/v1"
    result = runner.invoke(app, ["eval", "-m", "openai:gpt-4o", "-n", "40", "--pairs", "10", "-o", str(out),
                                 "--base-url", address, "--api-key-env", "FAKE_API_KEY",
                                 "--concurrency", "2", "--max-retries", "1"])
    assert result.exit_code == 3, result.output
    assert result.output.count("stopped asking") == 1, result.output
    assert f"is the server at {address} running" in result.output
    # Only the questions in flight when the first one gave up, not 40 of a minute's retries each.
    records = read(out).records
    assert len(records) == 2 and all(r.error.kind == "connection" and len(r.attempts) == 2 for r in records)


def test_a_model_that_has_answered_is_not_stopped_by_connection_failures(server, keyed, tmp_path):
    asked = set()

    def script(body: dict, seen: int) -> str | None:
        asked.add(json.dumps(body["messages"]))
        return None if len(asked) == 1 else "reset"  # the first question answered, then none

    server.script = script
    out = tmp_path / "t.jsonl"
    result = runner.invoke(app, eval_args(server, out, "--concurrency", "1", "--max-retries", "1", n=4))
    assert result.exit_code == 3, result.output
    assert "stopped asking" not in result.output
    records = read(out).records
    assert len(records) == 4 and records[0].answered
    assert all(r.error.kind == "connection" and len(r.attempts) == 2 for r in records[1:])


def test_cache_answers_identical_requests_without_sending(server, keyed, tmp_path):
    first = runner.invoke(app, eval_args(server, tmp_path / "a.jsonl"))
    assert first.exit_code == 0, first.output
    sent = len(server.requests)
    assert sent == 6
    again = runner.invoke(app, eval_args(server, tmp_path / "b.jsonl"))
    assert again.exit_code == 0, again.output
    assert len(server.requests) == sent and "6 from the response cache" in again.output
    records = read(tmp_path / "b.jsonl").records
    assert all(r.answered and r.extra["cache"] == "hit" for r in records)
    bypass = runner.invoke(app, eval_args(server, tmp_path / "c.jsonl", "--no-cache"))
    assert bypass.exit_code == 0 and len(server.requests) == 2 * sent


def test_errors_are_never_cached(server, keyed, tmp_path, private_cache):
    server.script = lambda body, seen: "400"
    result = runner.invoke(app, eval_args(server, tmp_path / "a.jsonl"))
    assert result.exit_code == 3, result.output
    assert "cannot be fixed by asking again" in result.output
    assert not private_cache.exists() or not any(private_cache.rglob("*.json"))
    server.script = None
    runner.invoke(app, eval_args(server, tmp_path / "b.jsonl"))
    assert len(server.requests) == 12  # the failed six were asked again, not served from cache


def test_a_changed_setting_is_a_new_request(server, keyed, tmp_path):
    runner.invoke(app, eval_args(server, tmp_path / "a.jsonl"))
    runner.invoke(app, eval_args(server, tmp_path / "b.jsonl", "--max-tokens", "50"))
    assert len(server.requests) == 12
    assert server.requests[-1]["body"]["max_tokens"] == 50
    assert all(r["body"]["temperature"] == 0.0 and r["body"]["seed"] == 0 for r in server.requests)
    assert read(tmp_path / "b.jsonl").records[0].condition.settings["max_tokens"] == 50


def test_usage_totals_and_cost_are_printed_as_an_estimate(server, keyed, tmp_path):
    result = runner.invoke(app, eval_args(server, tmp_path / "a.jsonl", "--no-cache"))
    assert "600 in, 42 out, 18 reasoning, 240 cached tokens" in result.output
    assert "estimate" in result.output
    record = read(tmp_path / "a.jsonl").records[0]
    assert record.usage.input_tokens == 100 and record.usage.reasoning_tokens == 3


def test_planted_key_never_leaks(server, keyed, tmp_path, private_cache):
    # The server echoes the key in its error messages, as careless servers do.
    faults = {0: "500", 1: "401"}
    server.script = lambda body, seen: faults.get(seen)
    out = tmp_path / "t.jsonl"
    runner.invoke(app, eval_args(server, out, "--concurrency", "1", n=3))  # 500, then 401 stops it
    assert any(PLANTED_KEY in str(r["body"]) or PLANTED_KEY in str(r["headers"]) for r in server.requests)
    server.script = None
    result = runner.invoke(app, eval_args(server, out, n=3))
    assert result.exit_code == 0, result.output
    records = read(out).records
    assert any(r.error and r.error.status == 401 for r in records)
    assert any(a.error and a.error.status == 500 for r in records for a in r.attempts)
    written = [out.read_text()] + [p.read_text() for p in private_cache.rglob("*") if p.is_file()]
    assert written[1:], "the cache should hold the answers"
    for text in written + [result.output]:
        assert PLANTED_KEY not in text
    assert "[redacted]" in out.read_text()


def test_named_endpoint_from_a_toml_file(server, monkeypatch, tmp_path):
    monkeypatch.setenv("MYLAB_KEY", "sk-mylab-0123456789")
    config = tmp_path / "endpoints.toml"
    config.write_text(f'[endpoints.mylab]\nbase_url = "{server.base_url}"\napi_key_env = "MYLAB_KEY"\n')
    result = runner.invoke(app, ["eval", "-m", "mylab:tiny-model", "-n", "2", "--pairs", "10",
                                 "-o", str(tmp_path / "t.jsonl"), "--endpoints", str(config)])
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 2
    assert server.requests[0]["headers"]["authorization"] == "Bearer sk-mylab-0123456789"
    assert server.requests[0]["body"]["model"] == "tiny-model"
    assert read(tmp_path / "t.jsonl").records[0].model == "mylab:tiny-model"


def test_bad_endpoints_file_is_one_clear_error(tmp_path):
    config = tmp_path / "endpoints.toml"
    config.write_text("[endpoints.mylab]\nurl = 'http://x'\n")
    result = runner.invoke(app, ["eval", "-m", "mylab:m", "-n", "1", "--endpoints", str(config),
                                 "-o", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 1 and "endpoints.mylab.base_url: Field required" in result.output


def test_local_server_needs_no_key(server, monkeypatch, tmp_path):
    for variable in ("OPENAI_API_KEY", "FAKE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    result = runner.invoke(app, ["eval", "-m", "vllm:my-model", "-n", "2", "--pairs", "10",
                                 "--base-url", server.base_url, "-o", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 2


def test_anthropic_through_the_cli(server, keyed, tmp_path):
    result = runner.invoke(app, ["eval", "-m", "claude-sonnet-4-6", "-n", "2", "--pairs", "10",
                                 "--base-url", server.root_url, "--thinking-budget", "1500",
                                 "-o", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 0, result.output
    record = read(tmp_path / "t.jsonl").records[0]
    assert record.answer == "1234" and record.reasoning.startswith("I recall 9999")
    # The value in the thinking is not parsed as the answer.
    assert 9999 not in record.parsed.values
    assert server.requests[0]["path"] == "/v1/messages"


def test_dry_run_sends_nothing_and_labels_its_figures(server, tmp_path, monkeypatch):
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TOGETHER_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    out = tmp_path / "t.jsonl"
    # Every model is pointed at the server, so anything sent would reach it.
    command = ["eval", "-m", "gpt-4o", "-m", "claude-3-5-sonnet-20241022",
               "-m", "together:meta-llama/Meta-Llama-3.1-405B-Instruct-Turbo",
               "-n", "4", "--pairs", "20", "-o", str(out), "--base-url", server.base_url]
    result = runner.invoke(app, [*command, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert not out.exists() and server.requests == []
    assert "gpt-4o: 4 questions" in result.output
    assert "claude-3-5-sonnet-20241022: 4 questions" in result.output
    assert "estimate" in result.output and "approximate" in result.output
    assert result.output.count("estimated cost ~$") == 3
    # Each question asked three times is three times the questions, tokens and cost.
    thrice = runner.invoke(app, [*command, "--dry-run", "--samples", "3", "--temperature", "1"])
    assert thrice.exit_code == 0, thrice.output
    assert "gpt-4o: 12 questions (4 x 3 samples)" in thrice.output
    once, three = (next(line for line in text.splitlines() if line.startswith("gpt-4o:"))
                   for text in (result.output, thrice.output))
    tokens = [int(line.split(" prompt tokens")[0].split()[-1].replace(",", "")) for line in (once, three)]
    assert tokens[1] == 3 * tokens[0]
    costs = [float(line.split("estimated cost ~$")[1]) for line in (once, three)]
    assert costs[1] == pytest.approx(costs[0] * 3, abs=2e-4)  # shown to four decimals
    # The same command without --dry-run does reach the server: the check above can fail.
    for variable in ("ANTHROPIC_API_KEY", "TOGETHER_API_KEY"):
        monkeypatch.setenv(variable, PLANTED_KEY)
    sent = runner.invoke(app, command)
    assert sent.exit_code == 0, sent.output
    assert len(server.requests) == 3 * 4


@pytest.mark.parametrize("name", ["llama-3-70b", "foo:bar"])
def test_unknown_model_lists_the_known_providers(name, tmp_path):
    result = runner.invoke(app, ["eval", "-m", name, "-n", "1", "-o", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 1
    said = " ".join(result.output.split())  # the console wraps long lines
    assert "Known providers:" in said and "openrouter" in said


def test_models_command_lists_hosted_providers():
    result = runner.invoke(app, ["models"])
    for name in ("openai", "anthropic", "deepseek", "gemini", "together", "ollama", "llamacpp"):
        assert name in result.output


def test_an_unwritable_cache_does_not_stop_the_run_and_says_so_once(server, keyed, tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be")
    out = tmp_path / "t.jsonl"
    result = runner.invoke(app, eval_args(server, out, "--cache-dir", str(blocked)))
    assert result.exit_code == 0, result.output
    assert all(r.answered for r in read(out).records) and len(read(out).records) == 6
    said = " ".join(result.output.split())  # rich wraps long lines
    assert said.count("could not be stored in the response cache") == 1
    assert "6 answers could not be stored in the response cache" in said and "not-a-folder" in said

"""A run knows its conditions: nothing is reused or pooled across them.

Every case is a user's command line run through the real CLI (and, for hosted models,
the real SDKs against loopback servers), read back from the transcript and `report`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar.asking import Conditions
from qmkar.cli import app
from qmkar.providers.registry import resolve
from qmkar.render import Templates
from qmkar.tasks import generate, make_spec
from qmkar.tasks.base import outline_of
from qmkar.transcript import SCHEMA_VERSION, Reading, read
from tests.support.fakeserver import FaultServer
from tests.support.transcripts import Cli

runner = CliRunner()


def report(cli: Cli, *files: Path) -> list[dict]:
    return json.loads(cli("report", *files, "--format", "json").stdout)


def hosted(server: FaultServer, out: Path, *extra: str, n: int = 4) -> list[str]:
    return ["eval", "-m", "openai:gpt-4o", "-n", str(n), "--pairs", "10", "-o", str(out),
            "--base-url", server.base_url, "--api-key-env", "FAKE_API_KEY", *extra]


@pytest.fixture
def second_server():
    running = FaultServer().start()
    yield running
    running.stop()


def test_another_base_url_is_asked_there_and_reported_apart(cli, server, second_server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    cli(*hosted(server, out))
    assert len(server.requests) == 4
    moved = runner.invoke(app, hosted(second_server, out))
    assert moved.exit_code == 0, moved.output
    assert "resuming" not in moved.output and "another condition" in moved.output
    assert len(second_server.requests) == 4 and len(server.requests) == 4  # not served from the first
    rows = report(cli, out)
    assert len(rows) == 2 and {r["condition"]["endpoint"] for r in rows} == {server.base_url,
                                                                              second_server.base_url}
    assert len({r["label"] for r in rows}) == 2 and all(r["n"] == 4 for r in rows)


def test_a_dead_endpoint_answers_nothing_and_the_run_exits_non_zero(cli, server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    cli(*hosted(server, out))
    dead = ["eval", "-m", "openai:gpt-4o", "-n", "4", "--pairs", "10", "-o", str(out),
            "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "FAKE_API_KEY",
            "--max-retries", "0", "--timeout", "5"]
    result = runner.invoke(app, dead)
    assert result.exit_code == 3, result.output
    assert "may pass if asked again" in result.output
    rows = {r["condition"]["endpoint"]: r for r in report(cli, out)}
    assert rows[server.base_url]["n"] == 4 and rows["http://127.0.0.1:9/v1"]["n"] == 0
    assert rows["http://127.0.0.1:9/v1"]["errors_retryable"] == 4


@pytest.mark.parametrize("change", [["--temperature", "1.0"], ["--max-tokens", "50"], ["--pairs", "12"]])
def test_a_changed_setting_or_option_is_asked_afresh_and_kept_apart(cli, server, keyed, tmp_path, change):
    out = tmp_path / "t.jsonl"
    cli(*hosted(server, out))
    args = hosted(server, out)
    if change[0] == "--pairs":
        args[args.index("--pairs") + 1] = change[1]
    else:
        args += change
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 8  # none reused: not from the transcript, not from the cache
    rows = report(cli, out)
    assert len(rows) == 2 and sorted(r["n"] for r in rows) == [4, 4]
    changed = change[0].removeprefix("--").replace("-", "_")
    assert any(f"{changed}=" in r["label"] for r in rows), [r["label"] for r in rows]


def test_a_changed_template_is_a_new_condition_and_the_same_text_is_not(cli, tmp_path):
    out = tmp_path / "t.jsonl"
    cli("eval", "-m", "oracle", "-n", "3", "--pairs", "10", "-o", out)
    builtin = (Path(__file__).resolve().parents[1] / "prompts" / "qmkar.txt").read_text()
    same = tmp_path / "same.txt"
    same.write_text(builtin)
    again = cli("eval", "-m", "oracle", "-n", "3", "--pairs", "10", "-o", out, "--template", same)
    assert "resuming oracle: 3 of 3" in again.output  # same text, same condition
    other = tmp_path / "other.txt"
    other.write_text("Keys and values: {pairs}\nAll values of k = {key}?\n")
    changed = cli("eval", "-m", "oracle", "-n", "3", "--pairs", "10", "-o", out, "--template", other)
    assert "another condition" in changed.output and "template:" in changed.output
    reading = Reading(out)
    records = list(reading)
    assert len(records) == 6 and len({r.condition_id for r in records}) == 2
    assert {reading.prompt(r)[0]["content"].startswith("Keys and values") for r in records} == {True, False}
    assert len(report(cli, out)) == 2


def test_sampling_is_not_served_from_the_cache_unless_asked(cli, server, keyed, tmp_path):
    cli(*hosted(server, tmp_path / "a.jsonl", "--temperature", "1.0"))
    cli(*hosted(server, tmp_path / "b.jsonl", "--temperature", "1.0"))
    assert len(server.requests) == 8
    cli(*hosted(server, tmp_path / "c.jsonl", "--temperature", "1.0", "--reuse-sampled"))
    assert len(server.requests) == 8
    cli(*hosted(server, tmp_path / "d.jsonl"))  # temperature 0: asked once, then cached
    cli(*hosted(server, tmp_path / "e.jsonl"))
    assert len(server.requests) == 12


def test_samples_ask_each_question_k_times_with_their_own_seed(cli, server, keyed, tmp_path):
    out = tmp_path / "t.jsonl"
    cli(*hosted(server, out, "--samples", "3", "--temperature", "0.7", n=2))
    seeds = sorted(r["body"]["seed"] for r in server.requests)
    assert seeds == [0, 0, 1, 1, 2, 2]
    records = read(out).records
    assert sorted((r.item_id, r.sample) for r in records) == sorted(
        (item_id, s) for item_id in {r.item_id for r in records} for s in range(3))
    (row,) = report(cli, out)
    assert (row["n"], row["questions"], row["samples"]) == (6, 2, 3)
    assert len(row["by_sample"]) == 3
    again = cli(*hosted(server, out, "--samples", "3", "--temperature", "0.7", n=2))
    assert "resuming openai:gpt-4o: 6 of 6" in again.output and len(server.requests) == 6


def test_dataset_limit_asks_the_first_n(cli, tmp_path):
    dataset = tmp_path / "d.jsonl"
    cli("generate", "-n", "10", "--pairs", "10", "-o", dataset)
    dry = cli("eval", "-m", "oracle", "--dataset", dataset, "-n", "5", "--dry-run")
    assert "oracle: 5 questions" in dry.output
    out = tmp_path / "t.jsonl"
    cli("eval", "-m", "oracle", "--dataset", dataset, "--limit", "5", "-o", out)
    first_five = [json.loads(line)["id"] for line in dataset.read_text().splitlines()[:5]]
    assert [r.item_id for r in read(out).records] == first_five


def test_a_truncated_answer_is_counted_and_shown(cli, server, keyed, tmp_path):
    server.script = lambda body, seen: "length"
    out = tmp_path / "t.jsonl"
    cli(*hosted(server, out))
    assert all(r.truncated and r.answer == "" for r in read(out).records)
    (row,) = report(cli, out)
    assert row["truncated"] == 4 and row["n"] == 4 and row["correct"] == 0
    # An empty cut-off answer is truncated, not also a refusal or unparsed.
    assert row["refused"] == 0 and row["unparsed"] == 0
    table = cli("report", out).output
    assert "truncated" in table and "raise --max-tokens" in table


def test_labels_name_rows(cli, tmp_path):
    out = tmp_path / "t.jsonl"
    cli("eval", "-m", "oracle", "-m", "sim:softmax", "-n", "2", "--pairs", "10", "-o", out,
        "--label", "oracle=truth", "--label", "sim:softmax=attention")
    assert {r["label"] for r in report(cli, out)} == {"truth", "attention"}
    refused = runner.invoke(app, ["eval", "-m", "oracle", "-m", "sim:delta", "--label", "x", "-n", "1",
                                  "-o", str(tmp_path / "u.jsonl")])
    assert refused.exit_code == 1 and "MODEL=NAME" in refused.output


@pytest.mark.parametrize("args", [
    ["eval", "-m", "oracle", "-t", "qmkar", "-t", "mqar"],
    ["eval", "--preset", "a.toml", "--preset", "b.toml"],  # --dataset is repeatable: each is asked
    ["eval", "-m", "oracle", "-n", "2", "--limit", "3"],
    ["generate", "-o", "x.jsonl", "--pairs", "10", "--pairs=20"],
])
def test_an_option_given_twice_is_refused(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "given twice" in result.output
    assert not list(tmp_path.iterdir())


def v1_line(item: dict, model: str, answer: str, settings: dict) -> str:
    """A record as qmkar 0.1 wrote it (schema 1): the item inside, no condition."""
    return json.dumps({
        "schema_version": 1, "model": model, "item": item, "template": "builtin:qmkar.txt",
        "request": {"messages": [{"role": "user", "content": "..."}], "settings": settings},
        "answer": answer, "started_at": "2025-06-01T00:00:00Z", "seconds": 0.5, "attempts": [],
        "parsed": None, "score": None, "extra": {}})


def test_old_transcripts_load_with_inferred_conditions_and_resume(cli, tmp_path):
    dataset = tmp_path / "d.jsonl"
    cli("generate", "-n", "3", "--pairs", "10", "-o", dataset)
    items = [json.loads(line) for line in dataset.read_text().splitlines()]
    old = tmp_path / "old.jsonl"
    old.write_text("".join(v1_line(item, "oracle", ", ".join(map(str, item["expected"])), {"seed": 0}) + "\n"
                           for item in items))
    records = read(old).records
    assert all(r.condition.inferred and r.condition.provider == "oracle" for r in records)
    rescored = tmp_path / "rescored.jsonl"
    cli("rescore", old, "-o", rescored)
    (row,) = report(cli, rescored)
    assert row["correct"] == 3 and row["condition"]["inferred"] is True
    again = cli("eval", "-m", "oracle", "--dataset", dataset, "-o", old)
    assert "resuming oracle: 3 of 3" in again.output
    assert len(read(old).records) == 3


def test_a_transcript_from_a_newer_qmkar_is_refused_with_one_line(tmp_path):
    path = tmp_path / "new.jsonl"
    path.write_text(json.dumps({"kind": "run", "schema_version": SCHEMA_VERSION + 1, "run_id": "x",
                                "started_at": "2030-01-01T00:00:00Z", "qmkar_version": "9", "command": []})
                    + "\n")
    result = runner.invoke(app, ["report", str(path)])
    assert result.exit_code == 1 and "newer qmkar" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("model, option, said", [
    ("openai:gpt-4o", ["--reasoning-effort", "high"], "takes no --reasoning-effort"),
    ("openai:gpt-4o", ["--thinking-budget", "2000"], "takes no --thinking-budget"),
    ("openai:o1", ["--temperature", "0.5"], "takes no --temperature"),
])
def test_a_setting_the_model_does_not_take_is_refused_before_anything_is_sent(
        server, keyed, tmp_path, model, option, said):
    out = tmp_path / "t.jsonl"
    args = hosted(server, out, *option)
    args[args.index("-m") + 1] = model
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and said in result.output
    assert server.requests == [] and not out.exists()


def test_claude_takes_a_thinking_budget_but_no_reasoning_effort(server, keyed, tmp_path):
    base = ["eval", "-m", "anthropic:claude-sonnet-4-6", "-n", "2", "--pairs", "10",
            "--base-url", server.root_url]
    refused = runner.invoke(app, [*base, "-o", str(tmp_path / "a.jsonl"), "--reasoning-effort", "low"])
    assert refused.exit_code == 1 and "takes no --reasoning-effort" in refused.output
    sent = runner.invoke(app, [*base, "-o", str(tmp_path / "b.jsonl"), "--thinking-budget", "2000"])
    assert sent.exit_code == 0, sent.output
    assert all(r["body"]["thinking"]["budget_tokens"] == 2000 for r in server.requests)
    (record, *_) = read(tmp_path / "b.jsonl").records
    assert record.condition.settings["thinking_budget"] == 2000


def test_a_question_s_condition_follows_its_params_and_task_whatever_was_asked_before():
    """Conditions.of remembers the last params object it saw (a resume's outline shares one):
    a question with other params, or of another task, gets its own."""
    provider = resolve("oracle")
    conditions = Conditions(provider, {}, Templates())
    a = list(generate(make_spec("qmkar", pairs=20), 2, 0))
    b = next(iter(generate(make_spec("qmkar", pairs=30), 1, 0)))
    counting = next(iter(generate(make_spec("counting"), 1, 0)))
    first = conditions.of(a[0])
    assert conditions.of(outline_of(a[0])) is first  # the same params object
    assert conditions.of(a[1]) is first  # equal params, another object
    other = conditions.of(b)
    assert other.params["pairs"] == 30 and other is not first
    assert conditions.of(a[0]) is first
    counted = conditions.of(counting)
    assert counted.task == "counting" and conditions.of(counting).params == counted.params
    assert conditions.of(outline_of(counting)._replace(params=counting.params)) is counted
    fresh = Conditions(provider, {}, Templates())
    assert [fresh.of(q) for q in (a[0], b, counting)] == [first, other, counted]

"""--max-cost: a run stops sending, or submitting, before its cost could pass the ceiling.

Prices are set so the arithmetic is exact: output tokens at $1 each, input free, and
--max-tokens 7, which is what both servers answer with. So every request is estimated at
$7 ($3.50 in a batch) and costs exactly that."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar import ahead, offload, tokens
from qmkar.cli import app
from qmkar.transcript import read
from tests.support.batchserver import batch_args
from tests.support.fakeserver import FaultServer

runner = CliRunner()


@pytest.fixture
def prices(tmp_path: Path) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text("".join(f'[prices."{model}"]\ninput = 0\noutput = 1000000\n'
                            for model in ("gpt-4o", "gpt-4o-mini")))
    return path


def sync_args(server, out: Path, prices: Path, cost: str, *models: str, n: int = 20) -> list[str]:
    return ["eval", *[a for m in models or ("openai:gpt-4o",) for a in ("-m", m)], "-n", str(n),
            "--pairs", "10", "-o", str(out), "--base-url", server.base_url, "--api-key-env", "FAKE_API_KEY",
            "--max-tokens", "7", "--prices", str(prices), "--max-cost", cost]


def test_the_ceiling_stops_sending_at_the_last_answer_that_fits(server, keyed, tmp_path, prices, monkeypatch):
    named: list[int] = []  # the plan's outlines made (a fresh transcript spent nothing: none)
    outlines = ahead.outlines
    monkeypatch.setattr(ahead, "outlines", lambda *args: named.append(args[1]) or outlines(*args))
    out = tmp_path / "t.jsonl"
    result = runner.invoke(app, sync_args(server, out, prices, "50") + ["--concurrency", "4"])
    assert result.exit_code == 3, result.output
    assert named == []
    said = " ".join(result.output.split())
    assert "stopped asking openai:gpt-4o: --max-cost $50 reached" in said
    assert "run the same command again with a higher --max-cost" in said
    records = read(out).records
    assert sum(r.answered for r in records) == 7 and len(server.requests) == 7  # $49; the 8th would be $56
    stops = [r for r in records if r.error is not None]
    assert stops and all(r.error.kind == "max_cost" and not r.error.permanent for r in stops)
    # Reruns count what the transcript already spent: the same ceiling sends nothing more...
    again = runner.invoke(app, sync_args(server, out, prices, "50"))
    assert again.exit_code == 3 and len(server.requests) == 7
    assert named == [20]  # once, for the resume line and the ceiling both
    # ...a higher one goes on from there.
    higher = runner.invoke(app, sync_args(server, out, prices, "100"))
    assert higher.exit_code == 3 and len(server.requests) == 14


def test_one_ceiling_covers_every_model_and_cache_hits_are_free(server, keyed, tmp_path, prices):
    both = ("openai:gpt-4o", "openai:gpt-4o-mini")
    result = runner.invoke(app, sync_args(server, tmp_path / "a.jsonl", prices, "50", *both, n=10))
    assert result.exit_code == 3, result.output
    assert len(server.requests) == 7 and sum(r.answered for r in read(tmp_path / "a.jsonl").records) == 7
    # A new transcript: the 7 answers come from the cache for nothing; 7 more are bought.
    cached = runner.invoke(app, sync_args(server, tmp_path / "b.jsonl", prices, "50", *both, n=10))
    records = read(tmp_path / "b.jsonl").records
    assert sum(r.extra.get("cache") == "hit" for r in records) == 7
    assert sum(r.answered for r in records) == 14 and len(server.requests) == 14, cached.output


def test_a_model_without_a_price_is_refused_before_anything_is_sent(server, keyed, tmp_path):
    result = runner.invoke(app, ["eval", "-m", "my-model", "-n", "2", "--base-url", server.base_url,
                                 "-o", str(tmp_path / "t.jsonl"), "--max-cost", "5"])
    assert result.exit_code == 1 and server.requests == []
    assert "--max-cost needs the price of my-model" in " ".join(result.output.split())


def test_models_answered_on_this_machine_cost_nothing(tmp_path):
    result = runner.invoke(app, ["eval", "-m", "oracle", "-n", "5", "-o", str(tmp_path / "t.jsonl"),
                                 "--max-cost", "0"])
    assert result.exit_code == 0, result.output


def test_the_ceiling_cuts_a_batch_at_the_last_question_that_fits(batch_server, keyed, tmp_path, prices):
    out = tmp_path / "t.jsonl"
    args = batch_args(batch_server, out, "--max-tokens", "7", "--prices", str(prices), "--max-cost", "50",
                      n=20)
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    (batch,) = batch_server.created()
    assert len(batch.requests) == 14  # 14 x $3.50 = $49 at the batch price
    records = read(out).records
    assert sum(r.answered for r in records) == 14
    assert [r.error.kind for r in records if r.error] == ["max_cost"]
    assert "--max-cost $50 reached" in " ".join(result.output.split())
    rerun = runner.invoke(app, args)
    assert rerun.exit_code == 3 and len(batch_server.created()) == 1


@pytest.mark.parametrize("first_ceiling", [["--max-cost", "50"], []])
def test_batches_in_flight_count_against_the_ceiling(batch_server, keyed, tmp_path, prices, first_ceiling):
    """Batches submitted by an earlier run (with a ceiling or without one) are in flight."""
    out = tmp_path / "t.jsonl"
    args = batch_args(batch_server, out, "--max-tokens", "7", "--prices", str(prices), "--no-wait", n=10)
    first = runner.invoke(app, args + first_ceiling)
    assert first.exit_code == 0, first.output  # 10 x $3.50 = $35 submitted
    wider = runner.invoke(app, [*args[:args.index("-n")], "-n", "20", *args[args.index("-n") + 2:],
                                "--max-cost", "50"])
    # $35 in flight: four more fit ($49), the fifth would pass $50.
    assert [len(b.requests) for b in batch_server.created()] == [10, 4], wider.output


@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU starts no question worker")
def test_prompts_counted_by_the_question_worker_reserve_what_the_run_would(keyed, tmp_path, monkeypatch):
    """With a worker, the prompts' tokens are counted there (records.make_ahead), not in the
    run's process, which never loads the tokenizer's tables; the ceiling stops at the same
    question either way."""
    prices = tmp_path / "by-prompt.toml"  # $1 a prompt token: the prompt's count decides
    prices.write_text('[prices."gpt-4o"]\ninput = 1000000\noutput = 0\n')
    counted: list[str] = []  # prompts counted in this process
    count = tokens.Counter.count
    monkeypatch.setattr(tokens.Counter, "count", lambda self, text: counted.append(text) or count(self, text))
    server = FaultServer(delay=0.01).start()  # slow enough for the worker to start and keep ahead
    answered, start = [], offload.start
    tokens.counter.cache_clear()
    tokens._encoding.cache_clear()
    try:
        for worker in (True, False):
            monkeypatch.setattr(offload, "start", start if worker else lambda *args: None)
            counted.clear()
            out = tmp_path / f"worker-{worker}.jsonl"
            args = sync_args(server, out, prices, "20000", n=300) + ["--concurrency", "1", "--no-cache"]
            result = runner.invoke(app, args)
            assert result.exit_code == 3, result.output  # stopped by the ceiling
            answered.append(sum(r.answered for r in read(out).records))
            # Every estimate counted here without the worker; with it, none (the run waits for
            # the worker's chunks), and the tables were never loaded here.
            if worker:
                assert counted == [] and tokens._encoding.cache_info().currsize == 0
            else:
                assert len(counted) >= answered[-1] and tokens._encoding.cache_info().currsize == 1
    finally:
        server.stop()
    assert 0 < answered[0] < 300 and answered[1] == answered[0]


@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU starts no question worker")
def test_models_with_different_tokenizers_share_one_worker_that_counts_for_each(keyed, tmp_path,
                                                                                monkeypatch):
    """Under --max-cost, gpt-4o (o200k) and gpt-4 (cl100k) share one question worker
    (ahead.Sharing): it counts each prompt with both tokenizers, and neither model's estimates
    are counted in the run's process."""
    prices = tmp_path / "two.toml"
    prices.write_text('[prices."gpt-4o"]\ninput = 1\noutput = 1\n[prices."gpt-4"]\ninput = 1\noutput = 1\n')
    counted: list[str] = []  # prompts counted in this process
    count = tokens.Counter.count
    monkeypatch.setattr(tokens.Counter, "count", lambda self, text: counted.append(text) or count(self, text))
    started: list[str] = []
    start = offload.start

    def counting_start(module, job):
        started.append(module)
        return start(module, job)

    monkeypatch.setattr(offload, "start", counting_start)
    server = FaultServer(delay=0.01).start()
    try:
        out = tmp_path / "t.jsonl"
        args = sync_args(server, out, prices, "1000", "openai:gpt-4o", "openai:gpt-4", n=300)
        result = runner.invoke(app, args + ["--no-cache"])
        assert result.exit_code == 0, result.output
    finally:
        server.stop()
    records = read(out).records
    assert {model: sum(r.model == model for r in records) for model in ("openai:gpt-4o", "openai:gpt-4")} \
        == {"openai:gpt-4o": 300, "openai:gpt-4": 300}
    assert started == ["qmkar.ahead"] and counted == []

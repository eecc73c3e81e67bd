"""Many questions through many faults; and a run killed with SIGKILL, then resumed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import msgspec
import pytest

from qmkar.asking import Sending
from qmkar.limits import Limiter
from qmkar.offload import cpus
from qmkar.providers.registry import resolve
from qmkar.transcript import latest, read
from tests.support.fakeserver import prompt_key
from tests.support.hosted import Sleeps, items, policy, run
from tests.support.transcripts import values, write_replay

SOAK_FAULTS = ["429", "429-date", "429-ms", "429-reset", "500", "502", "503", "529", "reset",
               "malformed", "empty", "hang"]


def soak_script(seed: int, fault_rate: float, doomed: set[str]):
    """Fault a request with probability fault_rate (never more than 3 times per question);
    the doomed questions get a 400 every time."""
    def script(body, seen):
        key = prompt_key(body)
        if key in doomed:
            return "400"
        if seen >= 3:
            return None
        rng = random.Random(f"{seed}:{key}:{seen}")
        if rng.random() < fault_rate:
            fault = rng.choice(SOAK_FAULTS)
            # Few hangs: each costs a whole timeout.
            return fault if fault != "hang" or rng.random() < 0.1 else "503"
        return None
    return script


@pytest.mark.slow
def test_soak_every_question_ends_with_exactly_one_record(server, keyed, tmp_path):
    questions = items(520, pairs=8, seed=7)
    doomed_items = {q.id for q in questions[::50]}
    from qmkar.render import default_template, render

    doomed = {prompt_key({"messages": render(q, default_template("qmkar"))}) for q in questions
              if q.id in doomed_items}
    server.script = soak_script(1, 0.45, doomed)
    retry, sleeps = policy(max_retries=4, timeout=2.0)
    limiter_sleeps = Sleeps()
    limiter = Limiter(32, sleep=limiter_sleeps)
    provider = resolve("openai:gpt-4o-mini", {"base_url": server.base_url, "api_key_env": "FAKE_API_KEY",
                                              "timeout": 5})
    records, stats = run(provider, questions, tmp_path / "soak.jsonl", Sending(retry, limiter), 32)

    faulted = sum(1 for r in server.requests if r["fault"])
    assert faulted / len(server.requests) >= 0.30, "the soak must inject at least 30% faults"
    per_item = Counter(r.item.id for r in records)
    assert set(per_item) == {q.id for q in questions}  # none lost
    assert set(per_item.values()) == {1}  # none duplicated
    errors = {r.item.id for r in records if r.error is not None}
    assert errors == doomed_items  # only the doomed fail; every fault that can pass did
    assert all(len(r.attempts) <= 5 for r in records)  # retries within budget
    # Every request the server saw is an attempt in the transcript (a connect that never
    # reached it is an attempt too, so there may be more).
    assert sum(len(r.attempts) for r in records) >= len(server.requests)
    assert stats.answered["openai:gpt-4o-mini"] == len(questions) - len(doomed_items)
    assert limiter.rate_limited > 0 and limiter.limit >= 1


@pytest.mark.slow
def test_kill_9_then_the_same_command_completes_without_loss_or_duplicates(server, keyed, tmp_path):
    server.delay = 0.05  # slow enough that the kill lands mid-run
    # 429s with Retry-After: 0, so the retries in the subprocess do not sleep.
    server.script = lambda body, seen: "429" if random.Random(f"{prompt_key(body)}:{seen}").random() < 0.2 \
        else None
    out = tmp_path / "t.jsonl"
    command = [sys.executable, "-c", "from qmkar.cli import main; main()",
               "eval", "-m", "openai:gpt-4o", "-n", "200", "--pairs", "10",
               "--base-url", server.base_url, "--api-key-env", "FAKE_API_KEY", "-o", str(out),
               "--concurrency", "8", "--no-cache"]
    env = {**os.environ, "FAKE_API_KEY": keyed}
    victim = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 40):
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    killed_with = out.read_bytes().count(b"\n")
    assert 40 <= killed_with < 200, "the kill should land mid-run"

    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "resuming openai:gpt-4o" in done.stderr
    records = read(out).records
    final = latest(records)
    assert len(final) == 200 and all(r.answered for r in final.values())
    answered = Counter(r.item.id for r in records if r.answered)
    assert set(answered.values()) == {1}  # no question answered twice


@pytest.mark.slow
def test_ctrl_c_writes_answers_in_flight_and_prints_the_resume_command(server, keyed, tmp_path):
    server.delay = 0.3
    out = tmp_path / "t.jsonl"
    command = [sys.executable, "-c", "from qmkar.cli import main; main()",
               "eval", "-m", "openai:gpt-4o", "-n", "100", "--pairs", "10",
               "--base-url", server.base_url, "--api-key-env", "FAKE_API_KEY", "-o", str(out),
               "--concurrency", "4", "--no-cache"]
    env = {**os.environ, "FAKE_API_KEY": keyed}
    running = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 4):
        time.sleep(0.02)
    sent_before = len(server.requests)
    running.send_signal(signal.SIGINT)
    stderr = running.communicate(timeout=30)[1]
    assert running.returncode == 130
    assert "resume with: qmkar eval -m openai:gpt-4o -n 100" in stderr
    records = read(out).records
    # Stopped sending at once; what was in flight was answered and written, not dropped.
    assert len(server.requests) <= sent_before + 4
    assert len(records) == len(server.requests) and all(r.answered for r in records)


def summary_readings(monkeypatch) -> list[int]:
    """Each time an eval's summary read its transcript back (transcript.run_records), how many
    records it kept."""
    from qmkar import transcript

    kept: list[int] = []
    original = transcript.run_records

    def counted(*args, **kwargs):
        kept.append(len(found := original(*args, **kwargs)))
        return found

    monkeypatch.setattr(transcript, "run_records", counted)
    return kept


def test_a_rerun_with_nothing_to_ask_prints_the_summary_read_back_without_reading_it(
        cli, recall_runs, monkeypatch):
    """The first pass's counts are the summary when nothing was written since: the same JSON
    as reading the transcript back prints, with a question that failed. A run with --samples
    reads it back (each question's counts, for every condition, would grow with the file)."""
    from qmkar.runner import Run

    dataset, transcript = recall_runs["dataset"], recall_runs["transcript"]
    failing = write_replay(dataset, transcript.parent / "c.jsonl",
                           lambda i, item: None if i == 2 else values(item))
    cli("eval", "-m", f"replay:{failing}", "--dataset", dataset, "-o", transcript, code=3)
    cli("eval", "-m", "oracle", "--samples", 2, "--dataset", dataset, "-o", transcript)
    readings = summary_readings(monkeypatch)
    asked = ["-m", "oracle", "-m", recall_runs["a"], "-m", f"replay:{failing}"]
    counted = cli("eval", *asked, "--dataset", dataset, "-o", transcript, "--format", "json", code=3)
    assert readings == []
    with monkeypatch.context() as patched:
        patched.setattr(Run, "first_summary", lambda self, conditions, wanted: None)
        read_back = cli("eval", *asked, "--dataset", dataset, "-o", transcript, "--format", "json", code=3)
    assert readings == [96]  # the oracle twice (two samples), A, and the failing replay
    assert counted.stdout == read_back.stdout
    cli("eval", "-m", "oracle", "--samples", 2, "--dataset", dataset, "-o", transcript)
    assert readings[1:] == [48]


def test_a_rerun_reads_its_answers_back_unless_the_first_pass_counted_each_once(cli, recall_runs, tmp_path,
                                                                               monkeypatch):
    """A question answered twice in the transcript, a limit that leaves questions of it out,
    an answer graded again, a run that wrote answers: each reads the transcript back."""
    dataset, transcript = recall_runs["dataset"], recall_runs["transcript"]
    readings = summary_readings(monkeypatch)
    lines = transcript.read_bytes().splitlines(keepends=True)
    answer = next(line for line in lines
                  if line.startswith(b'{"kind":"answer"') and b'"model":"oracle"' in line)
    twice = tmp_path / "twice.jsonl"
    twice.write_bytes(b"".join(lines) + answer)  # the oracle's first question answered again
    cli("eval", "-m", "oracle", "--dataset", dataset, "-o", twice)
    assert readings == [24]  # counted once, as its latest answer
    cli("eval", "-m", "oracle", "--dataset", dataset, "-n", 5, "-o", transcript)
    assert readings[1:] == [5]
    regraded = tmp_path / "regraded.jsonl"
    record = msgspec.json.decode(answer)
    record["score"]["correct"] = not record["score"]["correct"]
    regraded.write_bytes(b"".join(lines).replace(answer, msgspec.json.encode(record) + b"\n"))
    cli("eval", "-m", "oracle", "--dataset", dataset, "-o", regraded)
    assert readings[2:] == [24]
    cli("eval", "-m", "oracle", "-m", "sim:window", "--dataset", dataset, "-o", transcript)
    assert readings[3:] == [48]


def test_a_run_collects_young_objects_less_often_and_puts_the_collector_back(tmp_path):
    # Every item in flight holds its pairs; at the default threshold (700) a young collection
    # came every item or so and scanned the items in flight again and again.
    import gc

    from qmkar.plans import GeneratedPlan
    from qmkar.providers.oracle import OracleProvider
    from qmkar.render import default_template
    from qmkar.runner import YOUNG_OBJECTS, Run
    from qmkar.tasks import make_spec

    seen = []

    class Watched(OracleProvider):
        async def generate(self, item, request):
            seen.append((gc.get_threshold(), gc.get_freeze_count() > 0))
            return await super().generate(item, request)

    before = gc.get_threshold()
    assert before[0] < YOUNG_OBJECTS  # the interpreter's own, as a user's process starts
    run = Run(GeneratedPlan(make_spec("qmkar", pairs=20), 5, 0), [Watched()], tmp_path / "t.jsonl",
              default_template, {"temperature": 0})
    assert run.execute().stats.answered["oracle"] == 5
    assert seen == [((YOUNG_OBJECTS, *before[1:]), True)] * 5
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0

    # A program that turned the collector off (threshold 0) keeps it off.
    seen.clear()
    gc.set_threshold(0)
    try:
        run = Run(GeneratedPlan(make_spec("qmkar", pairs=20), 5, 0), [Watched()], tmp_path / "off.jsonl",
                  default_template, {"temperature": 0})
        assert run.execute().stats.answered["oracle"] == 5
        assert [threshold[0] for threshold, _ in seen] == [0] * 5
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)


@pytest.mark.skipif(cpus() < 2, reason="a machine with one CPU starts no question worker")
def test_a_runs_models_share_one_question_worker(tmp_path, monkeypatch):
    """Every model of a run reads the same generated questions: one worker makes them for all
    (ahead.Sharing), where each model used to start its own; each model still gets every one."""
    from qmkar import offload
    from qmkar.ahead import AHEAD_MIN
    from qmkar.plans import GeneratedPlan
    from qmkar.providers.oracle import OracleProvider
    from qmkar.render import default_template
    from qmkar.runner import Run
    from qmkar.tasks import make_spec

    started = []
    real_start = offload.start

    def start(module, job):
        started.append(module)
        return real_start(module, job)

    monkeypatch.setattr(offload, "start", start)
    providers = [OracleProvider(), OracleProvider(), OracleProvider()]
    for provider, name in zip(providers, ["oracle", "oracle-b", "oracle-c"], strict=True):
        provider.name = name
    n = AHEAD_MIN + 100
    path = tmp_path / "t.jsonl"
    run = Run(GeneratedPlan(make_spec("qmkar", pairs=20), n, 0), providers, path, default_template,
              {"temperature": 0})
    stats = run.execute().stats
    assert stats.answered == {"oracle": n, "oracle-b": n, "oracle-c": n}
    assert started == ["qmkar.ahead"]
    records = read(path).records
    assert Counter(record.model for record in records) == {"oracle": n, "oracle-b": n, "oracle-c": n}
    assert all(record.score is not None and record.score.correct for record in records)


def test_without_concurrency_a_simulated_memory_is_asked_64_questions_at_once_and_a_hosted_model_8(
        server, keyed, tmp_path):
    """Each model gets its own default (Provider.default_concurrency): a simulated memory
    answers the questions in flight as one batch, so it is asked SIM_CONCURRENCY at once, a
    hosted model CONCURRENCY; --concurrency sets both."""
    from qmkar.defaults import CONCURRENCY, SIM_CONCURRENCY
    from qmkar.plans import GeneratedPlan, SendOptions
    from qmkar.render import default_template
    from qmkar.runner import Run
    from qmkar.tasks import make_spec

    assert SIM_CONCURRENCY > CONCURRENCY
    server.delay = 0.02  # requests overlap
    for given, sim_most, hosted_most in ((None, SIM_CONCURRENCY, CONCURRENCY), (5, 5, 5)):
        server.most_in_flight = 0
        providers = [resolve("sim:linear"), resolve("openai:gpt-4o-mini", {
            "base_url": server.base_url, "api_key_env": "FAKE_API_KEY"})]
        send = SendOptions(concurrency=given, no_cache=True)
        n = 2 * SIM_CONCURRENCY + 10
        run = Run(GeneratedPlan(make_spec("qmkar", pairs=20), n, 0), providers,
                  tmp_path / f"{given}.jsonl", default_template, send.settings(), send.concurrency,
                  send.sendings(providers))
        assert run.execute().stats.answered == {"sim:linear": n, "openai:gpt-4o-mini": n}
        assert max(providers[0].batch_sizes) == sim_most, providers[0].batch_sizes
        assert server.most_in_flight == hosted_most

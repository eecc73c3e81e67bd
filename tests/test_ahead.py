"""Questions made ahead in a worker process (ahead.py): the same items as generated here,
whatever the worker does, and a run that a terminal's Ctrl-C stops cleanly, worker and all."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from qmkar import ahead as ahead_module
from qmkar import offload
from qmkar.ahead import AHEAD_MIN, Ahead, ahead
from qmkar.asking import make_record
from qmkar.condition import Condition
from qmkar.pricing import TokenCounter
from qmkar.records import ItemLine, Prompting, item_line
from qmkar.render import default_template, render
from qmkar.tasks import family, generate, make_spec
from qmkar.tasks.base import REGISTRY, Item, MadeAhead, Prompted, keep_made_ahead, made_ahead, outline_of
from qmkar.transcript import read
from qmkar.writer import TranscriptWriter
from tests.support.processes import workers_marked

SPEC = make_spec("qmkar", pairs=200)
CONDITION = Condition(provider="oracle", model="oracle", template="t", task="qmkar")
STARTED = datetime(2026, 1, 1, tzinfo=UTC)


def lines(items) -> list[str]:
    return [item.model_dump_json() for item in items]


def wait_until_up(maker: Ahead) -> None:
    deadline = time.monotonic() + 30
    while not maker.up and not maker.failed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert maker.up, "the worker did not start"


def take_all(maker: Ahead, after: Callable[[int], None], chunks: Sequence[int] | None = None) -> list[Item]:
    """The items of these chunks (by default all) of a started worker, calling `after(count so
    far)` after each one."""
    made: list[Item] = []
    try:
        wait_until_up(maker)
        for item in maker.read(maker.chunks if chunks is None else chunks):
            made.append(item)
            after(len(made))
    finally:
        maker.close()
    return made


def test_the_worker_makes_the_same_items_in_the_same_order():
    n = 20 * ahead_module.CHUNK + 5  # a last chunk that is not full
    maker = Ahead(SPEC, n, 7)

    def like_a_run(count: int) -> None:
        if count % ahead_module.CHUNK == 0:
            until_sent(maker, every=True)  # a run that sends: the worker gets ahead of it

    made = take_all(maker, like_a_run)
    # Every chunk but the first came from the worker (it is asked for the chunks after the
    # one being read, so the first is made here).
    assert maker.from_worker == 20
    assert lines(made) == lines(generate(SPEC, n, 7))


def until_sent(maker: Ahead, every: bool = False, seconds: float = 10) -> None:
    """What a run that sends looks like to the worker: it waits, here until the worker has sent
    a chunk the reading has not taken yet (`every`: every chunk it was asked for), or has none
    left to send (or fails, or `seconds` pass). A fixed sleep let a worker on a loaded machine
    fall a chunk behind the readings."""
    deadline = time.monotonic() + seconds
    while (maker.pending and (every or not maker.waiting()) and not maker.failed
           and time.monotonic() < deadline):
        time.sleep(0.002)


def test_the_worker_makes_only_the_chunks_asked_for():
    """A resume asks for the chunks with questions left (runner.Run._to_ask): the worker makes
    those, the last one short, as tasks.generate would."""
    n = 20 * ahead_module.CHUNK + 5
    chunks = [0, 3 * ahead_module.CHUNK, 4 * ahead_module.CHUNK, 20 * ahead_module.CHUNK]
    maker = Ahead(SPEC, n, 7)
    # A run that sends: the worker gets ahead of it. The first chunk is made here (the worker
    # is asked for the chunks after the one being read); the others come from the worker.
    made = take_all(maker, lambda count: until_sent(maker) if count % ahead_module.CHUNK == 1 else None,
                    chunks)
    assert maker.from_worker == 3
    every = list(generate(SPEC, n, 7))
    expected = [item for first in chunks for item in every[first:first + ahead_module.CHUNK]]
    assert lines(made) == lines(expected) and len(made) == 3 * ahead_module.CHUNK + 5
    assert lines(ahead(SPEC, n, 7, chunks=chunks)) == lines(expected)  # worker or not, the same


@pytest.mark.parametrize("task", sorted(REGISTRY))
def test_the_worker_makes_each_items_line_and_prompt_fields_as_the_run_would(task, tmp_path):
    """The text the worker makes with an item (its transcript line, its prompt's fields) is
    what the run's process would make from the item, and what it writes and sends is the same
    whoever made it."""
    spec = make_spec(task)
    n = 3 * ahead_module.CHUNK
    template = default_template(task)
    counters = [TokenCounter("openai", "gpt-4o"), TokenCounter("anthropic", "claude-sonnet-4-6")]
    maker = Ahead(spec, n, 5, prompting=Prompting(template, tuple(c.name for c in counters)))
    maker.wait = False  # some chunks made here too, as a run without --max-cost makes them
    maker.window = 0  # the reading asks for nothing ahead of it: only the two chunks asked below
    try:
        wait_until_up(maker)
        reading = maker.read(maker.chunks)  # counted before the worker is asked anything
        maker._ask(maker.chunks[:2])  # the first two chunks, waited for: the third is made here
        deadline = time.monotonic() + 30
        while len(maker.ready) < 2 and not maker.failed and time.monotonic() < deadline:
            time.sleep(0.01)
        made = list(reading)
    finally:
        maker.close()
    assert maker.from_worker == 2
    here = list(generate(spec, n, 5))
    assert lines(made) == lines(here)
    ahead_made = [item for item in made if made_ahead(item) is not None]
    assert ahead_made, "no item came from the worker"
    by_id = {item.id: item for item in here}
    for item in ahead_made:
        assert made_ahead(by_id[item.id]) is None
        assert made_ahead(item).line == ItemLine(item=by_id[item.id]).model_dump_json()
        assert made_ahead(item).fields == family(task).prompt_fields(by_id[item.id])
        assert render(item, template) == render(by_id[item.id], template)
        # The prompt sent is the worker's own string, and --max-cost's estimate counts what
        # the run would have counted (the worker's count, for each model's tokenizer).
        messages = render(item, template)
        assert messages[0]["content"] is made_ahead(item).prompted.text
        assert set(made_ahead(item).prompted.tokens) == {c.name for c in counters}
        for counter in counters:
            assert counter.count(messages, item) == counter.count(render(by_id[item.id], template))
    written = []
    for items in (made, here):
        path = tmp_path / f"{len(written)}.jsonl"
        with TranscriptWriter(path) as writer:
            for item in items:
                writer.write(make_record("oracle", item, template, CONDITION, STARTED, 0.0, [], None, None))
        written.append(path.read_bytes())
    assert written[0] == written[1]


def test_a_run_counting_prompts_waits_for_the_workers_chunks_unless_it_cannot_start(monkeypatch):
    """With tokenizers to count with (--max-cost), every chunk comes from the worker, even those
    the run reads before the worker is up: counting here would load the tokenizer's tables."""
    n = 4 * ahead_module.CHUNK
    prompting = Prompting(default_template("qmkar"), (TokenCounter("openai", "gpt-4o").name,))
    monkeypatch.setattr(ahead_module, "WAIT", 60.0)  # a worker slow to start on a loaded machine
    maker = Ahead(SPEC, n, 3, prompting=prompting)
    made = list(maker.read(maker.chunks))  # read at once, before the worker has started
    maker.close()
    assert maker.from_worker == 4
    assert all(made_ahead(item).prompted.tokens for item in made)
    assert lines(made) == lines(generate(SPEC, n, 3))
    # No worker: made here without waiting (WAIT made long, so a wait would show).
    monkeypatch.setattr(offload, "start", lambda *args: None)
    monkeypatch.setattr(ahead_module, "WAIT", 120.0)
    clock = time.monotonic()
    alone = Ahead(SPEC, n, 3, prompting=prompting)
    assert lines(alone.read(alone.chunks)) == lines(made) and alone.from_worker == 0
    assert time.monotonic() - clock < 60


def test_an_item_changed_or_copied_drops_the_text_made_ahead_for_it():
    item = next(iter(generate(SPEC, 1, 0)))
    made = MadeAhead("stale line", {"pairs": "stale"})
    keep_made_ahead(item, made)
    assert made_ahead(item) is made and item == next(iter(generate(SPEC, 1, 0)))
    assert made_ahead(item.model_copy(update={"source": "elsewhere"})) is None
    assert made_ahead(item.model_copy()) is None
    assert made_ahead(item) is made
    item.params = item.params.model_copy(update={"cell": "a"})  # as a sweep labels its items
    assert made_ahead(item) is None
    assert '"cell":"a"' in item_line(item)
    assert "stale" not in render(item, default_template("qmkar"))[0]["content"]


def test_a_prompt_counted_ahead_is_used_for_its_own_text_and_template_only():
    item = next(iter(generate(SPEC, 1, 0)))
    template, counter = default_template("qmkar"), TokenCounter("openai", "gpt-4o")
    text = render(item, template)[0]["content"]
    fields = family("qmkar").prompt_fields(item)
    keep_made_ahead(item, MadeAhead("line", fields, Prompted(template.text, text, {counter.name: 5})))
    messages = render(item, template)
    assert messages[0]["content"] is text
    assert counter.count(messages, item) == 5 + 7  # the count made ahead, plus the chat format's
    fresh = counter.count([{"role": "user", "content": text}])
    assert fresh > 1000
    assert counter.count([{"role": "user", "content": "x" + text}], item) > fresh  # another text
    other = template._replace(text="Again: " + template.text)
    assert render(item, other)[0]["content"] == "Again: " + text  # another template renders afresh
    assert counter.count(render(item, other), item) > fresh
    assert TokenCounter("anthropic", "claude-sonnet-4-6").count(messages, item) != 5 + 7  # not counted ahead


class Told:
    """A ReadProgress that keeps what it is told."""

    def __init__(self, step: int) -> None:
        self.step, self.totals, self.advances = step, [], []

    def start(self, total: int) -> None:
        self.totals.append(total)

    def advance(self, done: int) -> None:
        self.advances.append(done)


@pytest.mark.parametrize("worker", ["up", "none"])
def test_outlines_are_the_generated_items_outlines_whoever_makes_them(worker, monkeypatch):
    if worker == "none":
        monkeypatch.setattr(offload, "start", lambda *args: None)
    n = 10 * ahead_module.CHUNK + 3
    told = Told(step=50)
    made = ahead_module.outlines(SPEC, n, 4, told)
    assert made == [outline_of(item) for item in generate(SPEC, n, 4)]
    assert len({id(question.params) for question in made}) == 1  # equal params, one object
    # The bar (cli_progress.CountingBar) is told n, then every step or so, and ends full.
    assert told.totals == [n] and sum(told.advances) == n
    assert all(done > 0 for done in told.advances) and 1 < len(told.advances) <= n // 50 + 1


def test_the_outline_bar_counts_what_the_worker_sent_before_the_run_reads_it():
    found = [outline_of(item) for item in generate(SPEC, 100, 2)]
    told = Told(step=10)
    sent = iter([40, 40, 30, 20, 10, 0, 0, 0, 0, 0])  # the worker's questions waiting, at each step
    assert ahead_module.sharing_params(found, 100, told, lambda: next(sent)) == found
    # 10 here and 40 waiting: 50 named; a step later 60, ...; never past 100, never back.
    assert told.advances == [50, 10, 10, 10, 10, 10]


def interleaved(readings: list, pace: list[int], between: Callable[[], None]) -> list[list[Item]]:
    """Read several readings in turn, pace[i] items of reading i at each turn (as a run's
    models take turns on its event loop), calling `between()` after each round of turns (the
    models' requests are out), until all are done."""
    made: list[list[Item]] = [[] for _ in readings]
    left = set(range(len(readings)))
    while left:
        for index in sorted(left):
            for _ in range(pace[index]):
                item = next(readings[index], None)
                if item is None:
                    left.discard(index)
                    break
                made[index].append(item)
        between()
    return made


def test_a_runs_models_share_one_worker_and_each_reads_every_item(monkeypatch):
    """Two models' readings of the same questions start one worker, take its chunks between
    them (the slower one what the faster one caused to be made), and each gets exactly the
    generated items; the worker stops when both readings have ended."""
    started = []
    real_start = offload.start
    monkeypatch.setattr(offload, "start", lambda *args: started.append(args) or real_start(*args))
    asked = []  # the chunks the run asked the worker for, by first index
    request = ahead_module.REQUEST
    counted = types.SimpleNamespace(size=request.size,
                                    pack=lambda *span: asked.append(span[0]) or request.pack(*span))
    monkeypatch.setattr(ahead_module, "REQUEST", counted)
    n = 24 * ahead_module.CHUNK + 7
    sharing = ahead_module.Sharing(["a", "b"])
    try:
        readings = [ahead(SPEC, n, 9, sharing=sharing.of("a")), ahead(SPEC, n, 9, sharing=sharing.of("b"))]
        first = next(readings[0])  # the worker starts with the first reading
        maker = sharing.makers[0].maker
        wait_until_up(maker)
        made = interleaved(readings, [3, 2], lambda: until_sent(maker, every=True))
        made[0].insert(0, first)
    finally:
        sharing.close()
    expected = lines(generate(SPEC, n, 9))
    assert lines(made[0]) == expected and lines(made[1]) == expected
    assert len(started) == 1  # one worker, not one a model
    # Both readings took every chunk but the first from it, and each chunk was asked for once:
    # the slower reading took those the faster one asked for. The first is made here (read
    # before the worker was up, and never asked for).
    assert maker.from_worker == 2 * 24
    assert sorted(asked) == list(range(ahead_module.CHUNK, n, ahead_module.CHUNK))
    assert not sharing.makers and maker.process is None  # stopped when the two readings ended
    assert not maker.ready and not maker.needed


def test_a_reading_far_behind_asks_again_for_chunks_not_kept_for_it():
    """Past KEEP kept chunks, a chunk the fastest reading passed is dropped, and a reading
    behind asks the worker for it again: still exactly the generated items."""
    n = (ahead_module.KEEP + 20) * ahead_module.CHUNK
    sharing = ahead_module.Sharing(["a", "b"])
    try:
        fast, slow = ahead(SPEC, n, 4, sharing=sharing.of("a")), ahead(SPEC, n, 4, sharing=sharing.of("b"))
        behind = [next(slow)]  # the slow reading counts too: chunks are kept for it
        maker = sharing.makers[0].maker
        wait_until_up(maker)
        ahead_of = []
        for item in fast:  # the fast reading ends before the slow one goes on
            ahead_of.append(item)
            if len(ahead_of) % ahead_module.CHUNK == 0:
                until_sent(maker, every=True)  # its requests are out: the worker gets ahead of it
        kept = len(maker.ready)
        behind += list(slow)
    finally:
        sharing.close()
    expected = lines(generate(SPEC, n, 4))
    assert lines(ahead_of) == expected and lines(behind) == expected
    # The fast reading took every chunk but the first from the worker (the slow one reads
    # without a pause: the chunks it asks for again may be made here or come from the worker).
    assert maker.from_worker >= ahead_module.KEEP + 20 - 1
    assert kept <= ahead_module.KEEP + 1  # what was kept for the slow reading stayed bounded


def test_a_reading_that_stops_early_keeps_nothing_for_itself():
    n = 12 * ahead_module.CHUNK
    sharing = ahead_module.Sharing(["a", "b"])
    try:
        stopping, reading = (ahead(SPEC, n, 2, sharing=sharing.of(model)) for model in "ab")
        rest = [next(reading)]
        taken = list(itertools.islice(stopping, 2 * ahead_module.CHUNK))
        maker = sharing.makers[0].maker
        stopping.close()  # a model stopped (a fatal error): it needs none of the rest
        # Only the other reading still needs chunks: its 12 but the first, which it passed.
        assert maker.needed == {first: 1 for first in range(ahead_module.CHUNK, n, ahead_module.CHUNK)}
        rest += list(reading)
    finally:
        sharing.close()
    expected = lines(generate(SPEC, n, 2))
    assert lines(taken) == expected[:2 * ahead_module.CHUNK] and lines(rest) == expected


def test_a_shared_worker_waits_for_every_model_still_asking_and_no_longer():
    """A worker is kept while a model that has not read its questions yet may still come (a
    plan sized in tokens: a model behind reaches this size later), and stopped when that
    model leaves the run instead; a model leaving does not stop a worker others are reading."""
    n = 10 * ahead_module.CHUNK
    sharing = ahead_module.Sharing(["a", "b", "c"])
    try:
        reading = ahead(SPEC, n, 6, sharing=sharing.of("c"))
        first = next(reading)
        maker = sharing.makers[0].maker
        sharing.leave("a")  # done asking (it had nothing to ask) while "c" reads
        assert sharing.makers and maker.process is not None
        made = [first, *reading]
        assert sharing.makers and maker.process is not None  # "b" has not read these yet
        sharing.leave("b")  # it stopped (a bad key, say) before it came to them
        assert not sharing.makers and maker.process is None
    finally:
        sharing.close()
    assert lines(made) == lines(generate(SPEC, n, 6))


def test_a_worker_that_dies_leaves_the_rest_to_the_run():
    n = 12 * ahead_module.CHUNK
    maker = Ahead(SPEC, n, 3)

    def kill_at_two_chunks(count: int) -> None:
        if count == 2 * ahead_module.CHUNK:
            assert maker.process is not None
            maker.process.kill()

    made = take_all(maker, kill_at_two_chunks)
    assert lines(made) == lines(generate(SPEC, n, 3))


def test_a_worker_running_another_qmkar_is_not_used(monkeypatch):
    # The worker reports where its qmkar lives; here that is made to differ.
    monkeypatch.setattr(offload, "HERE", "/elsewhere/qmkar")
    maker = Ahead(SPEC, 4 * ahead_module.CHUNK, 1)
    try:
        deadline = time.monotonic() + 30
        while not maker.failed and time.monotonic() < deadline:
            time.sleep(0.01)
        made = list(maker.read(maker.chunks))
    finally:
        maker.close()
    assert maker.failed and not maker.up and maker.from_worker == 0
    assert lines(made) == lines(generate(SPEC, 4 * ahead_module.CHUNK, 1))


def test_small_plans_start_no_worker(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a worker was started for a small plan")

    monkeypatch.setattr(ahead_module, "Ahead", refuse)
    assert lines(ahead(SPEC, AHEAD_MIN - 1, 0)) == lines(generate(SPEC, AHEAD_MIN - 1, 0))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="looks for the worker in /proc")
@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU starts no worker")
def test_ctrl_c_in_the_terminal_stops_the_run_and_its_worker_without_a_traceback(tmp_path):
    # A terminal's Ctrl-C goes to the whole process group: the run and anything it started
    # in that group. The worker is in a session of its own and is stopped by the run.
    mark = f"QMKAR_TEST_MARK={uuid.uuid4().hex}"
    out = tmp_path / "t.jsonl"
    command = [sys.executable, "-c", "from qmkar.cli import main; main()", "eval", "-m", "sim:delta",
               "-n", "3000", "--pairs", "200", "-o", str(out)]
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1]}
    running = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    # Each answer is two lines (its question's, its own): wait for about 100 answers.
    while time.monotonic() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 200):
        time.sleep(0.02)
    assert workers_marked(mark), "the run should have a worker making its questions"
    os.killpg(running.pid, signal.SIGINT)
    stderr = running.communicate(timeout=60)[1]
    assert running.returncode == 130, stderr
    assert "Traceback" not in stderr and "resume with:" in stderr
    deadline = time.monotonic() + 5
    while workers_marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workers_marked(mark)
    records = read(out).records
    assert 90 <= len(records) < 3000 and all(r.answered for r in records)


class Damaging:
    """A worker's stdout that changes DAMAGED bytes as they pass, from offset `at` on."""

    DAMAGED = 64

    def __init__(self, stream, at: int) -> None:
        self.stream, self.at, self.read_so_far = stream, at, 0

    def read(self, size: int) -> bytes:
        data = self.stream.read(size)
        start, self.read_so_far = self.read_so_far, self.read_so_far + len(data)
        changed = bytearray(data)
        for offset in range(max(self.at, start), min(self.at + self.DAMAGED, self.read_so_far)):
            changed[offset - start] ^= 0x55
        return bytes(changed)

    def close(self) -> None:
        self.stream.close()


def test_a_damaged_stream_from_the_worker_leaves_the_rest_to_the_run(monkeypatch):
    # A byte lost or changed between the processes (a profiler that stops them to sample
    # has been seen to do it) must not reach the run: it gets the same items, made here.
    start = offload.start

    def damaged(module: str, job: bytes):
        process = start(module, job)
        if process is not None:
            process.stdout = Damaging(process.stdout, 150_000)  # within the third chunk it sends
        return process

    monkeypatch.setattr(offload, "start", damaged)
    n = 12 * ahead_module.CHUNK
    maker = Ahead(SPEC, n, 5)

    def wait_for_the_damage(count: int) -> None:
        deadline = time.monotonic() + 30
        while count == 1 and not maker.failed and len(maker.ready) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the worker has sent the chunks the damage is in, or given up

    made = take_all(maker, wait_for_the_damage)
    assert maker.failed
    assert lines(made) == lines(generate(SPEC, n, 5))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="looks for the worker in /proc")
@pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU starts no worker")
def test_a_run_counting_prompts_waits_for_a_stuck_worker_once(monkeypatch):
    """A worker alive but stuck (stopped here with SIGSTOP) costs a --max-cost run one WAIT,
    not one for every chunk: the first chunk that does not come ends the waiting."""
    monkeypatch.setattr(ahead_module, "WAIT", 1.0)
    n = 40 * ahead_module.CHUNK
    prompting = Prompting(default_template("qmkar"), (TokenCounter("openai", "gpt-4o").name,))
    maker = Ahead(SPEC, n, 3, prompting=prompting)
    try:
        wait_until_up(maker)  # asked nothing yet: the run asks as it reads
        assert maker.process is not None
        os.kill(maker.process.pid, signal.SIGSTOP)
        stat = Path(f"/proc/{maker.process.pid}/stat")
        deadline = time.monotonic() + 30
        while stat.read_text().rpartition(")")[2].split()[0] != "T" and time.monotonic() < deadline:
            time.sleep(0.01)  # stopped before the run asks it anything
        clock = time.monotonic()
        made = list(maker.read(maker.chunks))
        waited = time.monotonic() - clock
    finally:
        if maker.process is not None:
            os.kill(maker.process.pid, signal.SIGCONT)
        maker.close()
    assert maker.from_worker == 0 and not maker.wait
    assert waited < 20 * ahead_module.WAIT  # one WAIT, and the 40 chunks made here
    assert lines(made) == lines(generate(SPEC, n, 3))

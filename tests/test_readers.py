"""Transcripts read by two processes (readers.py): the same records (report's and plot's
counts), warnings and errors as read here alone, and a reader that fails or runs another
qmkar changes nothing but the time."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from qmkar import offload, readers
from qmkar.errors import TranscriptError
from qmkar.selection import Selection
from tests.support.transcripts import values, write_replay

pytestmark = pytest.mark.skipif(offload.cpus() < 2, reason="a machine with one CPU starts no reader")


@pytest.fixture
def two_files(cli, recall_runs, tmp_path) -> list[Path]:
    """The oracle and replay A in one transcript; in another, on the same questions, replay B
    and a replay C that refuses one question, answers another with no number and leaves one
    unanswered (an error record)."""
    first, second = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    dataset = recall_runs["dataset"]
    shapes = {0: "Sorry, I cannot find that key.", 1: "The values are listed above.", 2: None}
    c = write_replay(dataset, tmp_path / "c.jsonl", lambda i, item: shapes.get(i, values(item)))
    cli("eval", "-m", "oracle", "-m", recall_runs["a"], "--dataset", dataset, "-o", first)
    cli("eval", "-m", recall_runs["b"], "-m", f"replay:{c}", "--dataset", dataset, "-o", second, code=3)
    return [first, second]


@pytest.fixture
def read_here(monkeypatch) -> list[Path]:
    """The files this process reads itself (the rest came from the reader)."""
    paths: list[Path] = []
    original = readers.read_latest

    def counted(path, warn=None, contents=False, progress=None):
        paths.append(path)
        return original(path, warn, contents, progress)

    monkeypatch.setattr(readers, "read_latest", counted)
    return paths


@pytest.fixture
def workers(monkeypatch) -> list[subprocess.Popen[bytes]]:
    started: list[subprocess.Popen[bytes]] = []
    original = offload.start

    def start(module, job):
        started.append(original(module, job))
        return started[-1]

    monkeypatch.setattr(offload, "start", start)
    return started


def at_start_of(paths: list[Path], index: int) -> float:
    """The SHARE that gives the reader paths[index:] whole."""
    sizes = [path.stat().st_size for path in paths]
    return sum(sizes[index:]) / sum(sizes)


def read(paths: list[Path], monkeypatch, split: bool, share: float = 0.5) -> tuple[list, list[str]]:
    monkeypatch.setattr(readers, "SPLIT_MIN", 0 if split else 1 << 60)
    monkeypatch.setattr(readers, "SHARE", share)
    warnings: list[str] = []
    found = list(readers.read_each(paths, warnings.append, contents=True))
    return found, warnings


def test_the_second_file_is_read_by_a_reader_and_comes_back_the_same(two_files, monkeypatch, read_here,
                                                                      workers):
    split, _ = read(two_files, monkeypatch, split=True, share=at_start_of(two_files, 1))
    assert readers._parts(two_files) == [readers.Part(two_files[1], 0, two_files[1].stat().st_size)]
    assert read_here == [two_files[0]] and len(workers) == 1
    read_here.clear()
    alone, _ = read(two_files, monkeypatch, split=False)
    assert read_here == two_files
    assert split == alone  # every field, the fingerprints of the questions among them
    assert [len(records) for records in split] == [48, 48]
    c = sorted((r for r in split[1] if r.model.endswith("c.jsonl")), key=lambda r: r.item.id)
    flags = [(r.refused, r.unparsed, r.error is not None) for r in c[:4]]
    assert flags == [(True, False, False), (False, True, False), (False, False, True), (False, False, False)]


@pytest.mark.parametrize("cut_in", [0, 1])
def test_the_files_bytes_are_cut_anywhere_and_come_back_the_same(two_files, monkeypatch, replies, cut_in):
    """The reader's share of the bytes, as if the files were one: the end of the file holding
    the cut (here halfway into it), and every file after it whole."""
    sizes = [path.stat().st_size for path in two_files]
    cut = sum(sizes[:cut_in]) + sizes[cut_in] // 2
    split, _ = read(two_files, monkeypatch, split=True, share=1 - cut / sum(sizes))
    parts = readers._parts(two_files)
    assert [part.path for part in parts] == two_files[cut_in:]
    assert 0 < parts[0].start < parts[0].size and [part.start for part in parts[1:]] == [0] * (1 - cut_in)
    assert len(replies) == len(parts)
    alone, _ = read(two_files, monkeypatch, split=False)
    assert split == alone and [len(records) for records in split] == [48, 48]


def test_compare_pairs_runs_read_in_two_processes(cli, two_files, monkeypatch, read_here):
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    split = cli("compare", "--format", "json", *two_files).stdout
    assert read_here == [two_files[0]]
    monkeypatch.setattr(readers, "SPLIT_MIN", 1 << 60)
    assert cli("compare", "--format", "json", *two_files).stdout == split
    paired = [p for p in json.loads(split)["paired"] if p["n"]]
    assert len(paired) == 6  # B and C, read by the reader, pair with the oracle and A, read here


def tamper(path: Path) -> None:
    """One stored score that contradicts its answer, and a torn last line."""
    lines = path.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if '"kind":"answer"' in line)
    record = json.loads(lines[index])
    record["answer"] = "1"
    lines[index] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n" + lines[index][:40])


def test_warnings_come_in_file_order_whoever_read_the_file(two_files, monkeypatch, read_here):
    for path in two_files:
        tamper(path)
    split, warned = read(two_files, monkeypatch, split=True, share=at_start_of(two_files, 1))
    assert read_here == [two_files[0]]
    alone, warned_alone = read(two_files, monkeypatch, split=False)
    assert split == alone
    assert warned == warned_alone
    assert [message.split(":")[0] for message in warned] == [str(two_files[0])] * 2 + [str(two_files[1])] * 2


def test_a_bad_line_in_the_readers_file_is_the_same_error_read_here(cli, two_files, monkeypatch, read_here):
    lines = two_files[1].read_text().splitlines()
    lines[5] = lines[5].replace('"sample":0', '"sample":"zero"')
    two_files[1].write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    monkeypatch.setattr(readers, "SHARE", at_start_of(two_files, 1))
    with pytest.raises(TranscriptError) as split:
        list(readers.read_each(two_files))
    assert read_here == two_files  # the reader gave it back; read here, it raised
    monkeypatch.setattr(readers, "SPLIT_MIN", 1 << 60)
    with pytest.raises(TranscriptError) as alone:
        list(readers.read_each(two_files))
    assert str(split.value) == str(alone.value) and "line 6" in str(split.value)


def test_an_error_in_a_file_read_here_leaves_no_reader_running(two_files, monkeypatch, workers):
    two_files[0].write_text(two_files[0].read_text() + "not json\n")
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    with pytest.raises(TranscriptError, match="one.jsonl"):
        list(readers.read_each(two_files))
    assert len(workers) == 1 and workers[0].poll() is not None


def test_closing_a_reader_stops_it_whatever_it_was_doing(two_files, workers):
    reader = readers.Reader([readers.Part(path, 0) for path in two_files], contents=True)
    reader.close()  # long before it could have read anything: it is still starting
    assert workers[0].returncode == -signal.SIGKILL


def test_a_reader_running_another_qmkar_is_not_used(two_files, monkeypatch, read_here):
    monkeypatch.setattr(offload, "HERE", "/elsewhere/qmkar")
    split, _ = read(two_files, monkeypatch, split=True, share=at_start_of(two_files, 1))
    assert read_here == two_files
    alone, _ = read(two_files, monkeypatch, split=False)
    assert split == alone


def test_a_question_has_the_same_fingerprint_in_every_process():
    code = ("from qmkar.slim import fingerprint; "
            "print(fingerprint('qmkar', b'[[1,2],[3,4]]', None, [1], [2], None))")
    found = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(found) == 1


# --- one file, read in two parts ------------------------------------------------------------


def test_the_end_of_one_file_is_read_by_the_reader_and_comes_back_the_same(two_files, monkeypatch, replies):
    """The second model's answers, at the file's end, refer to items written at its start."""
    (split,), _ = read(two_files[:1], monkeypatch, split=True)
    assert len(replies) == 1 and 0 < replies[0] < 48
    (alone,), _ = read(two_files[:1], monkeypatch, split=False)
    assert len(replies) == 1
    assert split == alone and len(alone) == 48


def test_records_read_here_and_by_the_reader_share_their_names(two_files, monkeypatch, replies):
    """A model's name, label and condition id are held once, not once per answer: 100k
    records would otherwise hold 100k copies of each."""
    (records,), _ = read(two_files[:1], monkeypatch, split=True)
    assert len(replies) == 1
    for name in ("model", "label", "condition_id"):
        for value in {getattr(r, name) for r in records}:
            if value is not None:
                assert len({id(getattr(r, name)) for r in records if getattr(r, name) == value}) == 1, name
    assert len({id(r.item.task) for r in records}) == 1


@pytest.mark.parametrize("share", [0.3, 0.5, 0.9])
def test_a_file_read_in_two_parts_warns_as_one(two_files, monkeypatch, replies, share):
    tamper(two_files[1])  # a contradicting score near the start, a torn last line
    lines = two_files[1].read_text().splitlines(keepends=True)
    index = max(i for i, line in enumerate(lines) if '"kind":"answer"' in line and line.endswith("\n"))
    record = json.loads(lines[index])
    record["answer"] = "1"  # and another near the end
    lines[index] = json.dumps(record) + "\n"
    two_files[1].write_text("".join(lines))
    split, warned = read(two_files[1:], monkeypatch, split=True, share=share)
    assert len(replies) == 1
    alone, warned_alone = read(two_files[1:], monkeypatch, split=False)
    assert split == alone
    assert warned == warned_alone and len(warned) == 2 and "2 answer(s)" in warned[0]


def test_a_torn_line_alone_in_the_readers_part_is_judged_here(two_files, monkeypatch, replies, workers):
    tamper(two_files[0])
    data = two_files[0].read_bytes()
    torn = data.rindex(b"\n") + 1
    split, warned = read(two_files[:1], monkeypatch, split=True, share=(len(data) - torn + 1) / len(data))
    assert len(workers) == 1  # the reader was given the torn line alone,
    assert replies == []  # and handed it back: torn or bad depends on the lines before
    alone, warned_alone = read(two_files[:1], monkeypatch, split=False)
    assert split == alone and warned == warned_alone and "unfinished last line" in warned[-1]


def test_a_bad_line_in_the_readers_part_is_the_same_error_with_its_line_number(two_files, monkeypatch,
                                                                                replies):
    lines = two_files[0].read_text().splitlines()
    lines[-3] = lines[-3].replace('"sample":0', '"sample":"zero"')
    two_files[0].write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    with pytest.raises(TranscriptError) as split:
        list(readers.read_each(two_files[:1]))
    assert replies == []
    monkeypatch.setattr(readers, "SPLIT_MIN", 1 << 60)
    with pytest.raises(TranscriptError) as alone:
        list(readers.read_each(two_files[:1]))
    assert str(split.value) == str(alone.value) and f"line {len(lines) - 2}" in str(split.value)


def test_a_bad_line_in_a_counting_readers_part_is_the_same_error(two_files, monkeypatch, counted):
    """The same through report's counting (count_each): the reader sends nothing for the part,
    which is read here and raises as a reading here alone does."""
    lines = two_files[0].read_text().splitlines()
    lines[-3] = lines[-3].replace('"sample":0', '"sample":"zero"')
    two_files[0].write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    with pytest.raises(TranscriptError) as split:
        list(readers.count_each(two_files[:1], Selection()))
    assert counted == []
    monkeypatch.setattr(readers, "SPLIT_MIN", 1 << 60)
    with pytest.raises(TranscriptError) as alone:
        list(readers.count_each(two_files[:1], Selection()))
    assert str(split.value) == str(alone.value) and f"line {len(lines) - 2}" in str(split.value)


def report(cli, monkeypatch, paths: list[Path], *options: str, share: float = 0.5) -> tuple[str, str]:
    """report's JSON of `paths`, counted with a reader (given the files' last `share` of
    bytes) and alone, and its warnings."""
    monkeypatch.setattr(readers, "SHARE", share)
    found = []
    for split_min in (0, 1 << 60):
        monkeypatch.setattr(readers, "SPLIT_MIN", split_min)
        result = cli("report", "--format", "json", *options, *paths)
        found.append((result.stdout, result.stderr))
    assert found[0] == found[1]
    return found[0]


def test_report_of_one_file_read_in_two_parts_is_the_same(cli, two_files, monkeypatch, counted):
    """The reader counts the file's end and sends its tallies, which join those counted here."""
    report(cli, monkeypatch, two_files[:1])
    assert counted == ["tallies"]


def test_report_without_a_reader_counts_every_part_here(cli, two_files, monkeypatch, counted):
    monkeypatch.setattr(offload, "start", lambda module, job: None)
    report(cli, monkeypatch, two_files)
    assert counted == []


@pytest.mark.parametrize("cut_in", [0, 1])
def test_report_of_files_cut_anywhere_is_the_same(cli, two_files, monkeypatch, counted, cut_in):
    """Cut in the first file, the reader counts its end and the second file; cut in the
    second, its end. With --model, each side counts only what is kept."""
    sizes = [path.stat().st_size for path in two_files]
    share = 1 - (sum(sizes[:cut_in]) + sizes[cut_in] // 2) / sum(sizes)
    text, _ = report(cli, monkeypatch, two_files, share=share)
    assert counted == ["tallies"] * (2 - cut_in)
    assert len(json.loads(text)) == 4
    counted.clear()
    text, _ = report(cli, monkeypatch, two_files, "--model", "oracle", "--model", "*c.jsonl", share=share)
    assert counted == ["tallies"] * (2 - cut_in)
    assert len(json.loads(text)) == 2


def test_a_question_asked_again_at_the_end_is_counted_once_by_its_latest_answer(cli, two_files, monkeypatch,
                                                                               counted, tmp_path):
    """The file's first answer asked again at its end, answered wrong this time: the reader's
    part holds a key also read here, so its tallies cannot be joined to those counted here.
    It is asked for its records, sent after the next file's tallies, and the question counts
    once, by its latest answer, as it does read alone."""
    lines = two_files[0].read_text().splitlines(keepends=True)
    first = json.loads(next(line for line in lines if '"kind":"answer"' in line))
    assert first["score"]["correct"]
    again = {**first, "answer": "1", "score": {**first["score"], "correct": False}}
    with two_files[0].open("a") as out:
        out.write(json.dumps(again) + "\n")
    text, _ = report(cli, monkeypatch, two_files, share=at_start_of(two_files, 0) * 0.7)
    assert counted == ["tallies", "records", "tallies"]
    (row,) = (row for row in json.loads(text) if row["model"] == first["model"])
    assert (row["n"], row["correct"]) == (24, 23)


def test_a_part_answering_items_written_before_it_is_given_back(cli, recall_runs, monkeypatch, replies,
                                                                 tmp_path):
    """A second model asked later into the same file: its answers, the file's end, are to the
    items written with the first model's. The reader would decode every one of them again; it
    gives the part back, and the output is the same. A file of one model keeps its reader."""
    monkeypatch.setattr(readers, "CHECK_EVERY", 5)
    later = tmp_path / "later.jsonl"
    for model in ("oracle", recall_runs["a"]):
        cli("eval", "-m", model, "--dataset", recall_runs["dataset"], "-o", later)
    (split,), _ = read([later], monkeypatch, split=True, share=0.4)
    assert replies == []
    (alone,), _ = read([later], monkeypatch, split=False)
    assert split == alone and len(alone) == 48
    one_model = tmp_path / "one-model.jsonl"
    cli("eval", "-m", "oracle", "-n", "40", "--pairs", "10", "-o", one_model)
    split, _ = read([one_model], monkeypatch, split=True, share=0.4)
    assert len(replies) == 1
    alone, _ = read([one_model], monkeypatch, split=False)
    assert split == alone


def test_report_counts_a_files_records_before_it_reads_the_next(two_files, tmp_path):
    """readers.count_each gives each file's tallies as soon as that file is read (report holds
    one file's records at a time): here the first file's come whole before the second, which
    is not a transcript, is read at all."""
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"hello": 1}\n')
    (alone,) = readers.count_each([two_files[0]], Selection())
    reading = readers.count_each([two_files[0], bad], Selection())
    first = next(reading)
    assert first.records == alone.records == 48
    counted = [tally.records for tally in first.tallies]
    assert counted == [tally.records for tally in alone.tallies] == [24, 24]
    with pytest.raises(TranscriptError, match="notes.jsonl line 1 is not a qmkar transcript record"):
        next(reading)


def test_a_part_given_back_leaves_the_later_parts_with_their_own_files(cli, recall_runs, monkeypatch,
                                                                        tmp_path):
    """The reader gives back the end of the first file (its answers are to items written
    before it) and goes on to the files after it, the next of them large: this process reads
    that end itself, then takes each later file's records, each from its own file, whenever
    the reader's replies arrive."""
    monkeypatch.setattr(readers, "CHECK_EVERY", 5)
    later = tmp_path / "later.jsonl"
    for model in ("oracle", recall_runs["a"]):
        cli("eval", "-m", model, "--dataset", recall_runs["dataset"], "-o", later)
    large = tmp_path / "large.jsonl"
    cli("eval", "-m", "oracle", "-n", "3000", "--pairs", "10", "-o", large)
    paths = [later, large]
    for seed in (3, 4, 5):
        paths.append(tmp_path / f"small-{seed}.jsonl")
        cli("eval", "-m", "oracle", "-n", seed, "--pairs", "10", "--seed", seed, "-o", paths[-1])
    share = 1 - 0.6 * later.stat().st_size / sum(path.stat().st_size for path in paths)
    split, _ = read(paths, monkeypatch, split=True, share=share)
    assert [part.path for part in readers._parts(paths)] == paths
    alone, _ = read(paths, monkeypatch, split=False)
    assert [len(records) for records in alone] == [48, 3000, 3, 4, 5]
    assert [len(records) for records in split] == [48, 3000, 3, 4, 5]
    assert split == alone


def test_a_part_given_back_before_the_next_reply_arrives_shifts_no_reply(monkeypatch):
    """The same, made certain by a pipe that stands in for the reader's stdout: the empty
    frame of a part given back is taken before the next part's reply is sent. Each later
    part gets its own reply, not a None for the reader's end."""
    read_end, write_end = os.pipe()

    class Process:
        stdout = os.fdopen(read_end, "rb")

    monkeypatch.setattr(offload, "start", lambda module, job: Process)
    reader = readers.Reader([readers.Part(Path(f"part-{i}.jsonl"), 0) for i in range(3)], contents=False)
    with os.fdopen(write_end, "wb") as sink:
        offload.write_frame(sink, offload.HERE.encode())
        offload.write_frame(sink, b"")
        assert reader.take() is None
        for regraded in (2, 3):
            offload.write_frame(sink, readers._reply([], regraded, 0))
    later = [reader.take() for _ in range(2)]
    assert [reply.regraded if reply else None for reply in later] == [2, 3]
    reader.process = None  # a stand-in: nothing to stop
    Process.stdout.close()


def _random_folder(cli, recall_runs, tmp_path: Path, rng: random.Random) -> list[Path]:
    """Two to four transcripts laid out as users make them: one to three models each, the
    later ones asked into the same file after the first (their answers to items written
    before them), one that leaves a question unanswered (an error record), a file of other
    questions, questions asked again at a file's end with another answer, a torn last line."""
    dataset = recall_runs["dataset"]
    gaps = write_replay(dataset, tmp_path / "gaps.jsonl",
                        lambda i, item: None if i % 7 == 3 else values(item))
    models = ["oracle", recall_runs["a"], recall_runs["b"], f"replay:{gaps}"]
    paths = []
    for number in range(rng.randint(2, 4)):
        path = tmp_path / f"{number}.jsonl"
        if rng.random() < 0.25:
            cli("eval", "-m", "oracle", "-n", rng.randint(3, 30), "--pairs", 10, "--seed", number, "-o", path)
        else:
            for model in rng.sample(models, rng.randint(1, 3)):
                result = cli("eval", "-m", model, "--dataset", dataset, "-o", path, ok=False)
                assert result.exit_code in (0, 3), result.output
        lines = path.read_text().splitlines(keepends=True)
        answered = [json.loads(line) for line in lines if line.startswith('{"kind":"answer"')]
        answered = [record for record in answered if record["score"] is not None]
        with path.open("a") as out:
            for record in rng.sample(answered, rng.choice((0, 0, 1, 3))):
                score = {**record["score"], "correct": not record["score"]["correct"]}
                text = rng.choice(("1", "no idea", record["answer"]))
                out.write(json.dumps({**record, "answer": text, "score": score}) + "\n")
            if rng.random() < 0.3:
                out.write(rng.choice(lines)[:40])
        paths.append(path)
    return paths


# Of the first 20 seeds, seed 0 met the fault fixed in 158bedd (a part given back shifted
# the later replies; a race, met in 1 of 20) and 3 and 6 a question asked again across the cut
# (7 of 20 failed with the keys' check made to always join). The tests above pin each path.
@pytest.mark.parametrize("seed", [0, 3, 6])
def test_random_folders_read_by_two_processes_give_what_one_process_gives(cli, recall_runs, monkeypatch,
                                                                          tmp_path, seed):
    """Folders laid out at random, each cut at random points between this process and a
    reader: report and compare print what they print read here alone, and every file's
    latest records come back field for field (what compare, the HTML report and show use)."""
    rng = random.Random(seed)
    paths = _random_folder(cli, recall_runs, tmp_path, rng)
    monkeypatch.setattr(readers, "CHECK_EVERY", rng.choice((5, 1000)))
    alone, alone_warnings = read(paths, monkeypatch, split=False)
    shown = [cli("compare", "--format", "json", *paths, ok=False)]
    models = sorted({record.model for records in alone for record in records})
    for share in sorted(rng.uniform(0.02, 0.98) for _ in range(3)):
        options = rng.choice(((), ("--model", rng.choice(models))))
        report(cli, monkeypatch, paths, *options, share=share)
        split, warnings = read(paths, monkeypatch, split=True, share=share)
        assert split == alone, share
        assert warnings == alone_warnings, share
        shown.append(cli("compare", "--format", "json", *paths, ok=False))
        monkeypatch.setattr(readers, "SPLIT_MIN", 1 << 60)
    assert len({(result.exit_code, result.stdout, result.stderr) for result in shown}) == 1

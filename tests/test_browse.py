"""Looking into transcripts: every question (show), every run (runs), and filters on reports."""

from __future__ import annotations

import csv
import io
import itertools
import json

import pytest

from qmkar import browse, pricing
from qmkar.browse import Filter, view
from qmkar.compare import holm
from qmkar.slim import slim_of
from qmkar.tables import Pct, Shown
from qmkar.tally import tallies
from qmkar.transcript import Reading, latest, read


def test_show_wrong_lists_each_wrong_question_with_expected_and_given_values(cli, recall_runs):
    shown = cli("show", recall_runs["transcript"], "--wrong").output
    records = [r for r in read(recall_runs["transcript"]).records if r.answered and not r.correct]
    assert len(records) == 18  # A got 6 wrong, B 12 (see the recall_runs fixture)
    assert f"{len(records)} questions: {len(records)} wrong" in shown
    blocks = shown.split("\n\n")
    for record in records:
        (block,) = [b for b in blocks if b.startswith(f"wrong     {record.item_id}\n")
                    and f"  {record.model}\n" in b]
        assert "expected   " + ", ".join(map(str, record.item.expected)) in block
        assert "read as    " + ", ".join(map(str, record.parsed.values)) in block
        assert f"TP {record.score.tp}  FP {record.score.fp}  FN {record.score.fn}" in block


def test_show_errors_says_why_and_whether_the_next_run_asks_again(cli, tmp_path):
    dataset = tmp_path / "d.jsonl"
    cli("generate", "-n", 3, "--pairs", 10, "-o", dataset)
    nothing = tmp_path / "none.jsonl"
    nothing.write_text("")
    run = tmp_path / "run.jsonl"
    cli("eval", "-m", f"replay:{nothing}", "--dataset", dataset, "-o", run, code=3)
    shown = cli("show", run, "--errors").output
    assert sum(line.startswith("error     qmkar-") for line in shown.splitlines()) == 3
    assert "missing: no answer for this question's id" in " ".join(shown.split())
    assert "not asked again" in shown
    only = cli("show", run, "--id", "qmkar-0001").output
    assert "1 questions" in only and "qmkar-0001" in only and "qmkar-0000" not in only
    refused = cli("show", run, "--wrong", ok=False)
    assert refused.exit_code == 1 and "no question matches" in refused.output


def test_runs_lists_one_line_per_run_and_condition(cli, tmp_path):
    out = tmp_path / "t.jsonl"
    cli("eval", "-m", "oracle", "-m", "sim:delta", "-n", 3, "--pairs", 20, "-o", out)
    cli("eval", "-m", "oracle", "-n", 3, "--pairs", 30, "-o", out)
    rows = list(csv.DictReader(io.StringIO(cli("runs", tmp_path, "--format", "csv").stdout)))
    assert [(r["model"], r["n"], r["errors"]) for r in rows] == [
        ("oracle", "3", "0"), ("sim:delta", "3", "0"), ("oracle", "3", "0")]
    assert len({r["run"] for r in rows}) == 2 and len({r["condition"] for r in rows}) == 3
    assert float(rows[0]["accuracy"]) == 1.0 and float(rows[1]["accuracy"]) == 0.0
    data = json.loads(cli("runs", out, "--format", "json").stdout)
    assert [d["task"] for d in data] == ["qmkar"] * 3


def test_folder_scans_skip_files_that_are_not_transcripts_but_named_files_still_fail(cli, recall_runs):
    """recall_runs' folder also holds its dataset and two replay answer files."""
    folder = recall_runs["transcript"].parent
    for command in (["runs"], ["report"], ["compare"], ["report", "--format", "html", "-o",
                                                         folder / "report.html"]):
        result = cli(*command, folder)
        for name in ("ds.jsonl", "a.jsonl", "b.jsonl"):
            assert f"note: skipped {folder / name}: not a qmkar transcript" in result.stderr
        assert "run.jsonl" not in result.stderr
    rows = list(csv.DictReader(io.StringIO(cli("runs", folder, "--format", "csv").stdout)))
    assert [r["model"] for r in rows] == ["oracle", recall_runs["a"], recall_runs["b"]]
    named = cli("report", folder / "a.jsonl", ok=False)
    assert named.exit_code == 1 and "a.jsonl line 1 is not a qmkar transcript record" in named.stderr
    (folder / "only").mkdir()
    (folder / "only" / "answers.jsonl").write_text((folder / "a.jsonl").read_text())
    empty = cli("runs", folder / "only", ok=False)
    assert empty.exit_code == 1 and "holds no transcript (*.jsonl) files" in empty.stderr


def test_filters_keep_the_runs_asked_for(cli, tmp_path):
    out = tmp_path / "t.jsonl"
    cli("eval", "-m", "oracle", "-m", "sim:delta", "-n", 3, "--pairs", 20, "-o", out)
    cli("eval", "-m", "oracle", "-n", 3, "--pairs", 30, "-o", out)
    cli("eval", "-m", "oracle", "-t", "counting", "-n", 2, "--length", 30, "-o", out)

    def labels(*options):
        return [s["label"] for s in json.loads(cli("report", out, "--format", "json", *options).stdout)]

    assert len(labels()) == 4
    assert labels("--model", "sim:*") == ["sim:delta"]
    assert labels("--task", "counting") == ["oracle"]
    assert labels("--where", "params.pairs=30") == ["oracle"]
    both = sorted(labels("--model", "oracle", "--task", "qmkar"))
    assert both == ["oracle (pairs=20)", "oracle (pairs=30)"]
    none = cli("report", out, "--where", "params.pairs=999", ok=False)
    assert none.exit_code == 1 and "matching --where params.pairs=999" in none.output
    bad = cli("compare", out, "--where", "colour=blue", ok=False)
    assert bad.exit_code == 1 and "not a condition field" in bad.output
    compared = json.loads(cli("compare", out, "--format", "json", "--model", "oracle",
                              "--task", "qmkar").stdout)
    assert {run["model"] for run in compared["runs"]} == {"oracle"}


def test_baseline_pairs_each_run_with_it_and_holm_adjusts(cli, recall_runs):
    data = json.loads(cli("compare", recall_runs["transcript"], "--format", "json",
                          "--baseline", "oracle").stdout)
    assert {(p["a"], p["b"]) for p in data["paired"]} == {("oracle", recall_runs["a"]),
                                                           ("oracle", recall_runs["b"])}
    raw = [p["p_value"] for p in data["paired"]]
    assert [p["p_holm"] for p in data["paired"]] == pytest.approx(holm(raw))
    assert all(p["p_holm"] >= p["p_value"] for p in data["paired"])
    refused = cli("compare", recall_runs["transcript"], "--baseline", "nobody", ok=False)
    assert refused.exit_code == 1 and "names no run" in refused.output


def test_holm_matches_the_textbook_example():
    # Holm (1979): p = 0.01, 0.04, 0.03, 0.005 -> 0.03, 0.06, 0.06, 0.02.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_progress_without_a_terminal_is_a_line_every_few_seconds(monkeypatch):
    from rich.console import Console

    from qmkar import commandline

    stream = io.StringIO()
    monkeypatch.setattr(commandline, "err", Console(file=stream, width=200))
    now = [0.0]
    with commandline.Bars(every=10, clock=lambda: now[0]) as bars:
        bars.start("m", 100, 20)
        for step in range(60):
            now[0] += 1.0
            bars.advance("m", failed=step % 20 == 0)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "progress m: 30/100 (30%), 1.0/s, 1 errors, 1m10s left"
    assert len(lines) == 7  # one every 10 s of 60, and the last at the end
    assert lines[-1] == "progress m: 80/100 (80%), 1.0/s, 3 errors, 0m20s left"


def test_a_run_whose_output_is_not_a_terminal_still_says_how_far_it_got(cli, tmp_path):
    result = cli("eval", "-m", "oracle", "-n", 5, "--pairs", 10, "-o", tmp_path / "t.jsonl")
    assert "progress oracle: 5/5 (100%)" in result.output


def test_waiting_for_the_rate_limiter_is_recorded_apart():
    import asyncio

    from qmkar.limits import Limiter
    from qmkar.providers.base import ModelResponse
    from qmkar.retry import RetryPolicy, send

    async def slow_answer():
        await asyncio.sleep(0.5)
        return ModelResponse(text="1")

    async def two_at_once():
        limiter = Limiter(1)  # one request in flight: the second waits for the first
        return await asyncio.gather(*(send(slow_answer, RetryPolicy(), limiter) for _ in range(2)))

    first, second = sorted(asyncio.run(two_at_once()), key=lambda o: o.attempts[0].waited)
    # The second waits about one answer (0.5 s) and is then answered in about 0.5 s: counted
    # with its wait, it would take 1 s. The margins hold on a loaded machine.
    assert first.attempts[0].waited < 0.25
    assert 0.4 < second.attempts[0].waited and second.attempts[0].seconds < 0.8


def test_missing_replay_answers_group_into_one_reason_line(cli, tmp_path):
    dataset = tmp_path / "d.jsonl"
    cli("generate", "-n", 8, "--pairs", 10, "-o", dataset)
    nothing = tmp_path / "none.jsonl"
    nothing.write_text("")
    output = cli("eval", "-m", f"replay:{nothing}", "--dataset", dataset, "-o", tmp_path / "r.jsonl",
                 code=3).output
    assert "8 x no answer for this question's id" in " ".join(output.split())


def test_error_reasons_past_the_listed_ones_are_counted():
    from qmkar.report import notes
    from qmkar.score import summarize

    summary = summarize("qmkar", "m", [], ["missing"] * 9).model_copy(update={
        "label": "m", "errors_permanent": 9,
        "error_reasons": {f"reason {i}": 1 + (i == 0) for i in range(5)},
    })
    lines = notes([summary], [])
    assert "    2 x reason 0" in lines
    assert "    3 more, for other reasons (qmkar show TRANSCRIPT --errors lists each)" in lines


@pytest.mark.parametrize("keep", [Filter(), Filter(wrong=True), Filter(errors=True),
                                  Filter(models=("oracle",)), Filter(ids=("qmkar-0001", "qmkar-0003"))])
def test_show_reads_in_full_only_what_it_shows_and_shows_what_a_whole_reading_would(recall_runs, tmp_path,
                                                                                    monkeypatch, keep):
    """show picks its questions from a slim reading and reads only those whole: the same views,
    in the same order, as reading every record whole."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(recall_runs["transcript"].read_bytes())
    with path.open("a") as out:  # an error record for one question, then its answer again
        lines = [json.loads(line) for line in recall_runs["transcript"].read_text().splitlines()]
        answer = next(line for line in lines if line["kind"] == "answer")
        out.write(json.dumps({**answer, "error": {"kind": "timeout", "message": "slow"}, "answer": None,
                              "parsed": None, "score": None}) + "\n")
    expected = [view(r) for r in latest(Reading(path)).values() if keep.keeps(r)]
    assert expected
    read_whole: list[set] = []
    original = browse.whole_records

    def counted(file, keys):
        read_whole.append(set(keys))
        return original(file, keys)

    monkeypatch.setattr(browse, "whole_records", counted)
    assert browse.questions([path], keep) == expected
    (keys,) = read_whole
    assert len(keys) == len(expected)


def test_runs_counts_and_costs_as_reading_every_record_whole_would(cli, server, keyed, tmp_path):
    """runs counts each run's records as they are read (slim, none kept): the same rows as
    grouping whole records, errors and the cost of a priced model included."""
    out = tmp_path / "t.jsonl"
    calls = itertools.count()
    server.script = lambda body, seen: "400" if next(calls) % 3 == 0 else None  # a third fail for good
    hosted = ["-n", 6, "--pairs", 10, "-o", out, "--base-url", server.base_url,
              "--api-key-env", "FAKE_API_KEY"]
    cli("eval", "-m", "openai:gpt-4o", *hosted, code=3)
    cli("eval", "-m", "openai:gpt-4o-mini", "-m", "oracle", *hosted, code=3)
    prices = pricing.load_prices(None)
    reading = Reading(out)
    groups: dict[tuple[str, str], list] = {}
    for record in reading:
        groups.setdefault((record.run_id or "-", record.condition_id), []).append(record)
    started = {run.run_id: run.started_at for run in reading.runs}
    expected = []
    for (run_id, _), records in groups.items():
        first, answered = records[0], [r for r in records if r.answered]
        (total,) = pricing.usage_totals(tallies(slim_of(r) for r in records), prices,
                                        {first.model: first.condition.model})
        expected.append([started[run_id].strftime("%Y-%m-%d %H:%M"), out.name, run_id, first.model,
                         first.condition.task, first.condition_id, len(answered),
                         Pct(sum(r.correct for r in answered) / len(answered)), len(records) - len(answered),
                         Shown(total.cost, "-" if total.cost is None else pricing.format_cost(total.cost))])
    expected.sort(key=lambda row: str(row[0]))
    assert len(expected) == 3 and expected[0][8] > 0  # the first run's errors
    assert {row[3]: row[9].value is not None for row in expected} == {  # oracle has no price
        "openai:gpt-4o": True, "openai:gpt-4o-mini": True, "oracle": False}
    assert browse.runs([out], prices).rows == expected


def test_runs_of_transcripts_without_records_is_an_error_not_an_empty_table(cli, tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    result = cli("runs", tmp_path / "empty.jsonl", ok=False)
    assert result.exit_code == 1 and "no transcript records in" in result.stderr
    assert result.stdout == ""


def test_a_file_given_twice_is_read_once_with_a_note(cli, recall_runs):
    """`compare a.jsonl a.jsonl` shows one run; it says why instead of leaving the user to guess,
    whether the second naming is the same spelling, another spelling, or the file's folder."""
    transcript = recall_runs["transcript"]
    alone = cli("compare", transcript, "--format", "json")
    assert "given more than once" not in alone.stderr
    for again in (transcript, transcript.parent / ".." / transcript.parent.name / transcript.name,
                  transcript.parent):
        result = cli("compare", transcript, again, "--format", "json")
        assert f"note: {again if again != transcript.parent else transcript} is given more than once " \
               f"(as {transcript} first); it is read once" in result.stderr
        assert json.loads(result.stdout) == json.loads(alone.stdout)

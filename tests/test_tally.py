"""Answers counted as they come (tally.py) against the same answers read back: eval and sweep
keep no records, so what they print must be what report, compare and the usage line make of
the transcript afterwards."""

from __future__ import annotations

import csv
import io
import itertools
import json
import pickle
import random

import msgspec
import pytest
from typer.testing import CliRunner

from qmkar import pricing
from qmkar.cli import app
from qmkar.condition import Condition
from qmkar.grid import grid
from qmkar.records import CallError
from qmkar.report import summarize_tally
from qmkar.runs import count_latest, load_runs
from qmkar.score import Score
from qmkar.shapes import SlimUsage
from qmkar.slim import SlimItem, SlimRecord
from qmkar.tally import Point, Tallies, Tally, tallies, token_bin

runner = CliRunner()


def test_eval_prints_what_report_and_the_usage_line_make_of_its_transcript(server, keyed, tmp_path):
    """A hosted model (token counts, errors) beside two offline ones, each question asked
    twice: eval's tables (counted as the answers came) against report's of the transcript,
    and its usage line against the one the transcript's records give."""
    numbers = itertools.count()
    server.script = lambda body, seen: "error-200" if next(numbers) % 5 == 0 else None
    out = tmp_path / "t.jsonl"
    asked = runner.invoke(app, ["eval", "-m", "openai:gpt-4o", "-m", "oracle", "-m", "sim:linear", "-n", "12",
                                "--pairs", "10", "--samples", "2", "--max-retries", "0", "--base-url",
                                server.base_url, "--api-key-env", "FAKE_API_KEY", "-o", str(out),
                                "--format", "csv"])
    assert asked.exit_code == 3, asked.output  # the scripted errors
    reported = runner.invoke(app, ["report", str(out), "--format", "csv"])
    assert reported.exit_code == 0, reported.output
    assert asked.stdout == reported.stdout
    rows = {(row["table"], row["model"]): row for row in csv.DictReader(io.StringIO(asked.stdout))}
    hosted = rows[("qmkar: questions", "openai:gpt-4o")]
    assert 0 < int(hosted["errors"]) < 24 and int(hosted["n"]) + int(hosted["errors"]) == 24
    usage = [line for line in asked.stderr.splitlines() if line.startswith("usage ")]
    read_back = count_latest([out])
    options = {"base_url": server.base_url}
    assert usage and usage == pricing.usage_lines(read_back, options, pricing.load_prices(), {})


def test_a_sweep_prints_the_grid_compare_makes_of_its_transcript(tmp_path):
    """Its grid (JSON), and its heatmaps (CSV) against report's of the same transcript; each
    sweep into a fresh transcript, so counted as the answers came."""
    def sweep(out, fmt):
        return runner.invoke(app, ["sweep", "-m", "oracle", "-m", "sim:linear", "--pairs", "10,20,40",
                                   "--targets", "2,3", "-n", "6", "--samples", "2", "-o", str(out),
                                   "--format", fmt])

    swept = sweep(tmp_path / "a.jsonl", "json")
    assert swept.exit_code == 0, swept.output
    cells = json.loads(swept.stdout)
    assert cells == [cell.model_dump(mode="json") for cell in grid(load_runs([tmp_path / "a.jsonl"]))]
    assert {cell["size"] for cell in cells} == {10, 20, 40} and all(cell["n"] == 12 for cell in cells)
    tables = sweep(tmp_path / "b.jsonl", "csv")
    reported = runner.invoke(app, ["report", str(tmp_path / "b.jsonl"), "--format", "csv"])
    heatmaps = [heatmap_rows(result.stdout) for result in (tables, reported)]
    # Two rows (models) of 5 depths and "all", and one difference of 5 depths.
    assert len(heatmaps[0]) == 2 * 6 + 5 and heatmaps[0] == heatmaps[1]


def heatmap_rows(text: str) -> list[list[str]]:
    """The rows of the recall-by-depth tables (and their differences), without the empty
    cells of other tables' columns."""
    return [[cell for cell in row if cell] for row in csv.reader(io.StringIO(text))
            if ": recall" in row[0]]


def random_records(rng: random.Random, samples: int) -> list[SlimRecord]:
    """Answers of one condition: errors, unscored answers, truncated, refused and unparsed
    ones, usage with and without cached tokens (more cached than sent, too), batches, the cache."""
    condition = Condition(provider="openai", model="gpt-4o", template="t", task="qmkar")
    scores = [Score(correct=True, tp=2), Score(correct=False, fn=1, tp=1, fn_by_position=[0, 1]),
              Score(correct=True, tp=2)]  # an equal score that is another object
    errors = [CallError(kind="timeout", message="slow", retryable=True),
              CallError(kind="missing", message="no answer", retryable=False)]
    records = []
    for question in range(rng.randint(0, 30)):
        item = SlimItem(f"q{question}", "qmkar", rng.choice([10, 20]), (1, 2), rng.choice([None, "end"]),
                        rng.choice([None, 900, 3000]), None)
        for sample in range(samples):
            failed = rng.random() < 0.2
            usage = None if rng.random() < 0.2 else SlimUsage(
                rng.choice([None, 800, 1500, 5000]), rng.randint(0, 20), rng.choice([None, 3]),
                rng.choice([None, 100, 6000]))
            extra = rng.choice([{}, {"cache": "hit"}, {"batch": "b1"}])
            records.append(SlimRecord(
                "gpt-4o", None, item, condition, "c", sample, rng.choice(errors) if failed else None,
                None if failed or rng.random() < 0.1 else rng.choice(scores),
                rng.random() < 0.2, rng.random() < 0.2, rng.random() < 0.2, not failed, usage, extra))
    return records


@pytest.mark.parametrize("seed", range(40))
def test_a_tally_counts_what_a_loop_over_its_records_counts(seed):
    """Cost and usage sums against record_cost and a plain loop; without per-question counts
    (one answer a question) the summary is the same as with them."""
    rng = random.Random(seed)
    records = random_records(rng, 1)
    if not records:
        return
    (counted,) = tallies(records)
    price = pricing.load_prices()["gpt-4o"]
    answered = [r for r in records if r.error is None]
    spent = sum(pricing.record_cost(r, price) for r in records)
    assert pricing.tally_cost(counted, price) == pytest.approx(spent)
    assert counted.answered == len(answered) and counted.error_count == len(records) - len(answered)
    assert counted.cache_hits == sum(r.extra.get("cache") == "hit" for r in answered)
    assert counted.batched == sum(bool(r.extra.get("batch")) for r in records)
    assert counted.cached_tokens == sum((r.usage.cached_tokens or 0) for r in answered if r.usage)
    assert counted.error_keys == [r.key for r in records if r.error is not None]
    (unkept,) = tallies(records, per_question=False)
    assert summarize_tally(unkept, "x") == summarize_tally(counted, "x")
    by_tokens, unbinned = counted.at("tokens")
    graded = [r for r in records if r.error is None and r.score is not None]
    assert sum(count for scores in by_tokens.values() for _, count in scores) + unbinned == len(graded)
    assert unbinned == sum(1 for r in graded
                           if not (r.usage and r.usage.input_tokens) and not r.item.prompt_tokens)


def test_a_tally_without_records_is_an_empty_summary():
    summary = summarize_tally(Tally("qmkar", None), "x")
    assert (summary.n, summary.errors, summary.questions, summary.condition) == (0, 0, 0, None)


@pytest.mark.parametrize(("tokens", "binned"), [
    (0, 1), (1, 1), (2, 2), (3, 4), (4, 4), (2049, 4096), (4096, 4096), (4097, 8192),
    (2**53 + 1, 2**54),  # beyond a float's 53 bits: log2 rounds it to 53.0
])
def test_a_prompt_is_binned_under_the_smallest_power_of_two_holding_it(tokens, binned):
    assert token_bin(tokens) == binned


def test_points_are_counted_under_one_point_each():
    """A tally looks its points up by a plain tuple of their fields: each point must be found
    again, not added a second time."""
    rng = random.Random(3)
    records = random_records(rng, 1)
    (counted,) = tallies(records)
    assert len(counted.points) == len({(r.item.size, len(r.item.expected), r.item.placement,
                                        token_bin(t) if (t := (r.usage and r.usage.input_tokens)
                                                         or r.item.prompt_tokens) else None)
                                       for r in records})
    assert all(type(point) is Point for point in counted.points)


def state(tally: Tally) -> dict:
    """Everything a tally holds, its scores and errors by value (in order) and not by object."""
    held = dict(vars(tally))
    held["points"] = [(point, counts.sized, counts.others, [(score.model_dump(), count)
                                                            for score, count in counts.tally()])
                      for point, counts in tally.points.items()]
    held["errors"] = [(error.model_dump(), count) for error, count in tally.failures()]
    held["condition"] = tally.condition.model_dump() if tally.condition else None
    held["by_sample"] = list(tally.by_sample.items())
    held["per_question"] = None if tally.per_question is None else list(tally.per_question.items())
    return held


@pytest.mark.parametrize("seed", range(30))
def test_two_parts_counted_apart_and_joined_are_the_whole_counted(seed):
    """Tallies.extend: the records of two conditions in any order, cut anywhere, each part
    counted on its own and the second joined to the first, hold what counting them all in
    order holds, to the order of every point, score, error and question. Sent through
    pickle as a reader process sends them, the joined tallies give the same summaries."""
    rng = random.Random(seed)
    samples = rng.choice([1, 3])
    other = [msgspec.structs.replace(record, condition_id="d", model="other")
             for record in random_records(rng, samples)]
    records = random_records(rng, samples)
    records += other
    rng.shuffle(records)  # answers come in any order
    cut = rng.randint(0, len(records))
    joined, sent = Tallies(), Tallies()
    for found in (joined, sent):
        found.extend(tallies(records[:cut]))
    joined.extend(tallies(records[cut:]))
    sent.extend(pickle.loads(pickle.dumps(tallies(records[cut:]))))
    whole = tallies(records)
    assert [state(tally) for tally in joined.values()] == [state(tally) for tally in whole]
    assert ([summarize_tally(tally, "x") for tally in sent.values()]
            == [summarize_tally(tally, "x") for tally in whole])

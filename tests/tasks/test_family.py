"""A new task is one module and one registry line: a toy family goes through the whole CLI.

The toy ("sum": add up a list of digits) is defined here as its own module would be,
and registered the way tasks/__init__.py registers every family. Nothing else in qmkar
is told about it: generate, eval (oracle and a replay model), report, compare and the
template check must all work from the family alone.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar.cli import app
from qmkar.parse import ParsedAnswer, final_text, numbers, refusal
from qmkar.score import Score
from qmkar.tasks import FAMILIES
from qmkar.tasks.base import IntRange, Item, Range, TaskParams, item_id, require
from qmkar.tasks.family import TaskFamily


class SumParams(TaskParams):
    length: int = 8
    value_range: Range = IntRange(0, 9)
    seed: int | None = None


class Sum(TaskFamily):
    name = "sum"
    params_type = SumParams
    options = {"length": "values to add", "value_range": "values LOW..HIGH"}
    placeholders = {"values": "the values joined by ' + '"}
    size_unit = "values"

    def check(self, params: SumParams) -> None:
        require(params.length >= 1, f"--length must be at least 1, not {params.length}")

    def generate_one(self, params: SumParams, seed: int, index: int) -> Item:
        rng = random.Random(f"sum/{seed}/{index}")
        values = [rng.randint(params.value_range.low, params.value_range.high) for _ in range(params.length)]
        recorded = SumParams(length=params.length, value_range=params.value_range, seed=seed)
        content = {"values": values, "options": recorded.model_dump(mode="json")}
        return Item(id=item_id("sum", index, content), task="sum", values=values, query=[],
                    expected=[sum(values)], target_positions=[], params=recorded)

    def prompt_fields(self, item: Item) -> dict[str, str]:
        return {"values": " + ".join(str(v) for v in item.values or [])}

    def parse(self, item: Item, text: str) -> ParsedAnswer:
        body = final_text(text)
        found = numbers(body, 10**9)
        return ParsedAnswer(values=[found[-1][0]] if found else [], refused=not found and refusal(body))

    def score(self, item: Item, parsed: ParsedAnswer) -> Score:
        right = parsed.values == item.expected
        return Score(correct=right, tp=int(right), fn=int(not right), outcome="true" if right else "fn")


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The toy registered (the one registry line), and its template file."""
    monkeypatch.setitem(FAMILIES, "sum", Sum())
    template = tmp_path / "sum.txt"
    template.write_text("What is {values}? Answer with one number.\n", encoding="utf-8")
    return template


def test_a_toy_family_runs_through_generate_eval_report_and_compare(toy: Path, tmp_path: Path) -> None:
    runner = CliRunner()

    def ok(*args: str) -> str:
        result = runner.invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    dataset, run = tmp_path / "sum.jsonl", tmp_path / "run.jsonl"
    ok("generate", "-t", "sum", "-n", "6", "--length", "5", "-o", str(dataset))
    items = [json.loads(line) for line in dataset.read_text().splitlines()]
    assert [i["params"] for i in items] == [{"length": 5, "value_range": "0..9", "seed": 0}] * 6
    # A replay model that gets every other sum wrong.
    replay = tmp_path / "answers.jsonl"
    replay.write_text("".join(json.dumps({"id": i["id"], "answer": str(sum(i["values"]) + k % 2)}) + "\n"
                              for k, i in enumerate(items)))
    ok("eval", "-m", "oracle", "-m", f"replay:{replay}", "--dataset", str(dataset),
       "--template", str(toy), "-o", str(run))
    summaries = {s["model"]: s for s in json.loads(ok("report", str(run), "--format", "json"))}
    assert summaries["oracle"]["correct"] == 6
    assert summaries[f"replay:{replay}"]["correct"] == 3
    compared = ok("compare", str(run))
    assert "paired: same questions" in compared and "McNemar" in compared
    # The option the toy does not take is refused by its own list; the template is checked
    # against its own placeholders.
    refused = runner.invoke(app, ["generate", "-t", "sum", "--pairs", "5", "-o", str(tmp_path / "x.jsonl")])
    assert refused.exit_code == 1 and "--pairs does not apply to --task sum" in refused.output
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholder here\n")
    lacking = runner.invoke(app, ["eval", "-m", "oracle", "--dataset", str(dataset), "--template", str(bad),
                                  "-o", str(tmp_path / "y.jsonl")])
    assert lacking.exit_code == 1 and "lacks {values}" in lacking.output


def test_a_family_may_carry_its_template_and_is_swept_on_its_own_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No prompts/sum.txt and no --template: the family's own text is the default, and
    its whole-number option is a sweep axis without sweep.py naming it."""

    class CarriedSum(Sum):
        template = "Add up {values}. Answer with one number.\n"

    monkeypatch.setitem(FAMILIES, "sum", CarriedSum())
    runner = CliRunner()
    run = tmp_path / "run.jsonl"
    result = runner.invoke(app, ["eval", "-m", "oracle", "-t", "sum", "-n", "3", "-o", str(run)])
    assert result.exit_code == 0, result.output
    assert '"Add up ' in run.read_text() and "builtin:sum" in run.read_text()
    swept = runner.invoke(app, ["sweep", "-m", "oracle", "-t", "sum", "--length", "3,6", "-n", "2",
                                "-o", str(tmp_path / "s.jsonl"), "--format", "json"])
    assert swept.exit_code == 0, swept.output
    assert {cell["size"] for cell in json.loads(swept.stdout)} == {3, 6}

"""The simulated memories answer as they did before their answers were batched.

data/sim_answers.json holds the answers of the sim at commit 89bff7a (one question at a
time, the delta rules through an n x n matrix) to every question of
tests/support/sim_answers.py: every memory, several options, every task the sim reads.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from qmkar.errors import ProviderCallError
from qmkar.providers.base import ModelRequest
from qmkar.providers.registry import resolve
from qmkar.providers.sim import Answer, SimModel, parse_name, read_prompt
from qmkar.render import default_template, render
from qmkar.tasks import generate, make_spec
from tests.support.sim_answers import answers

STORED = json.loads((Path(__file__).parent / "data" / "sim_answers.json").read_text())


def exact_scores(row: dict) -> dict[str, float]:
    """The exact (float64) score of each value in a recall answer, for a one-key question."""
    item = list(generate(make_spec(row["task"], **row["options"]), row["index"] + 1, 0))[-1]
    model = SimModel(parse_name(row["model"].removeprefix("sim:")))
    prompt = read_prompt(row["task"], render(item, default_template(row["task"]))[0]["content"])
    recall = model._recall(prompt)
    assert len(recall.readouts) == 1, "only one-key questions are checked this way"
    readout = recall.readouts[0].astype(np.float32).astype(np.float64)
    return {v: float(recall.page.table[int(v) - recall.page.first].astype(np.float64) @ readout)
            for v in row["answer"].split(", ")}


def test_every_memory_answers_the_fixed_questions_as_before():
    now = list(answers())
    assert len(now) == len(STORED)
    swapped = 0
    for before, after in zip(STORED, now, strict=True):
        where = f"{before['model']} on {before['task']} {before['options']} question {before['index']}"
        assert after["prompt"] == before["prompt"], f"{where}: the question itself changed"
        if after["answer"] != before["answer"]:
            # The same values, in an order that differs only where two scores tie to within
            # float32 rounding (the old code ordered those by the rounding of its product).
            old, new = before["answer"].split(", "), after["answer"].split(", ")
            assert sorted(old) == sorted(new), where
            scores = exact_scores(after)
            slack = 1e-6 * max(scores.values())
            for x, y in itertools.combinations(old, 2):
                if new.index(x) > new.index(y):
                    assert abs(scores[x] - scores[y]) <= slack, f"{where}: {x} and {y} swapped"
            swapped += 1
        # Best scores are rounded to 4 places; they may differ in the last place when the
        # float32 score the old code kept sat on a rounding boundary.
        assert after["details"].keys() == before["details"].keys(), where
        for key, value in before["details"].items():
            assert after["details"][key] == pytest.approx(value, abs=1.1e-4), f"{where}: {key}"
    assert swapped <= 2  # today: two sim:window answers listing two tied values the other way


def test_answers_do_not_depend_on_which_questions_share_a_batch():
    items = list(generate(make_spec("qmkar", pairs=300), 12, 3))
    requests = [ModelRequest(messages=render(item, default_template("qmkar"))) for item in items]

    async def together(name: str) -> tuple[list[str], dict[int, int]]:
        provider = resolve(name)
        asked = (provider.generate(i, r) for i, r in zip(items, requests, strict=True))
        responses = await asyncio.gather(*asked)
        return [r.text for r in responses], dict(provider.batch_sizes)

    async def alone(name: str) -> list[str]:
        provider = resolve(name)
        return [(await provider.generate(i, r)).text for i, r in zip(items, requests, strict=True)]

    for name in ("sim:linear", "sim:softmax", "sim:delta"):
        texts, sizes = asyncio.run(together(name))
        assert sizes == {12: 1}  # every question asked at once was answered in one batch
        assert texts == asyncio.run(alone(name))


def test_a_question_the_sim_cannot_answer_fails_alone_in_its_batch():
    items = list(generate(make_spec("qmkar", pairs=50), 3, 0))
    texts = [render(item, default_template("qmkar"))[0]["content"] for item in items]
    # a key too large for any codebook: that question alone fails, at once
    texts[1] = texts[1].replace("k: ", "k: 99999999", 1)
    model = SimModel(parse_name("linear"))
    answers = model.answer_many([read_prompt("qmkar", text) for text in texts])
    assert isinstance(answers[1], ProviderCallError) and answers[1].kind == "too_large"
    alone = [model.answer("qmkar", read_prompt("qmkar", texts[i])).text for i in (0, 2)]
    assert [a.text for a in (answers[0], answers[2]) if isinstance(a, Answer)] == alone

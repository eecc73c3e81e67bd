"""The sim provider: reading prompts, options, determinism, and the blog's claims as runs.

The claims run through the real CLI (`qmkar eval`) with fixed seeds and are read back
from the transcript, so they cover render -> sim -> parse -> score end to end.
"""

from __future__ import annotations

import asyncio
import random
import tracemalloc
from pathlib import Path

import pytest
from threadpoolctl import threadpool_info, threadpool_limits
from typer.testing import CliRunner

from qmkar import transcript
from qmkar.cli import app
from qmkar.errors import ProviderCallError, ProviderError
from qmkar.providers import sim_memory, sim_prompt, sim_tasks
from qmkar.providers.base import ModelRequest
from qmkar.providers.registry import resolve
from qmkar.providers.sim import SimModel, parse_name, read_prompt
from qmkar.render import default_template, render
from qmkar.tasks import generate, make_spec
from qmkar.tasks.base import Item


def first_item(task: str, **spec) -> Item:
    return next(generate(make_spec(task, **spec), 1, 0))


def ask(name: str, item: Item, template_text: str | None = None):
    provider = resolve(name)
    if template_text is None:
        messages = render(item, default_template(item.task))
    else:
        messages = [{"role": "user", "content": template_text}]
    return asyncio.run(provider.generate(item, ModelRequest(messages=messages)))


def run_eval(tmp_path: Path, models: list[str], task: str, n: int, *extra: str) -> dict[str, list]:
    """Run `qmkar eval` and return each model's scored records."""
    out = tmp_path / f"{task}-{len(models)}.jsonl"
    args = ["eval", "--task", task, "-n", str(n), "-o", str(out)]
    for model in models:
        args += ["--model", model]
    result = CliRunner().invoke(app, args + list(extra))
    assert result.exit_code == 0, result.output
    records = transcript.read(out).records
    by_model = {m: [r for r in records if r.model == m] for m in models}
    assert all(len(rs) == n and all(r.score is not None for r in rs) for rs in by_model.values())
    return by_model


def accuracy(records) -> float:
    return sum(r.score.correct for r in records) / len(records)


# --- reading the prompt --------------------------------------------------------------


@pytest.mark.parametrize("task", ["qmkar", "mqar", "counting"])
def test_reads_pairs_and_query_back_from_the_built_in_template(task):
    item = first_item(task)
    text = render(item, default_template(task))[0]["content"]
    prompt = read_prompt(task, text)
    if task == "counting":
        assert prompt.values == item.values
    else:
        assert prompt.pairs == [tuple(p) for p in item.pairs]
        assert sim_prompt._pairs_fast([text])[0] is not None  # read without the regular expression
    assert prompt.query == item.query


def test_pairs_are_read_as_the_regular_expression_reads_them_however_the_text_is_spaced():
    # read_prompt finds the pairs of many prompts at once with array operations where it
    # can; whatever the texts, and whichever are read together, it must find what
    # PAIR.split finds in each (or leave that text to it).
    pieces = ["k", "v", ":", ",", " ", "\t", "\n", "\x1c", "\x01", "\0", "0", "1", "23", "x", "_", "K",
              "k: ", ", v: ", "; ", "k:", "v:", "99999", "0" * 8, "12345678", "-", "\u0663", "7" * 9]
    draw = random.Random(5)
    fast = 0

    def plain(found):
        return found and (found[0].tolist(), found[1].tolist(), found[2])

    for _ in range(2500):
        texts = ["".join(draw.choice(pieces) for _ in range(draw.randint(0, 30)))
                 for _ in range(draw.randint(1, 12))]
        for text, found in zip(texts, sim_prompt._pairs_fast(texts), strict=True):
            alone = sim_prompt._pairs_fast([text])[0]
            assert plain(found) == plain(alone), repr(text)  # read alike alone and with others
            if found is None:
                continue
            fast += 1
            parts = sim_prompt.PAIR.split(text)
            assert (found[0].tolist(), found[1].tolist()) == ([int(k) for k in parts[1::3]],
                                                             [int(v) for v in parts[2::3]]), repr(text)
            assert found[2] == [int(n) for n in sim_prompt.NUMBER.findall(" ".join(parts[::3]))], repr(text)
    assert fast > 500  # many were read the fast way


def test_prompts_read_together_read_as_each_alone():
    texts = [render(item, default_template("qmkar"))[0]["content"]
             for item in generate(make_spec("qmkar", pairs=500), 20, 0)]  # more than one chunk
    texts[3] = "k: 1, v: 2"  # no query: fails alone
    together = sim_prompt.read_prompts("qmkar", texts)
    assert isinstance(together[3], ProviderCallError)
    for text, prompt in zip(texts, together, strict=True):
        if text != texts[3]:
            alone = read_prompt("qmkar", text)
            assert (prompt.pairs, prompt.query) == (alone.pairs, alone.query)


def blas_threads() -> set[int]:
    return {library["num_threads"] for library in threadpool_info() if library["user_api"] == "blas"}


def test_a_sims_products_run_on_one_blas_thread_and_blas_gets_its_threads_back(monkeypatch):
    """A sim does its products on one BLAS thread (split across threads, its small products
    cost more than they saved), in a recall batch and in the tasks sim_tasks answers; the
    rest of the process keeps the threads BLAS had."""
    seen = []  # BLAS's threads when each is called
    many, one = SimModel.answer_many, sim_tasks.answer
    monkeypatch.setattr(SimModel, "answer_many", lambda *args: seen.append(blas_threads()) or many(*args))
    monkeypatch.setattr(sim_tasks, "answer", lambda *args: seen.append(blas_threads()) or one(*args))
    provider = resolve("sim:delta")
    questions = [*generate(make_spec("qmkar", pairs=50), 3, 0), *generate(make_spec("qmkar-kv"), 2, 0)]

    async def ask() -> None:
        requests = [ModelRequest(messages=render(item, default_template(item.task))) for item in questions]
        await asyncio.gather(*map(provider.generate, questions, requests))

    with threadpool_limits(limits=2, user_api="blas"):
        if blas_threads() != {2}:
            pytest.skip("numpy's BLAS here runs one thread, whatever it is told")
        asyncio.run(ask())
        after = blas_threads()
    assert seen == [{1}] * 3  # the recall questions as one batch, and each qmkar-kv question
    assert after == {2}


def test_an_unreadable_prompt_names_the_template_and_stops_the_run():
    item = first_item("qmkar", pairs=10)
    with pytest.raises(ProviderCallError, match=r"prompts/qmkar\.txt") as caught:
        ask("sim:softmax", item, "key 150 -> 4000, key 151 -> 5000. What goes with 150?")
    assert caught.value.fatal
    with pytest.raises(ProviderCallError, match="2 numbers"):
        read_prompt("qmkar", "k: 150, v: 4000; k: 151, v: 5000\n\nIf k is 150 or 151, what are v?")


def test_the_answer_comes_from_the_prompt_not_from_the_items_expected_values():
    item = first_item("qmkar", pairs=50)
    honest = ask("sim:softmax", item)
    tampered = item.model_copy(update={"expected": [1234], "target_positions": [0]})
    assert ask("sim:softmax", tampered, render(item, default_template("qmkar"))[0]["content"]).text \
        == honest.text
    assert sorted(int(v) for v in honest.text.split(", ")) == sorted(item.expected)


# --- options -----------------------------------------------------------------------


def test_options_in_the_name_are_resolved_and_recorded():
    response = ask("sim:delta?d=64&beta=0.5", first_item("qmkar", pairs=20))
    assert response.extra["memory"] == "delta"
    assert response.extra["options"] == {
        "d": 64, "seed": 0, "threshold": 0.5, "near": 0.2, "digits": 0.2, "values": "", "beta": 0.5
    }
    assert response.model == "sim:delta?d=64&seed=0&threshold=0.5&near=0.2&digits=0.2&beta=0.5"
    assert parse_name("window?temp=0.1&window=8").options["w"] == 8


@pytest.mark.parametrize(
    "name,message",
    [
        ("sim:", "one of: softmax"),
        ("sim:lstm", "unknown simulated memory 'lstm'"),
        ("sim:delta?temperature=1", "has no option 'temperature'"),
        ("sim:delta?d=big", "d='big' must be a whole number"),
        ("sim:delta?beta", "must look like name=value"),
        ("sim:delta?beta=3", "beta must be in"),
        ("sim:gla?decay=0", "decay must be in"),
        ("sim:linear?near=0.6&digits=0.5", "sum to less than 1"),
        ("sim:linear?values=9..1", "values"),
        ("sim:linear?near=nan", "must be a finite number"),
    ],
)
def test_bad_names_and_options_are_one_clear_error(name, message):
    with pytest.raises(ProviderError, match=message):
        resolve(name)


def test_bad_option_on_the_command_line_is_one_line_not_a_traceback(tmp_path):
    result = CliRunner().invoke(app, ["eval", "-m", "sim:delta?bogus=1", "-n", "1",
                                      "-o", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 1
    assert "has no option 'bogus'" in result.output
    assert "Traceback" not in result.output


def test_a_candidate_range_option_that_misses_the_context_values_is_an_error():
    with pytest.raises(ProviderCallError, match="does not hold every value"):
        ask("sim:linear?values=1000..2000", first_item("qmkar", pairs=50))


def test_numbers_too_large_for_a_codebook_stop_the_run_with_a_clear_error():
    item = first_item("qmkar", pairs=20, key_range="100..100000")
    with pytest.raises(ProviderCallError, match="use smaller numbers or d") as caught:
        ask("sim:linear?d=4096", item)
    assert caught.value.fatal


def empty_codebook_caches() -> None:
    sim_memory._key_table.cache_clear()
    sim_memory._value_blocks.cache_clear()


def codebooks_built() -> int:
    return sim_memory._key_table.cache_info().currsize + sim_memory._value_blocks.cache_info().currsize


@pytest.mark.parametrize(
    "name,spec,message",
    [
        # the candidate values fit (about 200 MB at d=4096), the keys do not
        ("sim:linear?d=4096", {"key_range": "100..100000"}, "98,371 keys"),
        ("sim:hybrid?d=4096", {"key_range": "100..100000"}, "98,371 keys"),
        ("sim:linear?d=4096&values=1000..9999", {"key_range": "100..100000"}, "98,371 keys"),
        ("sim:linear?d=4096", {"value_range": "1000..99999"}, "candidate values"),
        ("sim:linear?values=1000..2000", {}, "does not hold every value"),
    ],
)
def test_a_question_sim_cannot_answer_fails_before_any_codebook_is_built(name, spec, message):
    item = first_item("qmkar", pairs=20, **spec)
    empty_codebook_caches()
    tracemalloc.start()
    try:
        with pytest.raises(ProviderCallError, match=message) as caught:
            ask(name, item)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.fatal and len(str(caught.value).splitlines()) == 1
    assert codebooks_built() == 0
    assert peak < 20_000_000  # bytes: the prompt and its numbers, never a codebook


def test_counting_numbers_too_large_fail_before_any_codebook_is_built():
    item = first_item("counting", value_range="0..100000")
    empty_codebook_caches()
    with pytest.raises(ProviderCallError, match="use smaller numbers or d"):
        ask("sim:linear?d=4096", item)
    assert codebooks_built() == 0


@pytest.mark.parametrize(
    "name,read",
    [
        # docs/theory.md's table: gla decays 0.99 per write, hybrid's linear layers not at all
        ("gla", {"decay": 0.99}),
        ("gated-delta", {"decay": 0.99, "beta": 1.0}),
        ("hybrid", {"decay": 1.0, "layers": 7, "temperature": 0.05}),
        ("window", {"window": 64, "temperature": 0.05}),
        ("hybrid?layers=2&decay=0.9", {"decay": 0.9, "layers": 2}),
    ],
)
def test_a_memory_reads_the_defaults_its_name_shows(name, read):
    model = SimModel(parse_name(name))
    assert {field: getattr(model.memory_options, field) for field in read} == read
    shown = model.config.canonical_name
    assert all(f"{'w' if f == 'window' else f}={v}" in shown for f, v in read.items())


def test_same_name_same_answers_and_seed_changes_the_codebooks():
    items = list(generate(make_spec("qmkar", pairs=200), 3, 1))
    first = [ask("sim:linear?d=32", it).text for it in items]
    assert first == [ask("sim:linear?d=32", it).text for it in items]
    assert first != [ask("sim:linear?d=32&seed=1", it).text for it in items]


# --- the blog's claims, run through the CLI ----------------------------------------


def test_quickstart_softmax_finds_every_value_and_the_delta_rule_keeps_only_the_last(tmp_path):
    runs = run_eval(tmp_path, ["sim:softmax", "sim:linear", "sim:delta"], "qmkar", 20)
    # Softmax attention misses no stored value on any question. Being a soft read-out, it
    # can also return a value of a similar key: on these 20 questions it does so once (an
    # FP of another key), so exact accuracy is 19/20, not 20/20.
    softmax = runs["sim:softmax"]
    assert sum(r.score.tp for r in softmax) == 60 and sum(r.score.fn for r in softmax) == 0
    assert sum(r.score.fp for r in softmax) <= 2 and accuracy(softmax) >= 0.9
    assert accuracy(runs["sim:delta"]) == 0
    # the delta rule overwrites: it loses the first two values and keeps the last
    delta = runs["sim:delta"]
    assert all(r.score.fn_by_position == [1, 1, 0] for r in delta)


def test_linear_attention_is_a_capacity_limit_that_more_dimensions_lift(tmp_path):
    names = ["sim:linear?d=64", "sim:linear?d=256", "sim:linear?d=1024"]
    runs = run_eval(tmp_path, names, "qmkar", 10)
    small, middle, large = (accuracy(runs[n]) for n in names)
    assert small < middle < large and large >= 0.9
    assert sum(r.score.fp for r in runs["sim:linear?d=64"]) > sum(r.score.fn for r in runs["sim:linear?d=64"])


def test_decay_forgets_the_first_value(tmp_path):
    runs = run_eval(tmp_path, ["sim:gla?decay=0.99&d=1024"], "qmkar", 10)
    assert all(r.score.fn_by_position[0] == 1 for r in runs["sim:gla?decay=0.99&d=1024"])


def test_mqar_is_within_reach_of_the_delta_rule_with_enough_dimensions(tmp_path):
    names = ["sim:delta?d=256", "sim:delta?d=2048"]
    runs = run_eval(tmp_path, names, "mqar", 10)
    assert accuracy(runs["sim:delta?d=256"]) < 0.5 <= 0.9 <= accuracy(runs["sim:delta?d=2048"])


def test_counting_softmax_normalises_the_count_away_and_linear_accumulates_it(tmp_path):
    names = ["sim:softmax", "sim:delta", "sim:linear?near=0&digits=0&d=2048"]
    runs = run_eval(tmp_path, names, "counting", 10)
    assert all(r.score.predicted_count == 1 for r in runs["sim:softmax"])
    assert all(r.score.predicted_count <= 2 for r in runs["sim:delta"])  # saturates near one write
    linear = runs[names[2]]
    truth = [r.item.expected[0] for r in linear]
    assert sum(r.score.abs_error for r in linear) < sum(abs(t - 1) for t in truth) / 2

"""--context-tokens: contexts sized to a token budget, the key range that grows with QMKAR's pairs,
and the one TaskFamily hook a new task implements to get it."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from qmkar import tokens, transcript
from qmkar.errors import UsageError
from qmkar.parse import ParsedAnswer
from qmkar.render import default_template, load_template
from qmkar.score import Score
from qmkar.sizing import Sizing, prompt_tokens, sized_fields
from qmkar.tasks import FAMILIES, IntRange, generate, make_spec
from qmkar.tasks.base import Item, TaskParams, require, same_digits
from qmkar.tasks.family import TaskFamily
from qmkar.tasks.qmkar import key_range_for


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_generate_32k_gives_prompts_within_5_percent_and_the_same_bytes_again(cli, tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    result = cli("generate", "--task", "qmkar", "--context-tokens", "32k", "-n", 4, "-o", first)
    cli("generate", "--task", "qmkar", "--context-tokens", "32k", "-n", 4, "-o", second)
    assert first.read_bytes() == second.read_bytes()
    counter = tokens.counter("o200k")
    for line in lines(first):
        item = Item.model_validate(line)
        counted = prompt_tokens(item, default_template("qmkar"), counter)
        assert 0.95 * 32768 <= counted <= 32768
        assert line["params"]["prompt_tokens"] == counted
        assert line["params"]["context_tokens"] == 32768 and line["params"]["tokenizer"] == "o200k_base"
    assert "qmkar at 32k tokens: 2,729 pairs, keys 1000..2097" in " ".join(result.output.split())


@pytest.mark.parametrize("task", ["qmkar", "mqar", "counting", "parity", "parity-ones", "dyck", "copy",
                                  "qmkar-kv", "mqar-kv"])
def test_every_task_fills_4k_and_16k(task):
    counter = tokens.counter("o200k")
    sizing = Sizing([4096, 16384], counter)
    for fit in sizing.fits(make_spec(task), 0):
        for item in generate(fit.spec, 3, 0):
            counted = prompt_tokens(item, default_template(task), counter)
            assert 0.95 * fit.target <= counted <= fit.target, (task, fit.target, counted)
            assert item.size == fit.size


def test_the_blogs_defaults_keep_the_blogs_key_range():
    assert key_range_for(500, 3) == IntRange(100, 300)
    assert [same_digits(w) for w in (201, 900, 901, 9001)] == [
        IntRange(100, 300), IntRange(100, 999), IntRange(1000, 1900), IntRange(10000, 19000)]


@pytest.mark.parametrize("pairs", [500, 2000, 8000])
def test_keys_repeat_as_often_as_in_the_blog_at_every_size(pairs):
    """The blog's 500 pairs over 100..300: a non-target key present appears 2.71 times on
    average, with one digit count throughout (measured on its 100 problems)."""
    keys = key_range_for(pairs, 3)
    assert len(str(keys.low)) == len(str(keys.high))
    item = next(generate(make_spec("qmkar", pairs=pairs, key_range=str(keys)), 1, 0))
    seen = Counter(k for k, _ in item.pairs if k != item.query[0])
    assert 2.5 < sum(seen.values()) / len(seen) < 2.95


def test_a_fit_uses_the_runs_template_and_tokenizer():
    builtin = default_template("qmkar")
    template = builtin._replace(text="Long preamble. " * 200 + builtin.text)
    plain = Sizing([8192], tokens.counter("o200k")).fits(make_spec("qmkar"), 0)[0]
    padded = Sizing([8192], tokens.counter("o200k"), template).fits(make_spec("qmkar"), 0)[0]
    digits = Sizing([8192], tokens.counter("digits")).fits(make_spec("qmkar"), 0)[0]
    assert padded.size < plain.size and digits.size < plain.size
    assert (plain.size, digits.size) == (743, 544)


@pytest.mark.parametrize("args, message", [
    (["--pairs", "300"], "--context-tokens chooses --pairs itself"),
    (["--length", "64", "-t", "parity"], "--context-tokens chooses --lengths itself"),
    (["--context-tokens", "20"], "the smallest qmkar context (3 pairs) already has"),
    (["--tokenizer", "nope"], "unknown --tokenizer 'nope'"),
])
def test_impossible_sizes_are_one_clear_error(cli, tmp_path, args, message):
    full = ["generate", "-o", tmp_path / "x.jsonl", *args]
    if "--context-tokens" not in args:
        full += ["--context-tokens", "8k"]
    result = cli(*full, code=1)
    assert message in " ".join(result.output.split())


def test_a_key_range_given_is_kept(cli, tmp_path):
    out = tmp_path / "x.jsonl"
    cli("generate", "--context-tokens", "8k", "--key-range", "1000..1500", "-n", 2, "-o", out)
    assert {line["params"]["key_range"] for line in lines(out)} == {"1000..1500"}


def test_eval_sizes_for_the_models_and_refuses_a_mix(cli, tmp_path):
    refused = cli("eval", "-m", "gpt-4o", "-m", "gemini-2.0-flash", "--context-tokens", "4k", "--dry-run",
                  code=1)
    assert "count tokens differently" in " ".join(refused.output.split())
    chosen = cli("eval", "-m", "gpt-4o", "-m", "gemini-2.0-flash", "--context-tokens", "4k",
                 "--tokenizer", "digits", "-n", 2, "--dry-run")
    assert "4k tokens: 271 pairs" in " ".join(chosen.output.split())
    dataset = tmp_path / "d.jsonl"
    cli("generate", "-n", 2, "-o", dataset)
    assert "do not apply to --dataset" in cli("eval", "-m", "oracle", "--dataset", dataset,
                                               "--context-tokens", "4k", code=1).output


def test_eval_over_sizes_records_the_target_and_groups_by_it(cli, tmp_path):
    out = tmp_path / "run.jsonl"
    cli("eval", "-m", "oracle", "--context-tokens", "1k,2k", "-n", 3, "-o", out)
    summaries = json.loads(cli("report", out, "--format", "json").stdout)
    assert sorted(s["condition"]["params"]["context_tokens"] for s in summaries) == [1024, 2048]
    assert all(s["correct"] == 3 for s in summaries)
    grid = json.loads(cli("compare", out, "--format", "json").stdout)["grid"]
    assert [(c["size"], c["unit"]) for c in grid] == [(1024, "tokens"), (2048, "tokens")]


# --- the hook: a new task gets --context-tokens by implementing `sized` -------------------------


class ChainParams(TaskParams):
    links: int = 10
    seed: int | None = None


class Chain(TaskFamily):
    """A toy: follow a chain of letters."""

    name = "chain"
    params_type = ChainParams
    options = {"links": "letters in the chain"}
    placeholders = {"chain": "the letters"}
    size_unit = "symbols"

    def check(self, params: ChainParams) -> None:
        require(params.links >= 2, "--links must be at least 2")

    def sized(self, params: ChainParams, size: int) -> TaskParams | None:
        return self.resized(params, links=size)

    def generate_one(self, params: ChainParams, seed: int, index: int) -> Item:
        rng = random.Random(f"chain/{seed}/{index}")
        letters = [rng.choice("abcdefgh") for _ in range(params.links)]
        recorded = ChainParams(links=params.links, seed=seed)
        return self.new_item(index, recorded, ("text",), text="".join(letters), query=[],
                             expected=[len(letters)], target_positions=[])

    def prompt_fields(self, item: Item) -> dict[str, str]:
        return {"chain": " ".join(item.text or "")}

    def parse(self, item: Item, text: str) -> ParsedAnswer:
        return ParsedAnswer(values=[int(n) for n in re.findall(r"\d+", text)][:1])

    def score(self, item: Item, parsed: ParsedAnswer) -> Score:
        return Score(correct=parsed.values == item.expected)


def test_one_method_gives_a_new_task_context_tokens(monkeypatch, cli, tmp_path):
    monkeypatch.setitem(FAMILIES, "chain", Chain())
    template = tmp_path / "chain.txt"
    template.write_text("{chain}\n\nHow long is it?")
    sizing = Sizing([1000], tokens.counter("o200k"), load_template("chain", template))
    fit = sizing.fits(make_spec("chain"), 0)[0]
    assert 950 <= fit.tokens <= 1000 and sized_fields("chain") == {"links"}
    out = tmp_path / "chain.jsonl"
    cli("eval", "-t", "chain", "-m", "oracle", "--template", template, "--context-tokens", "1000", "-n", 2,
        "-o", out)
    records = transcript.read(out).records
    assert [r.item.size for r in records] == [fit.size] * 2 and all(r.correct for r in records)


def test_a_task_without_the_hook_is_refused(monkeypatch, cli, tmp_path):
    class Fixed(Chain):
        name = "fixed"

        def sized(self, params, size):
            return None

    monkeypatch.setitem(FAMILIES, "fixed", Fixed())
    with pytest.raises(UsageError, match="does not apply to --task fixed"):
        Sizing([1000], tokens.counter("o200k")).fits(make_spec("fixed"), 0)

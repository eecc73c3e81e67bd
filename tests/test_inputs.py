"""Inputs checked on read, beyond the corpus of refusals: what must still be accepted
(every generated dataset, identical repeats, the blog's files), the home folder missing,
messages printed literally, unreadable files, and a real process's stderr."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qmkar.cli import app
from qmkar.cli_errors import err, error_line, warning_line
from qmkar.defaults import SEND_BOUNDS
from qmkar.errors import DatasetError, ProviderError, UsageError
from qmkar.providers.replay import load_answers
from qmkar.tasks import FAMILIES, family, generate, make_spec
from qmkar.tasks.base import MAX_CONTEXT, option_name
from qmkar.tasks.datasets import read_items, write_items
from qmkar.transcript import read
from tests.support.transcripts import Cli

CORPUS = Path(__file__).parent / "corpus"
runner = CliRunner()

# Options that change what an item holds (placements, near keys, sizes), per task.
VARIANTS: dict[str, list[dict[str, object]]] = {
    "qmkar": [{}, {"pairs": 30, "targets": 4, "placement": "depth:0,0.5,1,0.2"},
              {"pairs": 40, "near_keys": 5}, {"pairs": 20, "unique_distractors": True}],
    "mqar": [{}, {"pairs": 25, "queries": 5}],
    "counting": [{}, {"length": 30, "value_range": "0..3"}],
    "qmkar-kv": [{"pairs": 30}, {"pairs": 30, "key_tokens": 3, "near_keys": 4, "placement": "spread"}],
    "mqar-kv": [{"pairs": 30, "queries": 4}],
    "parity": [{"lengths": "8,16"}],
    "parity-ones": [{"lengths": "16,32", "ones": 3}],
    "dyck": [{"lengths": "8,32"}],
    "copy": [{"lengths": "5,9"}],
}


def test_variants_cover_every_task() -> None:
    assert set(VARIANTS) == set(FAMILIES)


@pytest.mark.parametrize(("task", "options"), [(t, o) for t, os_ in VARIANTS.items() for o in os_])
def test_every_generated_dataset_passes_the_checks_on_read(task, options, tmp_path) -> None:
    path = tmp_path / "d.jsonl"
    written = write_items(generate(make_spec(task, **options), 12, 3), path)
    assert [item.id for item in read_items(path)] == [item.id for item in
                                                      generate(make_spec(task, **options), 12, 3)]
    assert written == 12


def test_sized_items_pass_the_checks_on_read(cli: Cli, tmp_path) -> None:
    path = tmp_path / "sized.jsonl"
    cli("generate", "-o", path, "-n", "3", "--context-tokens", "1k,2k")
    assert len(list(read_items(path))) == 6


def test_an_identical_repeat_is_read_once_and_asked_once(cli: Cli, tmp_path) -> None:
    lines = (CORPUS / "good.jsonl").read_text().splitlines()
    path = tmp_path / "repeated.jsonl"
    path.write_text("\n".join([lines[0], lines[1], lines[0], ""]))
    assert [item.id for item in read_items(path)] == [json.loads(lines[i])["id"] for i in (0, 1)]
    out = tmp_path / "t.jsonl"
    cli("eval", "-m", "oracle", "--dataset", path, "-o", out)
    assert len(read(out).records) == 2


def test_a_repeat_with_other_content_is_refused_naming_both_places(tmp_path) -> None:
    with pytest.raises(DatasetError, match=r"line 2 reuses the id .* of line 1"):
        list(read_items(CORPUS / "duplicate_ids.jsonl"))


def test_the_blogs_form_is_read_when_whole(blog_dir) -> None:
    assert [item.task for item in read_items(CORPUS / "blog_good.json")] == ["qmkar"] * 3
    for name, task in (("qmkar", "qmkar"), ("mqar", "mqar"), ("counting", "counting")):
        items = list(read_items(blog_dir / f"{name}_problems.json"))
        assert len(items) == 100 and {item.task for item in items} == {task}


def test_a_blog_problem_without_t_is_not_read_as_mqar() -> None:
    with pytest.raises(DatasetError, match="problem 2 has the fields of a mqar problem but the problems "
                       "before it are qmkar"):
        list(read_items(CORPUS / "blog_one_without_t.json"))


@pytest.mark.parametrize("name", ["qmkar", "mqar", "counting", "copy", "dyck", "parity"])
def test_a_changed_answer_is_refused_for_every_task(name, tmp_path) -> None:
    options = VARIANTS[name][-1]
    item = next(generate(make_spec(name, **options), 1, 0))
    assert family(name).item_problem(item) is None
    changed = item.model_copy(update={"expected": [item.expected[0] + 1, *item.expected[1:]]})
    assert family(name).item_problem(changed) is not None


def test_replay_repeats_agreeing_are_one_answer_and_disagreeing_are_refused(tmp_path) -> None:
    same = tmp_path / "same.jsonl"
    same.write_text('{"id": "a", "answer": "1"}\n{"id": "b", "answer": "2"}\n{"id": "a", "answer": "1"}\n')
    assert {key: record["answer"] for key, record in load_answers(same).items()} == {"a": "1", "b": "2"}
    with pytest.raises(ProviderError, match=r"answers id .* twice, differently \(lines 1 and 3\)"):
        load_answers(CORPUS / "replay_conflict.jsonl")


def test_the_largest_context_is_accepted_and_one_more_refused_with_the_figure() -> None:
    assert make_spec("qmkar", pairs=MAX_CONTEXT).params.pairs == MAX_CONTEXT
    with pytest.raises(UsageError, match=r"--pairs 2,000,001 cannot fit: .* about 320 MB of memory"):
        make_spec("qmkar", pairs=MAX_CONTEXT + 1)


def test_unique_distractors_from_a_huge_key_range_are_drawn_without_listing_it() -> None:
    spec = make_spec("qmkar", pairs=200, targets=3, key_range="100..100000000000", unique_distractors=True)
    item = next(generate(spec, 1, 0))
    keys = [k for k, _ in item.pairs or []]
    distractors = [k for k in keys if k != item.query[0]]
    assert len(set(distractors)) == len(distractors) == 197
    assert family("qmkar").item_problem(item) is None


@pytest.mark.parametrize("name", sorted(SEND_BOUNDS))
def test_every_numeric_sending_option_is_bounded(name, tmp_path) -> None:
    low, high = SEND_BOUNDS[name]
    option = option_name(name)
    base = ["eval", "-m", "oracle", "-n", "1", "--pairs", "10", "-o", str(tmp_path / "t.jsonl")]
    for value in (str(int(high * 10 + 1)), str(low - 1)):
        result = runner.invoke(app, [*base, option, value])
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith(f"error: {option} must be between") and result.stderr.count("\n") == 1
    assert not (tmp_path / "t.jsonl").exists()


@pytest.fixture
def no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HOME and no passwd entry for this user: Path.home() cannot be found."""
    for variable in ("HOME", "QMKAR_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises(RuntimeError):
        Path.home()


@pytest.mark.parametrize("model", ["oracle", "sim:delta?d=64", "unknownprefix:model"])
def test_offline_models_run_without_a_home_folder(no_home, model, cli: Cli, tmp_path) -> None:
    out = tmp_path / "t.jsonl"
    if model.startswith("unknownprefix"):  # looking for the default endpoints file is no crash
        result = cli("eval", "-m", model, "-n", "2", "--pairs", "10", "-o", out, ok=False)
        assert result.exit_code == 1 and result.stderr.startswith("error: unknown model")
        return
    cli("eval", "-m", model, "-n", "2", "--pairs", "10", "-o", out)
    assert len(read(out).records) == 2


def test_a_hosted_model_without_a_home_folder_gets_one_line_and_works_without_the_cache(
        no_home, server, keyed, tmp_path) -> None:
    out = tmp_path / "t.jsonl"
    args = ["eval", "-m", "openai:gpt-4o", "-n", "2", "--pairs", "10", "-o", str(out),
            "--base-url", server.base_url, "--api-key-env", "FAKE_API_KEY"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: the response cache has no folder")
    assert "--no-cache" in refused.stderr
    assert server.requests == [] and not out.exists()
    done = runner.invoke(app, [*args, "--no-cache"])
    assert done.exit_code == 0, done.output
    assert len(read(out).records) == 2


def test_messages_are_printed_as_written(capsys) -> None:
    error_line("cannot read run[v2].jsonl: [endpoints.mylab] [bold]x[/bold]")
    warning_line("[yellow]kept[/yellow] run[v2].jsonl")
    captured = capsys.readouterr().err
    assert captured == ("error: cannot read run[v2].jsonl: [endpoints.mylab] [bold]x[/bold]\n"
                        "warning: [yellow]kept[/yellow] run[v2].jsonl\n")
    assert not err.is_terminal


def test_an_endpoints_table_in_a_message_is_printed_literally(tmp_path) -> None:
    result = runner.invoke(app, ["eval", "-m", "mylab:model", "-n", "1", "--endpoints",
                                 str(CORPUS / "endpoints_entry_string.toml")])
    assert result.exit_code == 1
    assert "endpoints.mylab: Input should be a valid dictionary" in result.stderr
    assert 'a table [endpoints.NAME] with base_url = "https://.../v1"' in result.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
@pytest.mark.parametrize("option", ["--dataset", "--template", "--prices"])
def test_an_unreadable_file_is_one_line(option, tmp_path) -> None:
    path = tmp_path / "secret.jsonl"
    path.write_text("{}\n")
    path.chmod(0)
    try:
        args = ["eval", "-m", "oracle", "-n", "1", option, str(path)]
        if option != "--dataset":
            args += ["--pairs", "10"]
        result = runner.invoke(app, args)
    finally:
        path.chmod(0o644)
    assert result.exit_code == 1 and result.stderr.startswith("error: cannot read")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [
    ["eval", "-m", "oracle", "--dataset", str(CORPUS / "binary.bin")],
    ["eval", "-m", "oracle", "--pairs", "1000000000", "-n", "1"],
    ["eval", "-m", "oracle", "--temperature", "nan", "-n", "1"],
    ["eval", "--pairs", "ten", "-m", "oracle"],
])
def test_a_real_process_prints_one_line(args, tmp_path) -> None:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "qmkar", *args], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode in (1, 2)
    assert done.stdout == "", done.stdout
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert list(tmp_path.iterdir()) == []

"""The blog's problem sets by name: read from the data folder, fetched from a mirror on
127.0.0.1 when absent (checked by sha256, kept), and one clear line when they cannot be had.
No test here reaches the network: fetches go to a loopback server or a closed port."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from qmkar import blogsets
from qmkar.errors import DatasetError
from qmkar.transcript import Reading
from tests.support.fileserver import FileServer
from tests.support.ports import free_port
from tests.support.transcripts import Cli

SETS = {"qmkar": "qmkar_problems.json", "mqar": "mqar_problems.json", "counting": "counting_problems.json"}


@pytest.fixture
def mirror(blog_dir: Path, monkeypatch: pytest.MonkeyPatch):
    server = FileServer(blog_dir).start()
    monkeypatch.setenv(blogsets.MIRROR_ENV, server.base_url)
    yield server
    server.stop()


def test_the_published_hashes_are_those_of_the_shared_copies(blog_dir):
    for name, wanted in blogsets.SETS.items():
        data = (blog_dir / wanted.file).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (wanted.sha256, wanted.size), name


def test_the_three_sets_by_name_give_the_blogs_300_prompts_byte_for_byte(
        blog_dir, monkeypatch, tmp_path, cli):
    monkeypatch.setenv(blogsets.DATA_ENV, str(blog_dir))
    result = cli("eval", "-m", "oracle", "--dataset", "blog:qmkar", "--dataset", "blog:mqar",
                 "--dataset", "blog:counting", "-o", tmp_path / "runs")
    written = sorted((tmp_path / "runs").glob("*.jsonl"))
    assert len(written) == 3
    for path in written:
        reading = Reading(path)
        records = list(reading)
        task = records[0].item.task
        problems = json.loads((blog_dir / SETS[task]).read_text())
        assert len(records) == 100
        for record, problem in zip(records, problems, strict=True):
            context = problem.get("kv_pairs") or problem.get("values")
            assert reading.prompt(record)[0]["content"] == context + "\n\n" + problem["question"]
    # Reported apart: a header per dataset, each with its own table.
    for name in ("blog:qmkar", "blog:mqar", "blog:counting"):
        assert name in result.output


def test_a_missing_set_is_fetched_checked_and_kept(mirror, blog_dir, monkeypatch, tmp_path):
    kept = tmp_path / "data"
    monkeypatch.setenv(blogsets.DATA_ENV, str(kept))
    heard: list[str] = []
    path = blogsets.path_for("blog:counting", note=heard.append)
    assert path == kept / "counting_problems.json"
    assert path.read_bytes() == (blog_dir / "counting_problems.json").read_bytes()
    assert mirror.requests == ["/mirror/counting_problems.json"] and "fetched" in heard[0]
    assert blogsets.path_for("blog:counting") == path and len(mirror.requests) == 1  # kept: not fetched again
    assert [p.name for p in kept.iterdir()] == ["counting_problems.json"]


def test_a_file_that_is_not_the_published_one_is_refused_and_not_kept(monkeypatch, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    (served / "mqar_problems.json").write_text("[]")
    server = FileServer(served).start()
    try:
        monkeypatch.setenv(blogsets.MIRROR_ENV, server.base_url)
        monkeypatch.setenv(blogsets.DATA_ENV, str(tmp_path / "data"))
        with pytest.raises(DatasetError, match="did not serve the published mqar_problems.json"):
            blogsets.path_for("blog:mqar")
    finally:
        server.stop()
    assert not (tmp_path / "data").exists() or list((tmp_path / "data").iterdir()) == []


def test_a_changed_local_copy_is_refused(monkeypatch, tmp_path):
    (tmp_path / "qmkar_problems.json").write_text("[]")
    monkeypatch.setenv(blogsets.DATA_ENV, str(tmp_path))
    with pytest.raises(DatasetError, match="is not the published qmkar_problems.json.*remove it"):
        blogsets.path_for("blog:qmkar")


def test_without_a_copy_or_a_network_eval_says_where_the_files_come_from_in_one_line(
        monkeypatch, tmp_path, cli: Cli):
    monkeypatch.setenv(blogsets.DATA_ENV, str(tmp_path / "empty"))
    monkeypatch.setenv(blogsets.MIRROR_ENV, f"http://127.0.0.1:{free_port()}/")
    result = cli("eval", "-m", "oracle", "--dataset", "blog:qmkar", ok=False)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: blog:qmkar is the blog's qmkar_problems.json")
    for said in ("github.com/Hanyuezhuohua/QMKAR at commit b5b4f8f", "QMKAR_DATA_DIR", "fetching"):
        assert said in lines[0]


def test_a_mirror_without_the_file_is_one_line_too(mirror, monkeypatch, tmp_path):
    monkeypatch.setenv(blogsets.DATA_ENV, str(tmp_path))
    monkeypatch.setattr(blogsets, "SETS", {**blogsets.SETS, "qmkar": blogsets.SETS["qmkar"]._replace(
        file="not_there.json")})
    with pytest.raises(DatasetError, match="answered HTTP 404"):
        blogsets.path_for("blog:qmkar")


def test_an_unknown_set_names_the_published_ones(cli: Cli):
    result = cli("eval", "-m", "oracle", "--dataset", "blog:parity", ok=False)
    assert result.exit_code == 1 and "blog:qmkar, blog:mqar, blog:counting" in result.output


def test_several_datasets_of_one_task_are_asked_and_reported_apart(tmp_path, cli: Cli):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    cli("generate", "-o", a, "-n", 3, "--pairs", 20, "--seed", 1)
    cli("generate", "-o", b, "-n", 4, "--pairs", 20, "--seed", 2)
    result = cli("eval", "-m", "oracle", "--dataset", a, "--dataset", b, "-o", tmp_path / "out",
                 "--format", "json")
    assert len(list((tmp_path / "out").glob("*.jsonl"))) == 2
    assert sorted(s["n"] for s in _json_lists(result.output)) == [3, 4]


def _json_lists(text: str) -> list[dict]:
    decoder, found, index = json.JSONDecoder(), [], text.find("[")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except ValueError:
            index = text.find("[", index + 1)
            continue
        if isinstance(value, list) and value and isinstance(value[0], dict) and "n" in value[0]:
            found.extend(value)
        index = text.find("[", end)
    return found


def test_several_datasets_refuse_a_file_for_output_and_a_repeat(tmp_path, cli: Cli):
    a = tmp_path / "a.jsonl"
    cli("generate", "-o", a, "-n", 2, "--pairs", 20)
    existing = tmp_path / "t.jsonl"
    existing.write_text("")
    result = cli("eval", "-m", "oracle", "--dataset", a, "--dataset", a, ok=False)
    assert result.exit_code == 1 and "given twice" in result.output
    b = tmp_path / "b.jsonl"
    cli("generate", "-o", b, "-n", 2, "--pairs", 20, "--seed", 3)
    result = cli("eval", "-m", "oracle", "--dataset", a, "--dataset", b, "-o", existing, ok=False)
    assert result.exit_code == 1 and "names a folder" in result.output

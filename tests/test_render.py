"""Templates: the blog's text by default, user overrides checked, shipped in the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from qmkar.errors import TemplateError
from qmkar.render import default_template, load_template, render
from qmkar.tasks.family import pairs_text
from tests.support.factories import counting_item, recall_item

ROOT = Path(__file__).resolve().parents[1]


def test_default_qmkar_prompt_is_the_blogs_text() -> None:
    item = recall_item()
    [message] = render(item, default_template("qmkar"))
    assert message["role"] == "user"
    assert message["content"].startswith("k: 231, v: 7777; k: 230, v: 4527; ")
    assert message["content"].endswith(
        "k: 199, v: 2222\n\nIf k is 230, what are v? Please directly give me all values "
        "without other output"
    )


def test_user_template_replaces_only_its_placeholders(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("Context {pairs}\nJSON like {\"a\": 1}. Key {key}?")
    template = load_template("qmkar", path)
    text = render(recall_item(), template)[0]["content"]
    assert text.endswith('JSON like {"a": 1}. Key 230?')
    assert template.origin == str(path)


def test_template_missing_a_placeholder_says_which(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("Count {value} please")
    with pytest.raises(TemplateError, match=r"\{values\}"):
        load_template("counting", path)
    with pytest.raises(TemplateError, match="does not exist"):
        load_template("counting", tmp_path / "none.txt")


def test_counting_prompt() -> None:
    text = render(counting_item(), default_template("counting"))[0]["content"]
    assert text.startswith("44, 44, ")
    assert text.endswith("\n\nWhat is the count of values equal to 44? Please answer this question "
                         "without using any external tool")


@pytest.mark.slow
def test_wheel_carries_the_templates(tmp_path: Path) -> None:
    """An installed wheel has no checkout beside it: the prompts must be inside."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )
    [wheel] = tmp_path.glob("qmkar-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for task in ("qmkar", "mqar", "counting"):
        assert f"qmkar/prompts/{task}.txt" in names
        assert (zipfile.ZipFile(wheel).read(f"qmkar/prompts/{task}.txt").decode()
                == (ROOT / "prompts" / f"{task}.txt").read_text())
    # Installed from the wheel, away from the checkout, qmkar still finds them.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    probe = ("import qmkar.render as r; t = r.default_template('mqar'); "
             "print(r.__file__); print(t.text)")
    shown = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True,
                           capture_output=True, text=True, env={"PYTHONPATH": str(target)})
    module_path, _, text = shown.stdout.partition("\n")
    assert module_path.startswith(str(target))
    assert text.rstrip("\n") == (ROOT / "prompts" / "mqar.txt").read_text()


@pytest.mark.parametrize("pairs", [
    [(248, 5542), (169, 2882)],
    [[1, 2], [3, 4]],  # lists, as a transcript read without validation holds them
    [(-1, 10**20), (0, 7)],
    [(5, 6)] * 3,
    [],
])
def test_context_is_the_pairs_written_one_by_one(pairs: list) -> None:
    item = recall_item().model_copy(update={"pairs": pairs})
    assert pairs_text(item) == "; ".join(f"k: {k}, v: {v}" for k, v in pairs)


@pytest.mark.parametrize(("pairs", "text"), [
    ([("a", "b"), (1, 2)], "k: a, v: b; k: 1, v: 2"),
    ([(1.5, 2), (3, 4)], "k: 1.5, v: 2; k: 3, v: 4"),  # not cut to an int
    ([(True, 2)], "k: True, v: 2"),
])
def test_a_context_of_other_shapes_is_written_pair_by_pair(pairs: list, text: str) -> None:
    """Only an item read without validation holds these; each pair is written as it is."""
    item = recall_item().model_copy(update={"pairs": pairs})
    assert pairs_text(item) == "; ".join(f"k: {k}, v: {v}" for k, v in pairs) == text

"""Context length as an axis: effective lengths, depth x length heatmaps and their differences,
in report, compare, sweep, plot and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qmkar import compare, lengths
from qmkar.lengths import PassRule, effective_length
from tests.support.transcripts import write_replay

# --- the effective length, from (length, correct, n) ------------------------------------------


def found(tallies, rule=None):
    return effective_length("qmkar", "m", "tokens", tallies, rule or PassRule(0.85))


def test_the_longest_length_up_to_which_every_length_passes():
    result = found([(1024, 40, 40), (2048, 39, 40), (4096, 30, 40), (8192, 40, 40)])
    assert [p.verdict for p in result.points] == ["pass", "pass", "undecided", "pass"]
    assert result.effective == 2048 and result.bracket == (2048, 4096)
    assert "4k is undecided" in result.note and "passes again at 8k" in result.note


def test_below_the_shortest_and_beyond_the_longest():
    below = found([(1024, 10, 40), (2048, 5, 40)])
    assert below.effective is None and below.bracket == (None, 1024)
    assert lengths.effective_text(below) == "< 1k" and lengths.bracket_text(below) == "?-1k"
    # All right at 10 answers each: the lower bound is under the line, so the shortest
    # length is undecided, not failed, and the text says so rather than "< 1k".
    few = found([(1024, 10, 10), (2048, 10, 10)])
    assert few.effective is None and lengths.effective_text(few) == "? (1k undecided)"
    beyond = found([(1024, 40, 40), (2048, 40, 40)])
    assert beyond.bracket == (2048, None) and lengths.effective_text(beyond) == ">= 2k"


def test_the_relative_rule_holds_each_length_to_a_share_of_the_shortest():
    # 30/40 at the shortest (the base, passing by definition): the line is 0.85 x 0.75 = 0.6375;
    # 36/40 and 40/40 clear it, 15/40 falls under it.
    result = found([(1000, 30, 40), (2000, 36, 40), (4000, 40, 40), (8000, 15, 40)], PassRule(0.85, True))
    assert result.line == pytest.approx(0.6375)
    assert [p.verdict for p in result.points] == ["pass", "pass", "pass", "fail"]
    assert result.effective == 4000 and result.bracket == (4000, 8000)


def test_too_few_questions_to_ever_pass_is_said():
    result = found([(1024, 20, 20), (2048, 20, 20)])
    assert result.effective is None and "with 20 answers even all right" in result.note


# --- through the CLI: a sweep in tokens with a model that misses early targets at 2k ----------


@pytest.fixture
def token_sweep(tmp_path: Path, cli) -> tuple[Path, str]:
    """oracle and a replay model over 1k and 2k tokens; the replay model misses every target
    value whose pair sits in the first fifth of the context, at 2k only."""
    answers = tmp_path / "answers.jsonl"
    with answers.open("w") as out:
        for size in ("1k", "2k"):
            dataset = tmp_path / f"{size}.jsonl"
            cli("generate", "--context-tokens", size, "-n", 6, "--seed", 3, "-o", dataset)

            def answer(i, item, size=size):
                kept = [v for v, depth in zip(item.expected, item.target_depths(), strict=True)
                        if size == "1k" or depth >= 0.2]
                return ", ".join(map(str, kept)) or "none"

            out.write(write_replay(dataset, tmp_path / "part.jsonl", answer).read_text())
    sweep = tmp_path / "sweep.jsonl"
    cli("sweep", "-m", "oracle", "-m", f"replay:{answers}", "--context-tokens", "1k,2k", "-n", 6,
        "--seed", 3, "-o", sweep)
    return sweep, f"replay:{answers}"


def test_the_heatmap_shows_recall_by_depth_and_length_and_the_difference(cli, token_sweep):
    sweep, replay = token_sweep
    data = json.loads(cli("compare", sweep, "--format", "json").stdout)
    maps = {m["model"]: m for m in data["heatmaps"]}
    assert maps[replay]["lengths"] == [1024, 2048]
    first_fifth = maps[replay]["targets"][0]
    assert maps[replay]["missed"][0] == [0, first_fifth[1]] and first_fifth[1] > 0
    assert all(row[1] == 0 for row in maps[replay]["missed"][1:])
    assert not any(any(row) for row in maps["oracle"]["missed"])
    shown = cli("compare", sweep).stdout
    difference = shown[shown.index("qmkar: recall difference by depth and tokens (points)"):].splitlines()
    first_fifth_row = next(line for line in difference if f"{replay} - oracle" in line)
    assert first_fifth_row.split()[-3:] == ["0-20%", "+0", "-100"]


def test_effective_lengths_in_tokens_are_reported_with_their_bracket(cli, token_sweep):
    sweep, replay = token_sweep
    data = json.loads(cli("compare", sweep, "--format", "json", "--pass", "0.5").stdout)
    by_model = {f["model"]: f for f in data["effective_lengths"]}
    assert by_model["oracle"]["bracket"] == [2048, None]
    # 6/6 at 1k has a lower bound of 61%: it passes 0.5; the replay model's 2k answers miss.
    assert by_model[replay]["effective"] == 1024 and by_model[replay]["bracket"] == [1024, 2048]
    table = cli("report", sweep, "--pass", "0.5").stdout
    assert "effective context length in tokens" in table and ">= 2k" in table


def test_plot_and_html_draw_the_heatmaps_and_effective_lengths(cli, token_sweep, tmp_path):
    sweep, _ = token_sweep
    folder = tmp_path / "plots"
    cli("plot", sweep, "-o", folder)
    names = {p.name for p in folder.iterdir()}
    assert {"heatmap-qmkar.png", "heatmap-difference-qmkar.png", "effective-length-qmkar.png"} <= names
    page = tmp_path / "report.html"
    cli("report", sweep, "--format", "html", "-o", page)
    html = page.read_text()
    assert "recall by depth and length" in html and "effective context length" in html


def test_by_tokens_bins_the_counted_prompt_tokens(cli, token_sweep):
    sweep, _ = token_sweep
    runs = compare.load_runs([sweep])
    binned = lengths.lines(runs, "tokens")
    # Prompts fitted to at most 1,024 and 2,048 tokens fall in the bins up to 1k and up to 2k.
    assert all(list(line.by_length) == [1024, 2048] for line in binned)
    assert all(line.unit == "prompt tokens (binned)" for line in binned)


def test_a_pairs_sweep_gets_effective_lengths_only_when_a_pass_line_is_given(cli, tmp_path):
    sweep = tmp_path / "pairs.jsonl"
    cli("sweep", "-m", "oracle", "--pairs", "20,40", "-n", 3, "-o", sweep)
    plain = cli("report", sweep).stdout
    assert "qmkar: recall by depth and pairs" in plain and "effective context length" not in plain
    asked = cli("report", sweep, "--pass", "0.2").stdout
    assert "effective context length in pairs" in asked


@pytest.mark.parametrize("args, message", [
    (["--pass", "0.9", "--pass-relative", "0.85"], "give --pass or --pass-relative, not both"),
    (["--pass", "1.5"], "between 0 and 1"),
])
def test_bad_pass_lines_are_one_clear_error(cli, token_sweep, args, message):
    sweep, _ = token_sweep
    assert message in cli("report", sweep, *args, code=1).output

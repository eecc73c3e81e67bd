"""`qmkar plot` and `qmkar report --format html` on transcripts written by eval and sweep."""

from __future__ import annotations

import base64
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.colors
import matplotlib.image
import pytest

from qmkar import compare, plot, readers, runs
from qmkar.transcript import read
from tests.support.transcripts import values, write_replay


@pytest.fixture
def mixed_runs(tmp_path: Path, cli, recall_runs) -> list[Path]:
    """A qmkar sweep (two sizes, t = 3 and 5), the recall_runs eval, and a counting eval."""
    sweep = tmp_path / "sweep.jsonl"
    cli("sweep", "-m", "oracle", "--pairs", "20,40", "--targets", "3,5", "-n", 3, "-o", sweep)
    counting = tmp_path / "counting-ds.jsonl"
    cli("generate", "-t", "counting", "--length", 40, "-n", 8, "-o", counting)
    # Over-count by one on even items, say nothing countable on item 1.
    answers = write_replay(counting, tmp_path / "count-answers.jsonl", lambda i, item: (
        "I cannot tell" if i == 1 else f"{item.expected[0] + (1 if i % 2 == 0 else 0)}"))
    counting_run = tmp_path / "counting-run.jsonl"
    cli("eval", "-m", "oracle", "-m", f"replay:{answers}", "--dataset", counting, "-o", counting_run)
    return [sweep, recall_runs["transcript"], counting_run]


def test_plot_writes_every_figure_as_a_readable_png(cli, mixed_runs, tmp_path):
    folder = tmp_path / "plots"
    result = cli("plot", *mixed_runs, "-o", folder)
    names = sorted(p.name for p in folder.iterdir())
    # The sweep spans two sizes, so it also gets recall by depth and size (heatmap-qmkar).
    assert names == ["accuracy-counting.png", "accuracy-qmkar.png", "counting-errors.png",
                     "fn-by-depth-qmkar.png", "fn-by-position-qmkar.png", "fp-kinds-qmkar.png",
                     "heatmap-qmkar.png"]
    for name in names:
        assert f"wrote {folder / name}" in " ".join(result.stdout.split())
        image = matplotlib.image.imread(folder / name)
        height, width = image.shape[:2]
        assert width >= 900 and height >= 600  # 150 dpi figures, not thumbnails


def test_accuracy_figure_draws_the_grid_it_reports(cli, mixed_runs):
    runs = compare.load_runs(mixed_runs)
    (figure,) = [f for f in plot.figures(runs) if f.name == "accuracy-qmkar"]
    panels = figure.figure.axes
    assert [ax.get_title() for ax in panels] == ["targets = 3", "targets = 5"]
    cells = json.loads(cli("compare", "--format", "json", *mixed_runs).stdout)["grid"]
    for ax, width in zip(panels, (3, 5), strict=True):
        drawn = {}
        for line in ax.get_lines():
            if line.get_label().startswith("_"):
                continue  # error-bar parts
            points = zip(line.get_xdata(), line.get_ydata(), strict=True)
            drawn[line.get_label().replace("\n", "")] = dict(points)
        expected = {}
        for cell in cells:
            if cell["task"] == "qmkar" and cell["width"] == width and cell["n"]:
                expected.setdefault(cell["model"], {})[cell["size"]] = cell["accuracy"]
        assert drawn == expected
    legend = [t.get_text().replace("\n", "") for t in figure.figure.legends[0].get_texts()]
    assert "oracle @ sweep" in legend and "oracle @ run" in legend


def test_fn_by_position_shows_the_share_missed_at_each_position(mixed_runs, recall_runs):
    runs = compare.load_runs(mixed_runs)
    (figure,) = [f for f in plot.figures(runs) if f.name == "fn-by-position-qmkar"]
    t3 = figure.figure.axes[0]
    labels = [t.get_text().replace("\n", "") for t in figure.figure.legends[0].get_texts()]
    heights = {label: [bar.get_height() for bar in container]
               for label, container in zip(labels, t3.containers, strict=True)}
    # Model A of recall_runs missed the last of 3 targets on 6 of its 24 questions.
    assert heights[recall_runs["a"]] == pytest.approx([0, 0, 6 / 24])
    assert heights[recall_runs["b"]] == pytest.approx([0, 0, 12 / 24])


def png(figure) -> bytes:
    found = io.BytesIO()
    figure.figure.savefig(found, format="png")
    return found.getvalue()


def test_plot_draws_from_tallies_what_records_give(mixed_runs, monkeypatch):
    """plot reads runs without records (runs.count_runs), a reader process counting part of
    them: every figure is the same PNG as from runs read whole (compare.load_runs), and as
    from runs read in one process."""
    whole = {f.name: png(f) for f in plot.figures(compare.load_runs(mixed_runs))}
    monkeypatch.setattr(readers, "SPLIT_MIN", 0)
    split = runs.count_runs(mixed_runs)
    assert all(not run.records for run in split)
    assert {f.name: png(f) for f in plot.figures(split)} == whole
    monkeypatch.setattr(readers, "SPLIT_MIN", 1 << 60)
    assert {f.name: png(f) for f in plot.figures(runs.count_runs(mixed_runs))} == whole


def test_a_counts_signed_error_is_read_from_its_score(cli, mixed_runs, tmp_path):
    """counting_errors' signed errors, from each run's tally of scores, are answer for answer
    the given count less the true one: over, under and exact, a score shared by many answers."""
    flat = write_replay(tmp_path / "counting-ds.jsonl", tmp_path / "flat.jsonl",
                        lambda i, item: "0" if i % 2 else "5")
    run = tmp_path / "flat-run.jsonl"
    cli("eval", "-m", f"replay:{flat}", "--dataset", tmp_path / "counting-ds.jsonl", "-o", run)
    found = [run for run in compare.load_runs([*mixed_runs, run]) if run.task == "counting"]
    for counted in found:
        given = sorted(r.score.predicted_count - r.item.expected[0] for r in counted.records
                       if r.score is not None and r.score.predicted_count is not None)
        assert sorted(plot.signed_errors(counted.tally.scores())) == given
    errors = plot.signed_errors(found[-1].tally.scores())
    assert min(errors) < 0 < max(errors) and len(found[-1].tally.scores()) < len(errors) == 8


def test_plot_refuses_transcripts_with_no_answers(cli, tmp_path):
    dataset = tmp_path / "ds.jsonl"
    cli("generate", "-o", dataset, "-n", 2, "--pairs", 20)
    empty_answers = tmp_path / "none.jsonl"
    empty_answers.write_text("")
    run = tmp_path / "run.jsonl"
    cli("eval", "-m", f"replay:{empty_answers}", "--dataset", dataset, "-o", run, code=3)
    result = cli("plot", run, "-o", tmp_path / "plots", ok=False)
    assert result.exit_code == 1
    assert "nothing to plot" in result.output and "Traceback" not in result.output


class PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: list[str] = []
        self.headings: list[str] = []
        self.text: list[str] = []
        self._in_heading = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attributes = dict(attrs)
        if tag == "img":
            self.images.append(attributes["src"])
        self._in_heading = tag in ("h2", "h3")

    def handle_endtag(self, tag):
        self._in_heading = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_heading:
            self.headings.append(data)


def test_html_report_is_one_self_contained_page(cli, mixed_runs, tmp_path, recall_runs):
    page = tmp_path / "out" / "report.html"
    result = cli("report", "--format", "html", "-o", page, *mixed_runs)
    assert f"wrote {page}" in " ".join(result.stdout.split())
    text = page.read_text(encoding="utf-8")
    parser = PageParser()
    parser.feed(text)

    # Nothing is fetched from elsewhere: no scripts, stylesheets, or remote images.
    assert "script" not in parser.tags and "link" not in parser.tags
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)
    # Every figure `qmkar plot` draws for the same transcripts is embedded.
    cli("plot", *mixed_runs, "-o", tmp_path / "plots")
    assert len(parser.images) == len(list((tmp_path / "plots").glob("*.png")))
    for source in parser.images:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")

    for heading in ("qmkar: questions", "qmkar: values", "counting",
                    "paired: same questions, A against B", "qmkar: accuracy by number of pairs"):
        assert heading in parser.headings
    body = " ".join(parser.text)
    assert recall_runs["a"] in body and "0.146" in body


def test_html_report_escapes_what_it_shows(cli, tmp_path):
    dataset = tmp_path / "ds.jsonl"
    cli("generate", "-o", dataset, "-n", 2, "--pairs", 20)
    odd = tmp_path / "<b>odd & name>.jsonl"
    write_replay(dataset, odd, lambda i, item: values(item))
    run = tmp_path / "run.jsonl"
    cli("eval", "-m", f"replay:{odd}", "--dataset", dataset, "-o", run)
    page = tmp_path / "r.html"
    cli("report", "--format", "html", "-o", page, run)
    text = page.read_text()
    assert "<b>odd" not in text and "&lt;b&gt;odd &amp; name&gt;" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "html"], "--format html writes a file: add -o FILE"),
        (["-o", "x.html"], "-o writes an html report; pass --format html"),
    ],
)
def test_html_report_needs_its_file(cli, recall_runs, args, message):
    result = cli("report", *args, recall_runs["transcript"], ok=False)
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())


def test_plain_report_is_unchanged(cli, recall_runs):
    lines = cli("report", recall_runs["transcript"]).stdout.splitlines()
    header = next(line for line in lines if "correct" in line and "model" in line)
    assert header.split()[:3] == ["model", "n", "correct"]  # no compare columns leak in


def test_fn_by_depth_marks_depths_that_hold_no_target(cli, tmp_path):
    run = tmp_path / "start.jsonl"
    cli("sweep", "-m", "sim:delta", "--pairs", "40", "--placement", "start", "-n", 4, "-o", run)
    (figure,) = [f for f in plot.figures(compare.load_runs([run])) if f.name == "fn-by-depth-qmkar"]
    ax = figure.figure.axes[0]
    (marks,) = [line for line in ax.get_lines() if line.get_marker() == "x"]
    # --placement start puts all three targets in the first 20% of the context.
    assert len(marks.get_xdata()) == 4
    (bar,) = [b for b in ax.patches if b.get_height() > 0]
    assert bar.get_x() < 0.5  # the misses are in bucket 0


TWENTY = [f"sim:{memory}?d={d}" for memory in ("linear", "delta")
          for d in (8, 12, 16, 24, 32, 48, 64, 96, 128, 192)]


def _bar_styles(figure) -> dict[str, tuple]:
    """Label -> (face colour, hatch) of every labelled bar group in a figure."""
    found: dict[str, set] = {}
    for ax in figure.axes:
        for container in ax.containers:
            label = container.get_label().replace("\n", "")
            if label.startswith("_"):
                continue
            for bar in container:
                look = (tuple(bar.get_facecolor()), bar.get_hatch())
                found.setdefault(label.split(" (")[0], set()).add(look)
    assert all(len(looks) == 1 for looks in found.values()), found
    return {label: looks.pop() for label, looks in found.items()}


def test_twenty_conditions_get_twenty_looks_the_same_in_every_figure(cli, tmp_path):
    run, sweep = tmp_path / "eval.jsonl", tmp_path / "sweep.jsonl"
    models = [arg for model in TWENTY for arg in ("-m", model)]
    cli("eval", *models, "-n", 4, "--pairs", 20, "-o", run)
    cli("sweep", *models, "--pairs", "10,20", "-n", 2, "-o", sweep)

    runs = compare.load_runs([run])
    made = {f.name: f.figure for f in plot.figures(runs)}
    bars = [_bar_styles(made[f"{name}-qmkar"]) for name in ("accuracy", "fn-by-position", "fn-by-depth")]
    assert all(set(looks) == set(TWENTY) for looks in bars)
    assert bars[0] == bars[1] == bars[2]  # a condition looks the same in every figure
    assert len(set(bars[0].values())) == 20  # and unlike every other: colour and hatch
    assert len({colour for colour, _ in bars[0].values()}) == 10  # tab10 twice, the second time hatched
    for name in ("accuracy-qmkar", "fp-kinds-qmkar"):
        # One row per condition: the figure grows down, never 20 bars' worth across.
        width, height = made[name].get_size_inches() * plot.DPI
        assert width <= 1400 and height <= 1700, (name, width, height)
        labels = [t.get_text().replace("\n", "") for t in made[name].axes[0].get_yticklabels()]
        assert labels == TWENTY

    (lines,) = [f.figure for f in plot.figures(compare.load_runs([sweep])) if f.name == "accuracy-qmkar"]
    drawn = {line.get_label(): (tuple(matplotlib.colors.to_rgba(line.get_color())), line.get_marker(),
                                line.get_linestyle())
             for line in lines.axes[0].get_lines() if not line.get_label().startswith("_")}
    assert set(drawn) == set(TWENTY) and len(set(drawn.values())) == 20
    assert len({(colour, marker) for colour, marker, _ in drawn.values()}) == 20
    for label, (colour, _, linestyle) in drawn.items():
        # The same model has the same colour in the sweep's lines as in the eval's bars, and
        # the second round through the palette is dashed where its bars are hatched.
        assert colour == bars[0][label][0]
        assert (linestyle == "-") == (bars[0][label][1] is None)


def test_html_report_summarises_each_condition_and_lists_its_wrong_answers(cli, recall_runs, tmp_path):
    page = tmp_path / "report.html"
    cli("report", "--format", "html", "-o", page, recall_runs["transcript"])
    text = page.read_text(encoding="utf-8")
    sections = re.findall(r"<details>(.*?)</details>", text, re.S)
    assert len(sections) == 3  # oracle, A and B, each collapsible
    by_label = {}
    for section in sections:
        summary = re.search(r"<summary>(.*?)</summary>", section, re.S)[1]
        label = re.sub(r"<[^>]+>", "", summary).split(" &middot;")[0].strip()
        by_label[label] = (re.sub(r"<[^>]+>", "", summary), section)
    oracle, a, b = by_label["oracle"], by_label[recall_runs["a"]], by_label[recall_runs["b"]]
    assert "accuracy 100.0% (24/24)" in oracle[0] and "0 wrong" in oracle[0]
    assert "no wrong answers" in oracle[1]
    assert "accuracy 75.0% (18/24)" in a[0] and "6 wrong" in a[0]
    assert "accuracy 50.0% (12/24)" in b[0] and "12 wrong" in b[0]

    records = {r.item_id: r for r in read(recall_runs["transcript"]).records if r.model == recall_runs["b"]}
    rows = re.findall(r"<tr><td class=\"text\">(qmkar-[^<]+)</td>(.*?)</tr>", b[1], re.S)
    assert len(rows) == 10  # the first 10 of B's 12; the rest are one command away
    for item_id, cells in rows:
        record = records[item_id]
        expected, given, where = re.findall(r"<td class=\"wrap\">(.*?)</td>", cells)[:3]
        assert expected == ", ".join(map(str, record.item.expected))
        assert given == ", ".join(map(str, record.parsed.values))  # the last value dropped
        assert where.startswith(f"{record.item.target_positions[0]} (")
    note = re.search(r"2 more wrong answers not shown; every one: <code>(.*?)</code>", b[1])[1]
    assert note == f"qmkar show {recall_runs['transcript']} --wrong --model {recall_runs['b']}"
    listed = cli("show", recall_runs["transcript"], "--wrong", "--model", recall_runs["b"]).stdout
    assert listed.count("\nwrong ") + listed.startswith("wrong ") == 12
    # The summary table: a row per condition, marked with its plot colour, with its numbers.
    table = text.split("<h2>Conditions</h2>")[1].split("</table>")[0]
    summary = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]:
        assert row.count('class="swatch"') == 1
        cells = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        summary[cells[0]] = cells[4:]
    assert summary[recall_runs["b"]] == ["24", "12", "50.0%", "31-69%", "12", "0"]
    assert summary["oracle"] == ["24", "24", "100.0%", "86-100%", "0", "0"]


def test_html_report_numbers_are_those_of_report_with_several_samples(cli, tmp_path):
    # With --samples the CI allows for answers of one question being alike (report.py's
    # clustered interval); the page showed a plain Wilson interval over every answer instead.
    out = tmp_path / "t.jsonl"
    cli("eval", "-m", "sim:linear", "-n", "12", "--pairs", "30", "--samples", "3", "--temperature", "1",
        "-o", out)
    (summary,) = json.loads(cli("report", "--format", "json", out).stdout)
    page = tmp_path / "report.html"
    cli("report", "--format", "html", "-o", page, out)
    table = page.read_text(encoding="utf-8").split("<h2>Conditions</h2>")[1].split("</table>")[0]
    cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", table, re.S)]
    low, high = summary["accuracy_ci"]
    assert summary["n"] == 36 and str(summary["n"]) in cells and str(summary["correct"]) in cells
    assert f"{low * 100:.0f}-{high * 100:.0f}%" in cells, cells

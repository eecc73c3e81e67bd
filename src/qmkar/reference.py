"""Published results shown beside the user's runs: `qmkar compare RUNS --reference blog`.

The blog's three tables are copied here as published: "Failure of Linear/Hybrid Model
in the QMKAR Task" (2025-01-26), from its source in the public repository
Hanyuezhuohua/Hanyuezhuohua.github.io, blog/src/content/posts/qmkar.md at commit
3d46f6f (2025-01-27), served at https://xinyuyang.me/blog/posts/qmkar. The blog asked
20 questions per model and problem set by hand in each model's chat web page; which 20
it asked is not published, and it gives no MQAR value counts and no counting errors, so
those cells are empty ("-"), never estimated.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from qmkar.compare import Run, run_summaries
from qmkar.errors import UsageError
from qmkar.score import wilson_interval
from qmkar.tables import Cell, Interval, Pct, Table

SOURCE = ("github.com/Hanyuezhuohua/Hanyuezhuohua.github.io blog/src/content/posts/qmkar.md at 3d46f6f "
          "(https://xinyuyang.me/blog/posts/qmkar, 2025-01-26)")
QUESTIONS = 20  # "a preliminary evaluation of 20 examples", per model and problem set


class Published(NamedTuple):
    """One model's row in one of the blog's tables; None where the blog gives no figure."""

    model: str  # as the blog names it
    correct: int
    outcomes: tuple[int, int, int, int] | None = None  # True, False w/ FN, False w/ FP, False w/ both
    values: tuple[int, int, int, tuple[int, ...]] | None = None  # TP, FP, FN, FN by position


# The blog's tables, row for row ("Overall performance comparison", "Fine-grained
# performance comparison", the MQAR ablation and "Counting Problem").
BLOG: dict[str, list[Published]] = {
    "qmkar": [
        Published("ChatGPT 4o", 18, (18, 1, 1, 0), (59, 1, 1, (1, 0, 0))),
        Published("Claude 3.5 Sonnet", 14, (14, 0, 6, 0), (60, 10, 0, (0, 0, 0))),
        Published("LLaMA 3.1 405B", 10, (10, 8, 1, 1), (50, 3, 10, (8, 0, 2))),
        Published("Minimax-01", 3, (3, 11, 0, 5), (36, 10, 24, (2, 7, 15))),
        Published("Deepseek V3", 13, (13, 5, 1, 1), (55, 2, 5, (4, 1, 1))),
        Published("Gemini 1.5", 18, (18, 1, 1, 0), (59, 2, 1, (0, 0, 1))),
    ],
    "mqar": [
        Published("ChatGPT 4o", 19, (19, 0, 0, 1)),
        Published("Claude 3.5 Sonnet", 20, (20, 0, 0, 0)),
        Published("LLaMA 3.1 405B", 16, (16, 1, 0, 3)),
        Published("Minimax-01", 18, (18, 0, 2, 0)),
        Published("Deepseek V3", 19, (19, 0, 0, 1)),
        Published("Gemini 1.5", 20, (20, 0, 0, 0)),
    ],
    "counting": [
        Published("ChatGPT 4o", 4), Published("Claude 3.5 Sonnet", 3), Published("LLaMA 3.1 405B", 1),
        Published("Minimax-01", 2), Published("Deepseek V3", 4), Published("Gemini 1.5", 3),
        Published("Deepseek R1", 20), Published("o1", 20),
    ],
}
REFERENCES = {"blog": BLOG}


def check(name: str | None) -> dict[str, list[Published]] | None:
    """The published tables called `name` (None: no reference asked for)."""
    if name is None:
        return None
    if name not in REFERENCES:
        raise UsageError(f"--reference {name!r}: the published results qmkar knows are "
                         + ", ".join(REFERENCES))
    return REFERENCES[name]


def tables(runs: list[Run], name: str) -> list[Table]:
    """Per task the blog published: its rows ("blog: MODEL"), then the runs' own rows on that task."""
    published = REFERENCES[name]
    summaries = {(run.task, run.label): s for run, s in zip(runs, run_summaries(runs), strict=True)}
    result: list[Table] = []
    for task, rows in published.items():
        mine = [(label, s) for (t, label), s in summaries.items() if t == task]
        header = ["model", "source", "n", "correct", "accuracy", "95% CI"]
        if task == "counting":
            body: list[list[Cell]] = [
                [f"{name}: {p.model}", "published", QUESTIONS, p.correct, Pct(p.correct / QUESTIONS),
                 Interval(*_wilson(p.correct))] for p in rows]
            body += [[label, "this run", s.n, s.correct, Pct(s.accuracy), Interval(*s.accuracy_ci)]
                     for label, s in mine]
            result.append(Table(f"{task}: the {name}'s published results and yours", header, body))
            continue
        header += ["True", "F+FN", "F+FP", "F+both"]
        body = [[f"{name}: {p.model}", "published", QUESTIONS, p.correct, Pct(p.correct / QUESTIONS),
                 Interval(*_wilson(p.correct)), *(p.outcomes or (None,) * 4)] for p in rows]
        body += [[label, "this run", s.n, s.correct, Pct(s.accuracy), Interval(*s.accuracy_ci),
                  s.outcomes["true"], s.outcomes["fn"], s.outcomes["fp"], s.outcomes["both"]]
                 for label, s in mine]
        result.append(Table(f"{task}: the {name}'s published results and yours", header, body))
        if any(p.values for p in rows):
            width = max(len(p.values[3]) for p in rows if p.values)
            header = ["model", "source", "TP", "FP", "FN", *(f"FN-Pos{i}" for i in range(width))]
            body = [[f"{name}: {p.model}", "published", *_values(p.values, width)] for p in rows]
            body += [[label, "this run", s.tp, s.fp, s.fn, *_padded(s.fn_by_position, width)]
                     for label, s in mine]
            result.append(Table(f"{task}: values, the {name}'s and yours", header, body))
    return result


def _values(values: tuple[int, int, int, tuple[int, ...]] | None, width: int) -> list[Cell]:
    if values is None:
        return [None] * (3 + width)
    tp, fp, fn, by_position = values
    return [tp, fp, fn, *_padded(list(by_position), width)]


def _padded(counts: list[int], width: int) -> list[Cell]:
    return [*counts[:width], *([0] * (width - len(counts)))]


def notes(name: str) -> list[str]:
    return [f"{name}: as published in {SOURCE}. The blog asked {QUESTIONS} questions per model and set "
            "by hand in each model's chat web page, a different sample from yours (which of the 100 "
            "published problems it asked is not said), so its rows are never paired with yours; its "
            "model names are of January 2025. At 20 questions its 95% intervals (Wilson, as for yours) "
            "are wide. Two of its rows do not add up, and are shown as published: "
            "Minimax-01's QMKAR outcomes sum to 19 of 20, Deepseek V3's FN by position to 6 against "
            "an FN of 5."]


def _wilson(correct: int) -> tuple[float, float]:
    return wilson_interval(correct, QUESTIONS)


def with_json(text: str, name: str) -> str:
    """compare's JSON with the published rows added under "reference"."""
    data = json.loads(text)
    data["reference"] = {"name": name, "source": SOURCE, "questions": QUESTIONS, "tables": {
        task: [p._asdict() for p in rows] for task, rows in REFERENCES[name].items()}}
    return json.dumps(data, indent=2)

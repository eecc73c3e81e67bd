"""The least a script must do to read what report, compare and rescore read: downstream.py's
"bare" side, timed as a whole process beside qmkar's on the same files in the same rounds.

Each reads every line of the transcripts and decodes it with msgspec (untyped), in one
process, and does no more than the command's smallest useful answer:

- report: the latest answer per (question, condition, sample) of each file, and per
  condition how many were right, wrong and failed;
- compare: that for both files, and the paired table of the questions both answered (both
  right, only A, only B, neither);
- rescore: each line decoded and encoded again into the output (no answer graded).

None of them checks a line against its schema, grades an answer, counts what qmkar's tables
count, or uses a second CPU: it is a floor to read qmkar's times against, measured on the same
machine in the same rounds, not a competitor.

    python benchmarks/bare_reading.py report A.jsonl [B.jsonl ...]
    python benchmarks/bare_reading.py compare A.jsonl B.jsonl
    python benchmarks/bare_reading.py rescore SOURCE.jsonl OUTPUT.jsonl
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import msgspec

decode = msgspec.json.decode


def latest_correct(path: Path) -> dict[tuple[str, str, int], bool | None]:
    """Each key's last answer: right, wrong, or None (failed, or not graded)."""
    found: dict[tuple[str, str, int], bool | None] = {}
    with path.open("rb") as handle:
        for line in handle:
            if line.isspace():
                continue
            data = decode(line)
            if data.get("kind") != "answer":
                continue
            score = data.get("score")
            right = None if data.get("error") is not None or score is None else bool(score["correct"])
            found[(data["item_id"], data["condition_id"], data.get("sample", 0))] = right
    return found


def report(paths: list[Path]) -> None:
    for path in paths:
        counts: Counter[tuple[str, bool | None]] = Counter()
        for (_, condition, _), right in latest_correct(path).items():
            counts[(condition, right)] += 1
        print(path, sorted(counts.items(), key=str))


def compare(paths: list[Path]) -> None:
    first, second = (latest_correct(path) for path in paths)
    answered = {(item, sample): right for (item, _, sample), right in second.items() if right is not None}
    table: Counter[tuple[bool, bool]] = Counter()
    for (item, _, sample), right in first.items():
        other = answered.get((item, sample))
        if right is not None and other is not None:
            table[(right, other)] += 1
    print(sorted(table.items()))


def rescore(paths: list[Path]) -> None:
    source, output = paths
    encode = msgspec.json.Encoder().encode
    with source.open("rb") as handle, output.open("wb") as out:
        for line in handle:
            if not line.isspace():
                out.write(encode(decode(line)) + b"\n")


COMMANDS = {"report": report, "compare": compare, "rescore": rescore}


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in COMMANDS:
        raise SystemExit(__doc__.rsplit("\n\n", 1)[-1])
    COMMANDS[sys.argv[1]]([Path(arg) for arg in sys.argv[2:]])


if __name__ == "__main__":
    main()

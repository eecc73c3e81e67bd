"""A rerun of a generated plan, as a user makes it after a crash or a run with errors: whole
`qmkar eval` processes, this code and a baseline side by side.

Builds once, with this code, a transcript of --questions oracle answers (--pairs pairs), and
a copy of it with the answers of every --every-th question removed (from the --every/2-th):
questions left here and there, as errors leave them. Then, in interleaved rounds, reruns the
same command on a fresh copy of each: "answered" (nothing left to ask) and "holes" (only the
removed questions are asked). Prints the median wall time and peak RSS (the process and its
workers, benchmarks/downstream.py's `run`) of each side, their ratio, and checks that both
codes end with the same `report --format json`.

    python benchmarks/resume.py --baseline OTHER_CHECKOUT/src [--questions 20000] [--pairs 500]
        [--every 1000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from checkout import src_folder
from downstream import HERE, fresh_copy, run


def without_answers(source: Path, target: Path, every: int) -> int:
    """`source` less the answer lines of every `every`-th question; how many were removed."""
    removed = 0
    with source.open() as lines, target.open("w") as kept:
        for line in lines:
            if '"kind":"answer"' in line:
                number = int(json.loads(line)["item_id"].split("-")[1])
                if number % every == every // 2:
                    removed += 1
                    continue
            kept.write(line)
    return removed


def report(src: Path, transcript: Path, cwd: Path) -> object:
    """The transcript's `report --format json`, its file names left out."""
    found = json.loads(run(src, "report", "--format", "json", transcript, cwd=cwd)[2])

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("transcript", "path", "files")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, metavar="SRC", type=src_folder,
                        help="the src/ folder of another checkout")
    parser.add_argument("--questions", type=int, default=20000)
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    sides = {"this code": HERE, "baseline": Path(args.baseline)}
    plan = ["-m", "oracle", "-n", str(args.questions), "--pairs", str(args.pairs)]
    with tempfile.TemporaryDirectory() as name:
        work = Path(name)
        answered, holes = work / "answered.jsonl", work / "holes.jsonl"
        run(HERE, "eval", *plan, "-o", answered, cwd=work)
        removed = without_answers(answered, holes, args.every)
        print(f"{args.questions} oracle questions of {args.pairs} pairs; 'holes': {removed} answers removed, "
              f"one every {args.every}", flush=True)
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        reports: dict[str, object] = {}
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for case, source in (("answered", answered), ("holes", holes)):
                for side in order:
                    copy = work / f"{case}-{side.replace(' ', '-')}.jsonl"
                    fresh_copy(source, copy)
                    wall, rss, _ = run(sides[side], "eval", *plan, "-o", copy, cwd=work)
                    figures.setdefault((case, side), []).append((wall, rss))
                    print(f"round {round_ + 1}: {case}, {side}: {wall:.2f} s, {rss:.0f} MB", flush=True)
                    if case == "holes":
                        reports[side] = report(sides[side], copy, work)
        print(f"\nmedians of {args.rounds} rounds")
        print(f"{'rerun':12} {'this code s':>12} {'baseline s':>12} {'ratio':>6} "
              f"{'this MB':>8} {'base MB':>8}")
        for case in ("answered", "holes"):
            ours = figures[(case, "this code")]
            base = figures[(case, "baseline")]
            wall, base_wall = (statistics.median(w for w, _ in f) for f in (ours, base))
            rss, base_rss = (statistics.median(r for _, r in f) for f in (ours, base))
            print(f"{case:12} {wall:12.2f} {base_wall:12.2f} {base_wall / wall:6.2f} "
                  f"{rss:8.0f} {base_rss:8.0f}")
        same = reports["this code"] == reports["baseline"]
        print(f"final reports of the 'holes' reruns: {'the same' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()

"""What a user waits for after a run: report, rescore, compare, plot, the HTML report, a resume
with nothing left to ask, show (50 questions picked by id) and runs, as whole processes on
transcripts of 10k-100k records; and report of the same answers split over ten transcripts
in a folder.

Builds three real transcripts of 2,000 questions (50 pairs, or --pairs) with `qmkar eval` (the
oracle, and two replays whose answers are right, miss a value or add one, each independently of the
other), then copies their questions under new ids up to each size. `compare` pairs the
oracle with a replay; "compare replays" pairs the two replays, which disagree both ways.
Every command runs as its own process; each figure is its wall time and its peak RSS:
ru_maxrss of the child, or, when larger, the peak of its RSS and its worker processes'
summed (sampled every 10 ms; report, compare and plot may read with a second process,
readers.py). With --baseline SRC (the `src` folder of another checkout, for example a git
worktree of the commit before a change) the same commands run on that code too, interleaved
with this one (each command on every side in turn, the order turning each round), and the
ratios are printed. With more than one round, each command's range of wall times on this code
is printed beside its median, and from 50k on the issue's target for it.

report, rescore and compare also run, in the same rounds, as a bare script of the same files
(bare_reading.py: every line decoded by msgspec in one process, and the least of the command's
answer), unless --no-bare: its time says how fast this machine read these bytes in this run,
beside a target in seconds; "bare x" is its time over this code's. That ratio moves from run
to run too: qmkar reads with two processes, the script with one, and how much a second CPU
gives on this machine changes from hour to hour.

    python benchmarks/downstream.py --baseline /tmp/qmkar-main/src
    python benchmarks/downstream.py --sizes 10000 --rounds 3

Also prints a transcript's bytes per question at 500 pairs, and checks that both codes
print the same `report --format json` (of two files, and of a folder), `compare --format json`
(of both pairs), `runs --format json` and `show --wrong`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from checkout import src_folder

HERE = Path(__file__).resolve().parent.parent / "src"
BASE_QUESTIONS = 2000


def tree_rss(pid: int) -> int:
    """RSS in bytes of a process and all its descendants, now (0 once it has gone)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in status.splitlines()
                       if line.startswith("VmRSS:")), 0)
        todo += map(int, children)
    return total


def sampled(pid: int, peak: list[int], done: threading.Event) -> None:
    while not done.wait(0.01):
        peak[0] = max(peak[0], tree_rss(pid))


def run(src: Path, *args: str | Path, cwd: Path, script: Path | None = None) -> tuple[float, float, str]:
    """Run `python -m qmkar ARGS` on the code in `src` (or `python SCRIPT ARGS`), reaped with
    wait4 for its own peak RSS, its workers' sampled beside it: (wall seconds, peak RSS in MB,
    stdout)."""
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "200"}
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    os.sync()  # earlier writes (a rescore's output, a resume's fresh copy) go to disk untimed
    started = time.perf_counter()
    command = [str(script)] if script is not None else ["-m", "qmkar"]
    process = subprocess.Popen([sys.executable, *command, *map(str, args)], cwd=cwd, env=env,
                               stdout=out, stderr=err)
    peak, done = [0], threading.Event()
    sampler = threading.Thread(target=sampled, args=(process.pid, peak, done), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    err.seek(0)
    if process.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(command[-1:] + list(map(str, args)))} failed ({process.returncode}):\n"
                         f"{err.read().decode()[-2000:]}")
    return wall, max(usage.ru_maxrss * 1024, peak[0]) / 2**20, out.read().decode()


def build_base(work: Path, pairs: int) -> None:
    """2,000 questions and three transcripts of them, written by qmkar itself: the oracle's,
    and two replays' (b and c), each right on about 70% of the questions, wrong on the others
    by a value missed or one added, independently of the other: comparing them, each is right
    where the other is wrong on a fifth of the questions, as two real models are."""
    if not (work / "d-base.jsonl").exists():
        _finished(work, "d-base.jsonl", "generate", "--pairs", str(pairs), "-n", str(BASE_QUESTIONS),
                  "--seed", "7", "--force")
    if not (work / "a-base.jsonl").exists():
        _finished(work, "a-base.jsonl", "eval", "--dataset", "d-base.jsonl", "-m", "oracle")
    for name, replay, seed in (("b", "replay.jsonl", 7), ("c", "replay-c.jsonl", 8)):
        if (work / f"{name}-base.jsonl").exists():
            continue
        chooser = random.Random(seed)
        with (work / replay).open("w") as out:
            for line in (work / "d-base.jsonl").read_text().splitlines():
                item = json.loads(line)
                values = list(item["expected"])
                roll = chooser.random()
                if roll < 0.15:
                    values = values[:-1]
                elif roll < 0.3:
                    values.append(values[0] + 1)
                out.write(json.dumps({"id": item["id"], "answer": ", ".join(map(str, values))}) + "\n")
        _finished(work, f"{name}-base.jsonl", "eval", "--dataset", "d-base.jsonl", "-m",
                  f"replay:{work / replay}")


def _finished(work: Path, name: str, *args: str) -> None:
    """Run `qmkar ARGS -o NAME` in `work`, writing NAME only once the command has ended well (a
    run cut short leaves a transcript that a later build would otherwise take for whole)."""
    partial = work / f"{name}.partial"
    partial.unlink(missing_ok=True)
    run(HERE, *args, "-o", partial.name, cwd=work)
    partial.replace(work / name)


def _renamed(line: str, copy: int) -> str:
    data = json.loads(line)
    if data.get("kind") == "item":
        data["item"]["id"] += f"-{copy}"
    elif data.get("kind") == "answer":
        data["item_id"] += f"-{copy}"
    elif "task" in data and "expected" in data:  # a dataset item
        data["id"] += f"-{copy}"
    return json.dumps(data, separators=(",", ":"))


def _copies(work: Path, name: str, path: Path, copies: range) -> None:
    """Write to `path` work/NAME-base.jsonl's run and template lines, then its questions and
    answers once for each copy, under that copy's ids."""
    lines = (work / f"{name}-base.jsonl").read_text().splitlines()
    heads = [line for line in lines if '"kind":"run"' in line or '"kind":"template"' in line]
    body = [line for line in lines if line not in heads]
    partial = path.with_name(path.name + ".partial")  # a build cut short is not taken for done
    with partial.open("w") as out:
        out.write("\n".join(heads) + "\n")
        for copy in copies:
            out.write("\n".join(_renamed(line, copy) for line in body) + "\n")
    partial.replace(path)


def grow(work: Path, name: str, size: int) -> Path:
    """A copy of work/NAME-base.jsonl with `size` answers: its questions copied under new ids."""
    path = work / f"{name}-{size}.jsonl"
    if not path.exists():
        _copies(work, name, path, range(size // BASE_QUESTIONS))
    return path


FOLDER_FILES = 10  # transcripts a folder's report reads (fewer for sizes under 10 x BASE_QUESTIONS)


def folder(work: Path, name: str, size: int) -> Path:
    """A folder holding grow(work, NAME, SIZE)'s answers split over FOLDER_FILES transcripts,
    each with the run and template lines and whole copies of the base's questions."""
    path = work / f"{name}-{size}-in-files"
    if path.is_dir():
        return path
    copies = size // BASE_QUESTIONS
    parts = min(FOLDER_FILES, copies)
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for part in range(parts):
        _copies(work, name, partial / f"part{part:02d}.jsonl",
                range(part * copies // parts, (part + 1) * copies // parts))
    partial.rename(path)
    return path


def size_per_question(work: Path, src: Path) -> float:
    """Bytes per question of an oracle transcript at 500 pairs, written by the code in `src`."""
    where = work / f"size-{abs(hash(str(src)))}"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    run(src, "eval", "-m", "oracle", "--pairs", "500", "-n", "200", "-o", "t.jsonl", cwd=where)
    return (where / "t.jsonl").stat().st_size / 200


RESUME = "eval (resume only)"
REPORT_FOLDER = f"report of {FOLDER_FILES} files"  # the same answers as `report`'s, in a folder
# Two runs each right where the other is wrong, often: the oracle against a replay never is, and
# an exact McNemar p-value that took 328 s for two such runs of 100k questions went unseen.
COMPARE_REPLAYS = "compare replays"


# The targets: (records, seconds, peak MB); compare's records are each file's. Printed
# beside the rows of 50k records and more.
TARGETS = {"report": (100000, 3.0, 200), "rescore": (100000, 5.0, 200), "compare": (100000, 5.0, 300),
           COMPARE_REPLAYS: (100000, 5.0, 300), RESUME: (50000, None, 150)}


def target(label: str) -> str:
    """The issue's target for a command, as text ("" for none)."""
    if label not in TARGETS:
        return ""
    records, seconds, megabytes = TARGETS[label]
    said = ([f"< {seconds:g} s"] if seconds else []) + [f"< {megabytes} MB"]
    return f"{', '.join(said)} at {records // 1000}k"


def fresh_copy(source: Path, target: Path) -> None:
    """Copy a transcript for a resume to append to. `run` flushes it to disk before timing the
    resume: writing back a copy of a few hundred MB while the next command was timed slowed
    that command by a third."""
    shutil.copyfile(source, target)


BARE_SCRIPT = Path(__file__).resolve().parent / "bare_reading.py"


def bare_commands(size: int, work: Path, out: Path) -> dict[str, list[str | Path]]:
    """bare_reading.py's arguments for the commands it has a bare form of, by label."""
    a, b, c = grow(work, "a", size), grow(work, "b", size), grow(work, "c", size)
    return {"report": ["report", a], "rescore": ["rescore", a, out / "bare-rescored.jsonl"],
            "compare": ["compare", a, b], COMPARE_REPLAYS: ["compare", b, c]}


def commands(size: int, work: Path, out: Path) -> dict[str, list[str | Path]]:
    a, b, c = grow(work, "a", size), grow(work, "b", size), grow(work, "c", size)
    dataset = grow(work, "d", size)
    resume = out / f"resume-{size}.jsonl"  # a copy of `a`, made just before its command (fresh_copy)
    return {
        "report": ["report", a],
        REPORT_FOLDER: ["report", folder(work, "a", size)],
        "rescore": ["rescore", a, "-o", out / "rescored.jsonl", "--force"],
        "compare": ["compare", a, b],
        COMPARE_REPLAYS: ["compare", b, c],
        "plot": ["plot", a, b, "-o", out / "figures"],
        "report --format html": ["report", "--format", "html", "-o", out / "report.html", a, b],
        RESUME: ["eval", "--dataset", dataset, "-m", "oracle", "-o", resume],
        "show --id": ["show", "--id", "qmkar-0001-", b],
        "runs": ["runs", a, b],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,50000,100000",
                        help="records per file, multiples of 2,000, e.g. 10000,50000")
    parser.add_argument("--baseline", type=src_folder, help="the src folder of the code to compare against")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; medians are printed")
    parser.add_argument("--only", help="commands to run, by label, comma-separated: report,rescore,compare")
    parser.add_argument("--pairs", type=int, default=50,
                        help="pairs per question (the issue's targets are for 50); other than 50, a work "
                             "folder of its own by default")
    parser.add_argument("--work", type=Path, help="where the transcripts are built and kept "
                        "[the temporary folder's qmkar-downstream]")
    parser.add_argument("--no-bare", action="store_true",
                        help="leave out the bare script beside report, rescore and compare")
    options = parser.parse_args()
    if options.pairs < 1:
        parser.error(f"--pairs must be at least 1, not {options.pairs}")
    try:
        sizes = [int(size) for size in options.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes takes numbers separated by commas, not {options.sizes!r}")
    if any(size < BASE_QUESTIONS or size % BASE_QUESTIONS for size in sizes):
        parser.error(f"--sizes: each is a multiple of {BASE_QUESTIONS:,} (the base transcripts' "
                     f"questions, copied under new ids), not {options.sizes}")
    work = options.work or Path(tempfile.gettempdir()) / (
        "qmkar-downstream" if options.pairs == 50 else f"qmkar-downstream-{options.pairs}-pairs")
    work.mkdir(parents=True, exist_ok=True)
    build_base(work, options.pairs)
    codes = {"this": HERE} | ({"baseline": Path(options.baseline).resolve()} if options.baseline else {})

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"{options.pairs} pairs a question")
    for name, src in codes.items():
        size = size_per_question(work, src)
        print(f"transcript size at 500 pairs ({name}): {size:,.0f} bytes per question")
    if options.baseline:
        same_outputs(work, codes)

    header = f"{'records':>8}  {'command':<22}" + "".join(
        f"  {name + ' s':>11}  {name + ' MB':>12}" for name in codes)
    if options.rounds > 1:
        header += f"  {'this s, range':>14}"
    if options.baseline:
        header += f"  {'time x':>7}  {'memory x':>8}"
    if not options.no_bare:
        header += f"  {'bare s':>7}  {'bare x':>6}"
    if max(sizes) >= 50000:
        header += "  target"
    print(header)
    for size in sizes:
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        sides = [*codes, *([] if options.no_bare else ["bare"])]
        for turn in range(options.rounds):
            # Each command runs on every side in turn, the sides' order turning each round: with
            # this code's commands always run before the baseline's, plot gave 0.9x in two runs
            # against the code before a change, where the two alternated by a throwaway script
            # gave 1.04 (docs/performance.md, thirty-first pass).
            order = sides[turn % len(sides):] + sides[:turn % len(sides)]
            outs = {name: work / f"out-{name}" for name in order}
            for out in outs.values():
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
            for label in commands(size, work, outs["this"]):
                if options.only and label not in options.only.split(","):
                    continue
                for name in order:
                    out = outs[name]
                    if name == "bare":
                        bare = bare_commands(size, work, out).get(label)
                        if bare is None:
                            continue
                        wall, peak, _ = run(HERE, *bare, cwd=out, script=BARE_SCRIPT)
                    else:
                        if label == RESUME:
                            fresh_copy(work / f"a-{size}.jsonl", out / f"resume-{size}.jsonl")
                        wall, peak, _ = run(codes[name], *commands(size, work, out)[label], cwd=out)
                    figures.setdefault((label, name), []).append((wall, peak))
        for label in commands(size, work, work / "out-this"):
            if (label, "this") not in figures:
                continue
            row = f"{size:>8}  {label:<22}"
            medians = {}
            for name in codes:
                walls = [w for w, _ in figures[(label, name)]]
                peaks = [p for _, p in figures[(label, name)]]
                medians[name] = (statistics.median(walls), statistics.median(peaks))
                row += f"  {medians[name][0]:>11.2f}  {medians[name][1]:>12.0f}"
            if options.rounds > 1:  # how far the median can be trusted against a target
                walls = [w for w, _ in figures[(label, "this")]]
                row += f"  {f'{min(walls):.2f}-{max(walls):.2f}':>14}"
            if options.baseline:
                row += (f"  {medians['baseline'][0] / medians['this'][0]:>7.1f}"
                        f"  {medians['baseline'][1] / medians['this'][1]:>8.1f}")
            if not options.no_bare:
                bare = [w for w, _ in figures.get((label, "bare"), [])]
                if bare:
                    median = statistics.median(bare)
                    row += f"  {median:>7.2f}  {median / medians['this'][0]:>6.2f}"
                else:
                    row += f"  {'':>7}  {'':>6}"
            if size >= 50000 and target(label):
                row += f"  {target(label)}"
            print(row, flush=True)
    if options.baseline:
        print("time x / memory x: the baseline's figure over this code's (above 1: this code is faster / "
              "smaller)")
    if not options.no_bare:
        print("bare s: a script that only decodes every line and counts (bare_reading.py), one process; "
              "bare x: its time over this code's (above 1: qmkar is faster)")


def same_outputs(work: Path, codes: dict[str, Path]) -> None:
    """Whether both codes print the same report, comparison and runs (JSON), and show the same
    questions, of the 10k transcripts."""
    a, b, c = grow(work, "a", 10000), grow(work, "b", 10000), grow(work, "c", 10000)
    for label, args in {"report --format json": ["report", "--format", "json", a, b],
                        "report --format json of a folder": ["report", "--format", "json",
                                                             folder(work, "a", 10000)],
                        "compare --format json": ["compare", "--format", "json", a, b],
                        "compare --format json of the replays": ["compare", "--format", "json", b, c],
                        "runs --format json": ["runs", "--format", "json", a, b],
                        "show --wrong": ["show", "--wrong", b]}.items():
        printed = {name: run(src, *args, cwd=work)[2] for name, src in codes.items()}
        same = len(set(printed.values())) == 1
        print(f"same output of {label} on 10k records: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()

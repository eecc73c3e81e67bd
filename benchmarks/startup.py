"""What every command pays before its first step: qmkar's start-up, as whole processes.

Times `qmkar --help`, `qmkar eval --help`, `qmkar report` of a small transcript (20 answers of
the oracle, written before timing), `qmkar eval -m gpt-4o` with OPENAI_API_KEY empty (to its
error, which names the variable) and the start of each worker process a command may start
(`python -m qmkar.worker qmkar.ahead`, `qmkar.readers`, `qmkar.rescore`, given no job: its
imports and its greeting, before it could read a line). Each process runs `python -m ...` with
PYTHONPATH set to the code measured, bytecode written (a first, untimed run of each writes
it); its CPU is its user and system time (wait4). With --baseline SRC (another checkout's src
folder, for example a git worktree of the commit before a change) the same commands run on
that code too, the two sides taking turns within each round, and the ratios are printed:
baseline / this, above 1 when this code starts faster.

    python benchmarks/startup.py [--rounds 10] [--baseline /tmp/base/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from checkout import src_folder
from hosted_throughput import measure

HERE = Path(__file__).resolve().parent.parent / "src"
WORKERS = ("qmkar.ahead", "qmkar.readers", "qmkar.rescore")


class Command(NamedTuple):
    arguments: list[str]  # after `python`
    env: dict[str, str] = {}
    ok: tuple[int, ...] = (0,)  # the exit codes it is expected to end with


def commands(transcript: Path) -> dict[str, Command]:
    """Each timed command."""
    found = {"qmkar --help": Command(["-m", "qmkar", "--help"]),
             "qmkar eval --help": Command(["-m", "qmkar", "eval", "--help"]),
             "qmkar report (20 answers)": Command(["-m", "qmkar", "report", str(transcript)]),
             "qmkar eval, no key (error)": Command(
                 ["-m", "qmkar", "eval", "-m", "gpt-4o", "-n", "2", "-o",
                  str(transcript.with_name("no-key.jsonl"))], {"OPENAI_API_KEY": ""}, (1,))}
    for module in WORKERS:
        found[f"worker {module}"] = Command(["-m", "qmkar.worker", module])
    return found


def timed(src: str, command: Command) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of `python ARGUMENTS` on the code in `src`."""
    figures = measure([sys.executable, *command.arguments],
                      env={"PYTHONPATH": src, "COLUMNS": "120", **command.env}, ok=command.ok)
    return figures.wall, figures.cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds; medians are printed")
    parser.add_argument("--baseline", type=src_folder, help="the src folder of the code to compare against")
    args = parser.parse_args()
    sides = {"this": str(HERE), **({"baseline": args.baseline} if args.baseline else {})}
    with tempfile.TemporaryDirectory() as folder:
        transcript = Path(folder) / "t.jsonl"
        subprocess.run([sys.executable, "-m", "qmkar", "eval", "-m", "oracle", "-n", "20", "-o",
                        str(transcript)], env={**os.environ, "PYTHONPATH": str(HERE)}, check=True,
                       capture_output=True)
        timings = {(name, side): [] for name in commands(transcript) for side in sides}
        for command in commands(transcript).values():  # bytecode written, caches warm
            for src in sides.values():
                timed(src, command)
        for round_ in range(args.rounds):
            for name, command in commands(transcript).items():
                order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
                for side in order:
                    timings[name, side].append(timed(sides[side], command))
    print(f"start-up, whole processes, median of {args.rounds} interleaved rounds "
          f"(machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f})")
    header = f"{'command':30} {'this wall s':>12} {'this CPU s':>11}"
    if args.baseline:
        header += f" {'base wall s':>12} {'base CPU s':>11} {'wall x':>7} {'CPU x':>6}"
    print(header)
    for name in commands(transcript):
        this = [statistics.median(column) for column in zip(*timings[name, "this"], strict=True)]
        line = f"{name:30} {this[0]:12.3f} {this[1]:11.3f}"
        if args.baseline:
            base = [statistics.median(column) for column in zip(*timings[name, "baseline"], strict=True)]
            line += f" {base[0]:12.3f} {base[1]:11.3f} {base[0] / this[0]:7.2f} {base[1] / this[1]:6.2f}"
        print(line)


if __name__ == "__main__":
    main()

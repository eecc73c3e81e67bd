"""CPU work counted in instructions, which a busy or throttled machine does not change: the
figure to judge a change of a few percent by where timings vary by 30% from round to round.

Each side runs as a whole process under valgrind (cachegrind, no cache simulation, every
child process counted too: qmkar's question worker) against one loopback server
(loopback_server.py), at two sizes, --small and --large questions. The difference between
the two sizes, divided by the questions between them, is a side's work per question; what
is left at the small size is its start-up (imports, the command line, the worker's start).
The sides are qmkar eval (and --baseline's qmkar eval, from another checkout's src) and the
bare AsyncOpenAI loop of hosted_throughput.py, over the same prompts. The worker's counts
repeat exactly (generating questions is deterministic); a process talking to the server
varies by about 2% from run to run (how many answers each turn of its event loop finds
ready), which a wide gap between the two sizes spreads thin (two runs at 300 and 600
questions gave per-question figures 0.26M and 0.34M instructions apart). valgrind makes
each process tens of times slower, so this takes ten minutes or more. Instructions are not
time (a cache miss costs many of them): this compares work; hosted_throughput.py measures
what a user waits for.

With --echo the server answers each request with its prompt (loopback_server.py --echo), so
each side also reads an 8.5 KB answer at 500 pairs, and qmkar parses and scores it.

    python benchmarks/instructions.py [--small 300] [--large 900] [--pairs 500]
        [--concurrency 64] [--echo] [--baseline OTHER_CHECKOUT/src]

Needs valgrind (Debian: apt-get install valgrind). Run it on an otherwise idle machine: with
the test suite running beside it, the bare loop's requests under valgrind ran past the SDK's
5 s connect timeout.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from checkout import src_folder
from hosted_throughput import KEY_ENV, qmkar_command, start_server, write_prompts

from qmkar.ahead import AHEAD_MIN

HERE = Path(__file__).resolve().parent
COUNT = re.compile(r"^==\d+== Command: (.*)\n(?:.*\n)*?==\d+== I\s+refs:\s+([\d,]+)", re.MULTILINE)


def counted(command: list[str], logs: Path, env: dict[str, str] | None = None) -> dict[str, int]:
    """Instructions each Python process of `command` ran, by its role: the command itself and
    its workers (python -m qmkar.worker ...). Other children (ldconfig, uname) are left out."""
    for old in logs.glob("*.log"):
        old.unlink()
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    python = os.path.realpath(sys.executable)  # valgrind must run the interpreter, not a shim
    wrapped = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               "--trace-children=yes", f"--log-file={logs}/%p.log", python, *command[1:]]
    done = subprocess.run(wrapped, env={**environment, KEY_ENV: "bench", **(env or {})},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{command[:4]} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    found: dict[str, int] = {}
    for log in logs.glob("*.log"):
        for match in COUNT.finditer(log.read_text(errors="replace")):
            ran, count = match[1], int(match[2].replace(",", ""))
            if "python" not in ran.split()[0]:
                continue
            role = "worker" if "qmkar.worker" in ran else "process"
            found[role] = found.get(role, 0) + count
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--large", type=int, default=900)
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds the server takes per answer")
    parser.add_argument("--echo", action="store_true", help="the server answers with each prompt")
    parser.add_argument("--baseline", type=src_folder,
                        help="another checkout's src folder: its qmkar eval too")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    if not AHEAD_MIN <= args.small < args.large:
        # Below AHEAD_MIN questions the run makes them itself: one size would count the
        # worker's start-up and the other not.
        raise SystemExit(f"--small must be at least {AHEAD_MIN} (from there the questions are made "
                         "by a worker at both sizes) and below --large")
    server, base_url = start_server(args.delay, echo=args.echo)
    try:
        with tempfile.TemporaryDirectory() as work:
            folder = Path(work)
            logs = folder / "logs"
            logs.mkdir()
            sides = {"qmkar eval": None, "bare AsyncOpenAI loop": None}
            if args.baseline:
                sides["qmkar eval (baseline)"] = args.baseline
            counts: dict[str, dict[int, dict[str, int]]] = {name: {} for name in sides}
            for size in (args.small, args.large):
                prompts = folder / f"prompts{size}.jsonl"
                write_prompts(prompts, size, args.pairs, 0)
                for name, source in sides.items():
                    if name.startswith("qmkar"):
                        command = qmkar_command(base_url, size, args.pairs, args.concurrency,
                                                folder / f"{len(name)}-{size}.jsonl")
                        env = {"PYTHONPATH": source} if source else None
                    else:
                        command = [sys.executable, str(HERE / "hosted_throughput.py"), "bare", str(prompts),
                                   base_url, str(args.concurrency), "gpt-4o"]
                        env = None
                    counts[name][size] = counted(command, logs, env)
                    print(f"{name}, {size} questions: " + ", ".join(
                        f"{role} {count / 1e9:.3f}G" for role, count in sorted(counts[name][size].items())),
                        flush=True)
    finally:
        server.terminate()
    between = args.large - args.small
    print(f"\nInstructions (millions), {args.pairs} pairs, concurrency {args.concurrency}"
          f"{', the server echoing each prompt' if args.echo else ''}, whole processes under valgrind; "
          "per question = (large - small) / questions between")
    print(f"{'':24} {'per question':>13} {'of it, worker':>14} {'start-up':>9}")
    per: dict[str, float] = {}
    for name, by_size in counts.items():
        small, large = sum(by_size[args.small].values()), sum(by_size[args.large].values())
        per[name] = (large - small) / between / 1e6
        worker = (by_size[args.large].get("worker", 0) - by_size[args.small].get("worker", 0)) / between / 1e6
        start = (small / 1e6) - per[name] * args.small
        print(f"{name:24} {per[name]:13.2f} {worker:14.2f} {start:9.0f}")
    bare = per["bare AsyncOpenAI loop"]
    print(f"qmkar's work per question beyond the bare loop's: {per['qmkar eval'] - bare:.2f}M instructions "
          f"({per['qmkar eval'] / bare:.2f} of the bare loop's)")
    if args.baseline:
        print(f"qmkar / baseline qmkar, per question: {per['qmkar eval'] / per['qmkar eval (baseline)']:.3f}")


if __name__ == "__main__":
    main()

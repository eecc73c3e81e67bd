"""What a batch run costs the machine it runs on, next to asking one request at a time.

Runs `qmkar eval` as a subprocess against the batch server of the tests
(tests/support/batchserver.py, in its own process so its CPU is not counted), once with
--batch and once without, in interleaved rounds, and prints per mode the median wall
time, the client's CPU seconds per 1,000 questions and its peak memory. Usage:

    python benchmarks/batch_client.py [--questions 2000] [--pairs 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(mode: str, port: int, args: argparse.Namespace, folder: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one run in a fresh interpreter."""
    out = folder / f"{mode}-{time.monotonic_ns()}.jsonl"
    command = [sys.executable, "-c", "import resource, sys; from qmkar.cli import main\n"
               "try:\n    main()\nfinally:\n    u = resource.getrusage(resource.RUSAGE_SELF)\n"
               "    print(u.ru_utime + u.ru_stime, u.ru_maxrss, file=sys.stderr)",
               "eval", "-m", "openai:gpt-4o", "-n", str(args.questions), "--pairs", str(args.pairs),
               "-o", str(out), "--base-url", f"http://127.0.0.1:{port}/v1", "--api-key-env", "FAKE_API_KEY",
               "--no-cache"]
    command += ["--batch", "--batch-poll", "0.2"] if mode == "batch" else ["--concurrency", "32"]
    env = {**os.environ, "FAKE_API_KEY": "sk-bench", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    os.sync()  # the last run's transcript goes to disk before this one is timed
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{done.stderr[-2000:]}")
    cpu, rss_kb = done.stderr.strip().splitlines()[-1].split()
    return wall, float(cpu), int(rss_kb) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    server = subprocess.Popen([sys.executable, "-m", "tests.support.batchserver"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        figures: dict[str, list[tuple[float, float, float]]] = {"batch": [], "one-by-one": []}
        with tempfile.TemporaryDirectory() as folder:
            for _ in range(args.rounds):
                for mode in figures:
                    figures[mode].append(one(mode, port, args, Path(folder)))
        print(f"{args.questions} questions of {args.pairs} pairs, {args.rounds} interleaved rounds, medians:")
        for mode, runs in figures.items():
            wall, cpu, rss = (statistics.median(r[i] for r in runs) for i in range(3))
            print(f"  {mode:>10}: {wall:6.1f} s wall, {1000 * cpu / args.questions:6.2f} CPU s per 1,000 "
                  f"questions, peak {rss:5.0f} MB")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()

"""Time in Python's garbage collector during a whole `qmkar eval`, this code and another side by side.

Each side is one `qmkar eval` process of --questions questions (--pairs pairs) against one
loopback server (loopback_server.py, answering after --delay seconds), in interleaved rounds.
The process is qmkar's own command started through a few lines that register a `gc.callbacks`
hook first: it counts the collections of each generation and the time spent in them, and
at exit writes them with the process's own CPU time (its threads, not its question worker)
to a file. Medians are printed, per question, and the run's wall time and whole CPU (worker
included) beside them, as hosted_throughput.py measures them.

    python benchmarks/collector.py [--questions 2000] [--pairs 500] [--concurrency 64]
        [--rounds 5] [--delay 0.05] [--baseline OTHER_CHECKOUT/src]

The time in the collector is wall time inside the collections, which run on the main thread
with nothing else to wait for. How many collections there are does not depend on the
machine; how long they take does, like any timing, hence medians of interleaved rounds. A
change to the collector's share of a run shows here when the whole process's figures vary
by more than it; hosted_throughput.py is still what a user waits for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from checkout import src_folder
from hosted_throughput import measure, qmkar_command, start_server

HOOK = """
import atexit, gc, json, resource, sys, time
counts, seconds, started = [0, 0, 0], [0.0, 0.0, 0.0], [0.0]
path = sys.argv[1]
def watch(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        counts[info["generation"]] += 1
        seconds[info["generation"]] += time.perf_counter() - started[0]
gc.callbacks.append(watch)
def write():
    own = resource.getrusage(resource.RUSAGE_SELF)
    with open(path, "w") as handle:
        json.dump({"counts": counts, "seconds": seconds, "cpu": own.ru_utime + own.ru_stime}, handle)
atexit.register(write)
import runpy
sys.argv = ["qmkar", *sys.argv[2:]]
runpy.run_module("qmkar", run_name="__main__", alter_sys=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds the server takes per answer")
    parser.add_argument("--baseline", metavar="SRC", type=src_folder,
                        help="also run the qmkar whose src/ folder this is")
    args = parser.parse_args()
    n = args.questions
    sides = {"this": None, **({"baseline": args.baseline} if args.baseline else {})}
    server, base_url = start_server(args.delay)
    figures: dict[str, list[dict]] = {name: [] for name in sides}
    try:
        with tempfile.TemporaryDirectory() as folder:
            work = Path(folder)
            for round_ in range(args.rounds):
                names = list(sides)
                shown = []
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    out, stats = work / f"{name}-{round_}.jsonl", work / f"{name}-{round_}.json"
                    command = qmkar_command(base_url, n, args.pairs, args.concurrency, out)
                    whole = measure([sys.executable, "-c", HOOK, str(stats), *command[3:]],
                                    {"PYTHONPATH": sides[name]} if sides[name] else None)
                    seen = json.loads(stats.read_text())
                    seen.update(wall=whole.wall, whole_cpu=whole.cpu)
                    figures[name].append(seen)
                    shown.append(f"{name} {sum(seen['seconds']):.3f} s in {sum(seen['counts'])} collections")
                print(f"round {round_ + 1}: " + ", ".join(shown), flush=True)
    finally:
        server.terminate()
    print(f"\n{n} questions of {args.pairs} pairs, concurrency {args.concurrency}, loopback server delay "
          f"{args.delay * 1000:.0f} ms, median of {args.rounds} rounds")
    print(f"{'':10} {'collections (gen 0/1/2)':>24} {'collector s':>12} {'ms/q':>6} "
          f"{'run CPU s':>10} {'ms/q':>6} {'whole CPU s':>12} {'wall s':>7}")
    for name, runs in figures.items():
        counts = "/".join(str(round(statistics.median(r["counts"][g] for r in runs))) for g in range(3))
        collector = statistics.median(sum(r["seconds"]) for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        whole = statistics.median(r["whole_cpu"] for r in runs)
        wall = statistics.median(r["wall"] for r in runs)
        print(f"{name:10} {counts:>24} {collector:12.3f} {collector / n * 1000:6.3f} "
              f"{cpu:10.2f} {cpu / n * 1000:6.2f} {whole:12.2f} {wall:7.2f}")


if __name__ == "__main__":
    main()

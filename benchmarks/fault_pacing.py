"""How much a server's faults slow a run: `qmkar eval` of --questions questions at
--concurrency against a loopback server answering a share --faults of requests with a
retryable error (429 with Retry-After 0, 529, 500, 503 in turn), next to the same command
against a fault-free one. Both servers (benchmarks/loopback_server.py) run in processes of
their own; rounds alternate; the median wall times and their ratio are printed.

    python benchmarks/fault_pacing.py [--questions 1000] [--concurrency 64] [--faults 0.3]
        [--pairs 50] [--delay 0.05] [--rounds 3]

The qmkar measured is the one Python imports (PYTHONPATH=.../src to pick a checkout).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from hosted_throughput import measure, qmkar_command, start_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--faults", type=float, default=0.3)
    parser.add_argument("--pairs", type=int, default=50)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    clean, clean_url = start_server(args.delay)
    faulty, faulty_url = start_server(args.delay, args.faults)
    walls: dict[str, list[float]] = {"fault-free": [], f"{args.faults:.0%} faults": []}
    attempts: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            for round_ in range(args.rounds):
                order = [("fault-free", clean_url), (f"{args.faults:.0%} faults", faulty_url)]
                for label, url in order if round_ % 2 == 0 else order[::-1]:
                    out = folder / f"{label[:5]}-{round_}.jsonl"
                    figures = measure(qmkar_command(url, args.questions, args.pairs, args.concurrency, out))
                    walls[label].append(figures.wall)
                    if url == faulty_url:
                        answers = [json.loads(line) for line in out.open() if '"kind":"answer"' in line]
                        assert len(answers) == args.questions, len(answers)
                        attempts.append(sum(len(a["attempts"]) for a in answers) / len(answers))
                print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in walls.items()),
                      flush=True)
    finally:
        for server in (clean, faulty):
            server.terminate()
            server.wait()
    clean_wall, faulty_wall = (statistics.median(v) for v in walls.values())
    print(f"\n{args.questions} questions of {args.pairs} pairs at concurrency {args.concurrency}, "
          f"server delay {args.delay * 1000:.0f} ms, whole `qmkar eval` processes, median of {args.rounds}")
    print(f"fault-free: {clean_wall:.1f} s; {args.faults:.0%} faults: {faulty_wall:.1f} s "
          f"({statistics.median(attempts):.2f} attempts per question); ratio {faulty_wall / clean_wall:.1f}")


if __name__ == "__main__":
    main()

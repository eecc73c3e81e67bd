"""How fast the simulated memories answer, now and at an earlier commit, measured side by side.

    python benchmarks/sim_speed.py [--before 89bff7a] [--pairs 500,1000,2000,4000,8000]
        [--questions 128] [--concurrency 64] [--before-concurrency 8] [--rounds 3]
        [--eval-n 200] [--skip-eval] [--busy N]

The earlier commit (by default 89bff7a, the sim before it answered in batches) is checked
out into a temporary git worktree; both versions run in their own processes with
PYTHONPATH pointing at their src/, in interleaved rounds (before, after, before, ...);
every figure is the median of the rounds. The per-question figures (1, 2) are taken with
one BLAS thread, so that CPU time is the memory's own work; the whole `qmkar eval` (3) runs
with the BLAS threads this shell gives it, as a user's run does (numpy's default: one a
core). Prints:

1. Per memory, milliseconds per question at the first --pairs (qmkar, d=256), before and
   after, and their ratio. A question is what the provider does with it: read the prompt,
   write the pairs, read the memory, decode every candidate value. Questions are asked
   as the runner asks them by default: --concurrency at a time (64, what qmkar asks a
   simulated memory at once unless told otherwise), --before-concurrency for the earlier
   commit (8, its default for every model), through the provider's async generate (so
   the new sim answers each group as one batch); the codebooks are built
   before timing starts (once per run; the "first" column is that first group). Times are
   CPU time of the process, which other processes on the machine disturb less than wall time.
2. Milliseconds per question against the number of pairs, before and after.
3. A whole `qmkar eval -m sim:softmax -m sim:linear -m sim:delta -n N` process (500
   pairs), before and after: wall seconds, CPU seconds, peak memory.
With --busy N, N CPU-bound processes run beside every round, as on a machine doing other
work (another run, say). Also the time to parse and score one of sim:linear's answers
(score.py classes every false positive), and the peak memory of the worker processes of 1
and 2 (the old delta rules held an n x n matrix).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MEMORIES = ("softmax", "linear", "gla", "delta", "gated-delta", "window", "hybrid")
# Fewer questions where the old delta rule takes a second each.
LARGE_PAIRS, LARGE_QUESTIONS = 4000, 8


def worker(pairs_list: list[int], questions: int, concurrency: int) -> None:
    """In a child process: time every memory at every size; print one JSON line."""
    # Only entry points both versions have: resolve, render, generate, grade.
    from qmkar.providers.base import ModelRequest
    from qmkar.providers.registry import resolve
    from qmkar.render import default_template, render
    from qmkar.tasks import family, generate, make_spec

    template = default_template("qmkar")
    figures: dict[str, dict[str, Any]] = {}
    for pairs in pairs_list:
        n = questions if pairs < LARGE_PAIRS else min(questions, LARGE_QUESTIONS)
        items = list(generate(make_spec("qmkar", pairs=pairs), concurrency + n, 0))
        requests = [ModelRequest(messages=render(item, template)) for item in items]

        async def ask(provider: Any, start: int, stop: int) -> list[str]:
            texts = []
            for group in range(start, stop, concurrency):
                asked = range(group, min(group + concurrency, stop))
                answers = await asyncio.gather(*(provider.generate(items[i], requests[i]) for i in asked))  # noqa: B023
                texts += [answer.text for answer in answers]
            return texts

        for memory in MEMORIES:
            provider = resolve(f"sim:{memory}")
            first = None
            if pairs == pairs_list[0]:  # the first group builds the codebooks (the sizes share them)
                clock = time.process_time()
                asyncio.run(ask(provider, 0, concurrency))
                first = (time.process_time() - clock) * 1000 / concurrency
            clock = time.process_time()
            texts = asyncio.run(ask(provider, concurrency, concurrency + n))
            per_question = (time.process_time() - clock) * 1000 / n
            clock = time.process_time()
            for item, text in zip(items[concurrency:], texts, strict=True):
                family("qmkar").grade(item, text)  # parse and score, as the runner does
            grading = (time.process_time() - clock) * 1000 / n
            figures.setdefault(memory, {})[str(pairs)] = {"first": first, "ms": per_question,
                                                          "grade": grading}
    print(json.dumps(figures))


def child_env(src: Path, one_blas_thread: bool) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    if one_blas_thread:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
    return env


def run_worker(src: Path, args: argparse.Namespace, concurrency: int) -> dict[str, Any]:
    """One worker process: its figures, and its peak resident memory under "rss_mb"."""
    command = [sys.executable, __file__, "--worker", "--pairs", args.pairs,
               "--questions", str(args.questions), "--concurrency", str(concurrency)]
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, env=child_env(src, one_blas_thread=True), stdout=out)
        _, status, usage = os.wait4(process.pid, 0)
        if status != 0:
            raise SystemExit(f"the benchmark worker with {src} failed")
        out.seek(0)
        figures: dict[str, Any] = json.loads(out.read().strip().splitlines()[-1])
    figures["rss_mb"] = usage.ru_maxrss / 1024
    return figures


def run_eval(src: Path, n: int, folder: Path) -> dict[str, float]:
    """One whole `qmkar eval` process, in this shell's environment (as a user runs it): wall
    and CPU seconds, peak resident memory."""
    out = folder / f"eval-{time.monotonic_ns()}.jsonl"
    command = [sys.executable, "-m", "qmkar", "eval", "-m", "sim:softmax", "-m", "sim:linear",
               "-m", "sim:delta", "-n", str(n), "-o", str(out)]
    os.sync()  # the last run's transcript goes to disk before this one is timed
    clock = time.perf_counter()
    process = subprocess.Popen(command, env=child_env(src, one_blas_thread=False), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - clock
    if status != 0:
        raise SystemExit(f"qmkar eval with {src} failed: {process.stderr.read() if process.stderr else ''}")
    out.unlink()
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="89bff7a", help="git revision to compare with")
    parser.add_argument("--pairs", default="500,1000,2000,4000,8000")
    parser.add_argument("--questions", type=int, default=128, help="timed questions per memory and size")
    parser.add_argument("--concurrency", type=int, default=64,
                        help="questions in flight (what qmkar asks a simulated memory by default)")
    parser.add_argument("--before-concurrency", type=int, default=8,
                        help="questions in flight for the earlier commit (its default)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--eval-n", type=int, default=200)
    parser.add_argument("--skip-eval", action="store_true")
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes to run beside every round")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    pairs_list = [int(p) for p in args.pairs.split(",")]
    if args.worker:
        worker(pairs_list, args.questions, args.concurrency)
        return

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # still remove the worktree
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        old = folder / "before"
        git = ["git", "-C", str(ROOT), "worktree"]
        added = subprocess.run([*git, "add", "--detach", "--quiet", str(old), args.before],
                               capture_output=True, text=True)
        if added.returncode:
            raise SystemExit(f"--before {args.before}: git cannot check it out: {added.stderr.strip()}")
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        try:
            versions = {"before": old / "src", "after": ROOT / "src"}
            rounds: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            evals: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
            for number in range(args.rounds):
                for name, src in versions.items():
                    print(f"round {number + 1}/{args.rounds}: {name}", file=sys.stderr)
                    in_flight = args.before_concurrency if name == "before" else args.concurrency
                    rounds[name].append(run_worker(src, args, in_flight))
                    if not args.skip_eval:
                        evals[name].append(run_eval(src, args.eval_n, folder))
        finally:
            for process in busy:
                process.kill()
                process.wait()
            subprocess.run([*git, "remove", "--force", str(old)], check=True)

    def ms(name: str, memory: str, pairs: int, key: str = "ms") -> float:
        return median([r[memory][str(pairs)][key] for r in rounds[name]])

    first = pairs_list[0]
    print(f"Simulated memories, qmkar at {first} pairs, d=256, one BLAS thread, questions in flight "
          f"{args.before_concurrency} before, {args.concurrency} after; before = {args.before}; "
          f"median of {args.rounds} interleaved rounds")
    print(f"{'memory':<12} {'before ms/q':>12} {'after ms/q':>11} {'faster':>7} "
          f"{'first before':>13} {'first after':>12}")
    for memory in MEMORIES:
        before, after = ms("before", memory, first), ms("after", memory, first)
        print(f"{memory:<12} {before:>12.2f} {after:>11.2f} {before / after:>6.1f}x "
              f"{ms('before', memory, first, 'first'):>13.1f} {ms('after', memory, first, 'first'):>12.1f}")
    print()
    print("ms per question by pairs (before -> after)")
    print(f"{'memory':<12} " + " ".join(f"{p:>17}" for p in pairs_list))
    for memory in MEMORIES:
        cells = [f"{ms('before', memory, p):.1f} -> {ms('after', memory, p):.1f}" for p in pairs_list]
        print(f"{memory:<12} " + " ".join(f"{c:>17}" for c in cells))
    print()
    print("ms to parse and score one answer of sim:linear (many false positives), by pairs")
    print(f"{'':<12} " + " ".join(f"{p:>17}" for p in pairs_list))
    cells = [f"{ms('before', 'linear', p, 'grade'):.2f} -> {ms('after', 'linear', p, 'grade'):.2f}"
             for p in pairs_list]
    print(f"{'linear':<12} " + " ".join(f"{c:>17}" for c in cells))
    print()
    print(f"peak memory of a worker process (every memory at every size up to {pairs_list[-1]} pairs): "
          + ", ".join(f"{name} {median([r['rss_mb'] for r in rounds[name]]):.0f} MB" for name in rounds))
    if not args.skip_eval:
        print()
        threads = os.environ.get("OPENBLAS_NUM_THREADS", "numpy's default")
        print("whole process: qmkar eval -m sim:softmax -m sim:linear -m sim:delta "
              f"-n {args.eval_n} (500 pairs; BLAS threads: {threads}; "
              f"{args.busy} CPU-bound processes beside it)")
        print(f"{'':<7} {'wall s':>7} {'cpu s':>7} {'peak MB':>8}")
        for name in ("before", "after"):
            row = {key: median([e[key] for e in evals[name]]) for key in ("wall", "cpu", "rss_mb")}
            print(f"{name:<7} {row['wall']:>7.2f} {row['cpu']:>7.2f} {row['rss_mb']:>8.0f}")
        wall = median([e["wall"] for e in evals["before"]]) / median([e["wall"] for e in evals["after"]])
        print(f"after is {wall:.2f}x as fast (wall)")


if __name__ == "__main__":
    main()

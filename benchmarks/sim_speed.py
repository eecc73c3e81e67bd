"""How long one simulated model takes to answer one question, per memory, on one core.

    python benchmarks/sim_speed.py [--pairs 500] [--d 256] [--repeat 30]

For each memory: the first question (which builds the cached codebooks) and the median
of the following ones, for the whole path a question takes inside the provider:
reading the prompt, writing the pairs, reading the memory, decoding every candidate.
The target (issue 4) is at most 20 ms per question at 500 pairs and d=256.
"""

from __future__ import annotations

import os

# One core: pin the BLAS thread pools before numpy is imported.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from qmkar.providers.sim import SimModel, parse_name, read_prompt  # noqa: E402
from qmkar.providers.sim_memory import MEMORIES  # noqa: E402
from qmkar.render import default_template, render  # noqa: E402
from qmkar.tasks import generate, make_spec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--task", default="qmkar", choices=["qmkar", "mqar"])
    args = parser.parse_args()

    items = list(generate(make_spec(args.task, pairs=args.pairs), args.repeat + 1, 0))
    template = default_template(args.task)
    texts = [render(item, template)[0]["content"] for item in items]
    print(f"{args.task}, {args.pairs} pairs, d={args.d}, one BLAS thread; "
          f"median of {args.repeat} questions after the first")
    print(f"{'memory':<12} {'first (ms)':>11} {'median (ms)':>12} {'max (ms)':>9}")
    for memory in MEMORIES:
        model = SimModel(parse_name(f"{memory}?d={args.d}"))
        times = []
        for text in texts:
            start = time.perf_counter()
            model.answer(args.task, read_prompt(args.task, text))
            times.append((time.perf_counter() - start) * 1000)
        rest = times[1:]
        print(f"{memory:<12} {times[0]:>11.1f} {statistics.median(rest):>12.1f} {max(rest):>9.1f}")


if __name__ == "__main__":
    main()

"""What a user waits for: a whole `qmkar eval` process next to a bare AsyncOpenAI loop (and
inspect_ai, when installed), each a process of its own, against ONE loopback server.

The server (benchmarks/loopback_server.py) runs in its own process and answers after
--delay seconds. Before timing, the questions `qmkar eval` will ask are rendered once into
a prompts file; the bare loop process reads that file and sends each prompt through
openai.AsyncOpenAI with a semaphore of --concurrency (the floor: the SDK alone), and the
inspect_ai process asks the same prompts with `generate()` and max_connections of the
same size. qmkar generates, renders, sends, parses, scores and writes its transcript like
any user's run. Rounds are interleaved (the order turns each round, inspect_ai last in
each: round_order) so that drift on a shared machine hits every side, each process timed
only once the last one's writes are on disk; medians, ratios, CPU
and peak RSS are printed, and each round's own ratios and CPU difference, whose spread says
how far one run's medians can be trusted against a target. A side's CPU is its process's
and its children's (wait4): qmkar's question worker (ahead.py) counts.

Then memory: the peak RSS of a `qmkar eval` of --memory-questions questions against the
same server, and `qmkar eval --model oracle` at each of --oracle sizes (time and peak RSS).

    python benchmarks/hosted_throughput.py [--questions 2000] [--pairs 500] [--concurrency 64]
        [--rounds 3] [--delay 0.05] [--echo] [--no-inspect] [--memory-questions 10000]
        [--oracle 1000,10000,50000] [--baseline OTHER_CHECKOUT/src] [--from-file]
        [--base-url http://HOST:PORT/v1 --model NAME] [--max-cost USD]

With --base-url every side asks that server instead (one nobody here wrote: a mock, vLLM,
llama.cpp), by the model name --model; --delay then does not apply. It is asked one question
first, and the script stops there, saying why, when it does not answer. With --echo the
loopback server answers each request with its prompt, as mock servers such as ai-mock do: every
answer is 8.5 KB of keys and values at 500 pairs, which qmkar parses and scores (about 490 false
positives each) where the bare loop reads nothing. With --max-cost USD every
qmkar run (this one and the baseline) runs under that ceiling, --model priced at $2.50 and
$10 a million tokens (gpt-4o's), so each prompt is counted with the model's tokenizer:
set it high enough that no run stops.

With --from-file another side, `qmkar eval --dataset`, asks the same questions read from a
dataset file that `qmkar generate` wrote before timing, as the bare loop reads its prompts: qmkar's
send path without the making of its questions.

The qmkar measured is the one Python imports (PYTHONPATH=.../src to pick a checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path
from typing import NamedTuple

from checkout import src_folder

HERE = Path(__file__).resolve().parent
SERVER = HERE / "loopback_server.py"
KEY_ENV = "BENCH_KEY"
FROM_FILE = "qmkar eval --dataset"  # the side --from-file adds


class Figures(NamedTuple):
    wall: float  # seconds
    cpu: float  # user + system seconds of the process
    rss: float  # peak resident MB


def start_server(delay: float, faults: float = 0.0, echo: bool = False) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, str(SERVER), "--delay", str(delay), "--faults", str(faults),
                                *(["--echo"] if echo else [])], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    return process, f"http://127.0.0.1:{port}/v1"


def measure(command: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> Figures:
    """Run a child process to its end: wall time, its CPU and its peak RSS."""
    # Bytecode is written and reused as an installed package's is (this machine's environment
    # may say PYTHONDONTWRITEBYTECODE, which would make every process compile its source).
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # The last process's writes go to disk before this one is timed: a qmkar eval writes its
    # transcript (36 MB against an echo), and with the sides' order turning, its write-back fell
    # in the turn of the same next side every time (docs/performance.md, twenty-first pass).
    os.sync()
    started = time.perf_counter()
    child = subprocess.Popen(command, env={**environment, KEY_ENV: "bench", **(env or {})},
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    assert child.stderr is not None
    trailer = child.stderr.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise SystemExit(f"{command[:4]} exited {code}: {trailer[-2000:]}")
    return Figures(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def write_prompts(path: Path, n: int, pairs: int, seed: int) -> None:
    """The messages `qmkar eval -n n --pairs pairs --seed seed` sends, one JSON line each."""
    from qmkar.render import default_template, render
    from qmkar.tasks import generate, make_spec

    template = default_template("qmkar")
    with path.open("w") as handle:
        for item in generate(make_spec("qmkar", pairs=pairs), n, seed):
            handle.write(json.dumps(render(item, template)) + "\n")


def qmkar_command(base_url: str, n: int, pairs: int, concurrency: int, output: Path,
                  model: str = "gpt-4o", ceiling: list[str] | None = None,
                  dataset: Path | None = None) -> list[str]:
    """`qmkar eval` of n generated questions of `pairs`, or (`dataset`) of a dataset file's."""
    questions = ["--dataset", str(dataset)] if dataset else ["-n", str(n), "--pairs", str(pairs)]
    return [sys.executable, "-m", "qmkar", "eval", "-m", f"openai:{model}", *questions,
            "--concurrency", str(concurrency), "--base-url", base_url,
            "--api-key-env", KEY_ENV, "--no-cache", "-o", str(output), *(ceiling or [])]


def check_server(base_url: str, model: str) -> None:
    """One question to a given server before anything is timed: a server that is not there, or
    does not serve --model, is said at once, not after the warm-up's retries (a minute)."""
    import openai

    client = openai.OpenAI(api_key="bench", base_url=base_url, max_retries=0, timeout=60)
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "k: 1, v: 2. k?"}],
                                       max_tokens=8)
    except openai.OpenAIError as exc:
        raise SystemExit(f"--base-url {base_url} did not answer a chat completion for --model {model}: "
                         f"{type(exc).__name__}: {exc}") from None
    finally:
        client.close()


def ceiling_options(args: argparse.Namespace, folder: Path) -> list[str]:
    """--max-cost and a prices file pricing --model, when --max-cost is given."""
    if args.max_cost is None:
        return []
    prices = folder / "prices.toml"
    prices.write_text(f'[prices."{args.model}"]\ninput = 2.5\noutput = 10\n')
    return ["--max-cost", str(args.max_cost), "--prices", str(prices)]


# ---- the child processes' own work --------------------------------------------------------

async def bare_loop(prompts: Path, base_url: str, concurrency: int, model: str) -> None:
    """The floor: the SDK alone, a semaphore, the prompts; each answer's text read and dropped."""
    import openai

    client = openai.AsyncOpenAI(api_key=os.environ[KEY_ENV], base_url=base_url, max_retries=0)
    slots = asyncio.Semaphore(concurrency)
    answers = []

    async def one(messages: list[dict[str, str]]) -> None:
        try:
            completion = await client.chat.completions.create(
                model=model, messages=messages, temperature=0, max_tokens=1024, seed=0)  # type: ignore[arg-type]
            answers.append(completion.choices[0].message.content)
        finally:
            slots.release()

    tasks = []
    with prompts.open() as handle:
        for line in handle:
            await slots.acquire()
            tasks.append(asyncio.create_task(one(json.loads(line))))
    await asyncio.gather(*tasks)
    await client.close()


def inspect_eval(prompts: Path, base_url: str, concurrency: int, model: str, logs: Path) -> None:
    """inspect_ai asking the same prompts: generate() then a match scorer."""
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    kinds = {"system": ChatMessageSystem, "user": ChatMessageUser}
    with prompts.open() as handle:
        samples = [Sample(input=[kinds[m["role"]](content=m["content"]) for m in json.loads(line)],
                          target="1234") for line in handle]
    os.environ["OPENAI_API_KEY"] = os.environ[KEY_ENV]
    logs_done = eval(Task(dataset=samples, solver=generate(), scorer=includes()), model=f"openai/{model}",
                     model_base_url=base_url, max_connections=concurrency, log_dir=str(logs),
                     display="none", temperature=0, max_tokens=1024, seed=0)
    if logs_done[0].status != "success":
        raise SystemExit(f"inspect_ai run ended {logs_done[0].status}")


# ---- the parent -----------------------------------------------------------------------------

def median(values: list[float]) -> float:
    return statistics.median(values)


def round_order(names: list[str], round_: int) -> list[str]:
    """The sides' order in a round: inspect_ai last, the others turning (each opens a round in
    turn). The turn right after inspect_ai's is often a side's slowest (docs/performance.md,
    sixteenth pass), and here it is always the next round's first. The first round's opener
    follows only the warm-up, so each side takes that turn equally often when the rounds are
    one more than a multiple of the other sides' count (3 or 5 rounds for qmkar and the bare
    loop; 4 or 7 with --baseline or --from-file; 6 or 11 with both)."""
    turning = [name for name in names if name != "inspect_ai"]
    shift = round_ % len(turning)
    return turning[shift:] + turning[:shift] + [name for name in names if name == "inspect_ai"]


def throughput(args: argparse.Namespace, folder: Path, base_url: str) -> None:
    n, pairs, concurrency = args.questions, args.pairs, args.concurrency
    prompts = folder / "prompts.jsonl"
    write_prompts(prompts, n, pairs, 0)
    sides: dict[str, list[str]] = {
        "qmkar eval": [],  # its command changes each round (a fresh transcript)
        "bare AsyncOpenAI loop": [sys.executable, __file__, "bare", str(prompts), base_url, str(concurrency),
                                  args.model],
    }
    if args.baseline:
        sides["qmkar eval (baseline)"] = []
    dataset = folder / "dataset.jsonl"
    if args.from_file:  # the same questions, written by `qmkar generate` before timing
        measure([sys.executable, "-m", "qmkar", "generate", "-n", str(n), "--pairs", str(pairs),
                 "-o", str(dataset)])
        sides[FROM_FILE] = []
    if args.inspect and find_spec("inspect_ai") is not None:
        sides["inspect_ai"] = [sys.executable, __file__, "inspect", str(prompts), base_url, str(concurrency),
                               args.model]
    elif args.inspect:
        print("inspect_ai is not installed: measured without it")
    # Warm the server, the page cache and the bytecode of each side.
    ceiling = ceiling_options(args, folder)
    measure(qmkar_command(base_url, 50, pairs, concurrency, folder / "warm.jsonl", args.model, ceiling))
    measure(sides["bare AsyncOpenAI loop"])
    results: dict[str, list[Figures]] = {name: [] for name in sides}
    turning = len(sides) - ("inspect_ai" in sides)
    if "inspect_ai" in sides and (args.rounds - 1) % turning:
        print(f"note: with {args.rounds} rounds the turns right after inspect_ai's do not fall to each "
              f"side alike; {turning * ((args.rounds - 1) // turning + 1) + 1} rounds would")
    for round_ in range(args.rounds):
        order = round_order(list(sides), round_)
        shown = []
        for name in order:
            command, env = sides[name], None
            if name.startswith("qmkar eval"):
                output = folder / f"{len(name)}-{round_}.jsonl"
                command = qmkar_command(base_url, n, pairs, concurrency, output, args.model, ceiling,
                                        dataset if name == FROM_FILE else None)
                env = {"PYTHONPATH": args.baseline} if "baseline" in name else None
            elif name == "inspect_ai":
                command = [*command, str(folder / f"logs{round_}")]
            figures = measure(command, env)
            results[name].append(figures)
            shown.append(f"{name} {figures.wall:.2f} s")
        print(f"round {round_ + 1}: " + ", ".join(shown), flush=True)
    server = (f"{base_url} (given)" if args.base_url else f"loopback server delay {args.delay * 1000:.0f} ms"
              + (", echoing each prompt" if args.echo else ""))
    print(f"\n{n} questions of {pairs} pairs, concurrency {concurrency}, {server}, whole processes, "
          f"median of {args.rounds} rounds")
    print(f"{'':24} {'wall s':>8} {'q/s':>8} {'CPU s':>8} {'CPU ms/q':>9} {'peak MB':>8}")
    medians = {}
    for name, runs in results.items():
        wall, cpu, rss = (median([getattr(r, f) for r in runs]) for f in ("wall", "cpu", "rss"))
        medians[name] = Figures(wall, cpu, rss)
        print(f"{name:24} {wall:8.2f} {n / wall:8.1f} {cpu:8.2f} {cpu / n * 1000:9.2f} {rss:8.0f}")
    ours, bare = medians["qmkar eval"], medians["bare AsyncOpenAI loop"]
    ratios = [b.wall / q.wall for b, q in zip(results["bare AsyncOpenAI loop"], results["qmkar eval"],
                                               strict=True)]
    print(f"throughput qmkar / bare loop: {bare.wall / ours.wall:.2f} (medians; per round "
          f"{', '.join(f'{r:.2f}' for r in ratios)}; target >= 0.9)")
    if "qmkar eval (baseline)" in medians:
        print(f"throughput qmkar / baseline qmkar ({args.baseline}): "
              f"{medians['qmkar eval (baseline)'].wall / ours.wall:.2f}")
    if "inspect_ai" in medians:
        theirs = medians["inspect_ai"]
        ratios = [i.wall / q.wall for i, q in zip(results["inspect_ai"], results["qmkar eval"], strict=True)]
        print(f"throughput qmkar / inspect_ai: {theirs.wall / ours.wall:.2f} (medians; per round "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; target >= 8); the bare loop / inspect_ai: "
              f"{theirs.wall / bare.wall:.2f}")
    # Each round's own difference too: the machine's drift moves both sides of a round alike,
    # and the spread says how far one run's median can be trusted against the 0.5 ms target.
    beyond = [(q.cpu - b.cpu) / n * 1000 for b, q in zip(results["bare AsyncOpenAI loop"],
                                                         results["qmkar eval"], strict=True)]
    print(f"qmkar's CPU beyond the bare loop: {(ours.cpu - bare.cpu) / n * 1000:.2f} ms/question "
          f"(medians; per round {', '.join(f'{b:.2f}' for b in beyond)}; whole processes, startup "
          "included; target < 0.5)")
    if FROM_FILE in medians:
        read = medians[FROM_FILE]
        print(f"with its questions read from a file, as the bare loop reads its prompts: "
              f"throughput / bare loop {bare.wall / read.wall:.2f}, CPU beyond it "
              f"{(read.cpu - bare.cpu) / n * 1000:.2f} ms/question")


def memory(args: argparse.Namespace, folder: Path, base_url: str) -> None:
    if args.memory_questions:
        n = args.memory_questions
        figures = measure(qmkar_command(base_url, n, args.pairs, args.concurrency, folder / "memory.jsonl",
                                        args.model, ceiling_options(args, folder)))
        print(f"\n`qmkar eval` of {n} questions x {args.pairs} pairs: {figures.wall:.1f} s, "
              f"peak RSS {figures.rss:.0f} MB (target < 120)")
    sizes = [int(size) for size in args.oracle.split(",") if size]
    if sizes:
        print(f"\n{'eval --model oracle':24} {'wall s':>8} {'peak MB':>8}")
    for size in sizes:
        figures = measure([sys.executable, "-m", "qmkar", "eval", "-m", "oracle", "-n", str(size),
                           "--pairs", str(args.pairs), "-o", str(folder / f"oracle{size}.jsonl")])
        print(f"{f'{size} questions':24} {figures.wall:8.1f} {figures.rss:8.0f}", flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "bare":
        asyncio.run(bare_loop(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "inspect":
        inspect_eval(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], Path(sys.argv[6]))
        return
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds the server takes per answer")
    parser.add_argument("--echo", action="store_true", help="the loopback server answers with each prompt, "
                        "as mock servers do: every answer as long as its prompt, and wrong")
    parser.add_argument("--base-url", help="measure against this OpenAI-compatible server, already running "
                        "(for example http://127.0.0.1:8000/v1), instead of starting the loopback one; "
                        "every side sends the key 'bench'")
    parser.add_argument("--model", default="gpt-4o", help="the model name every side asks for")
    parser.add_argument("--no-inspect", dest="inspect", action="store_false", help="leave inspect_ai out")
    parser.add_argument("--from-file", action="store_true", help="also time `qmkar eval --dataset` of the "
                        "same questions written to a file first (its send path alone: no generating)")
    parser.add_argument("--baseline", metavar="SRC", type=src_folder, help="also time the qmkar whose src/ "
                        "folder this is (another checkout: before and after in one run)")
    parser.add_argument("--max-cost", type=float, help="run every qmkar side under this --max-cost (USD)")
    parser.add_argument("--memory-questions", type=int, default=10000, help="0: skip")
    parser.add_argument("--oracle", default="1000,10000,50000", help="sizes of the oracle runs ('' to skip)")
    args = parser.parse_args()
    if args.base_url and args.echo:
        raise SystemExit("--echo is the loopback server's: it does not apply with --base-url")
    if args.base_url:
        check_server(args.base_url, args.model)
    server, base_url = (None, args.base_url) if args.base_url else start_server(args.delay, echo=args.echo)
    try:
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            if args.rounds:
                throughput(args, folder, base_url)
            memory(args, folder, base_url)
    finally:
        if server is not None:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()

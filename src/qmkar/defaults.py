"""The defaults of a run, in one place; the CLI's options and help text read them from here.

Task defaults (pairs, targets, ranges...) belong to each task family's params model in
tasks/; a simulated memory's defaults are its OPTIONS table in providers/sim.py.
"""

from __future__ import annotations

from pathlib import Path

SEED = 0  # dataset seed: the same seed gives the same questions
GENERATE_N = 100  # questions `qmkar generate` writes
EVAL_N = 20  # questions `qmkar eval` asks
SWEEP_N = 20  # questions per grid cell of `qmkar sweep`
SEARCH_BRACKET = 1.5  # --find-effective-length stops when its bracket is within this factor
SEARCH_LOOK_EVERY = 10  # ... and looks at a size's interval after each this many questions
RESULTS_DIR = Path("results")  # where transcripts go without -o

CONCURRENCY = 8  # questions in flight at once per model
# ... for a built-in simulated memory, which answers the questions in flight as one batch
# (one product of its value codebook for all of them): at 500 pairs a question of the weighted
# memories costs about half as much in batches of 64 as of 8 (docs/performance.md, the
# twenty-fourth pass).
SIM_CONCURRENCY = 64
GRACE_SECONDS = 10.0  # after Ctrl-C, how long questions in flight may still finish

MAX_RETRIES = 6  # retries per question after the first try
RETRY_BUDGET = 600.0  # seconds one question may take, attempts and waits together
TIMEOUT = 120.0  # seconds per attempt, the whole reply included: a server trickling bytes cannot stretch it
MAX_ANSWER_CHARS = 1_000_000  # characters of an answer (and of its reasoning) kept; a longer one is cut

BATCH_POLL = 5.0  # --batch: seconds before the first status check
BATCH_POLL_MAX = 60.0  # the wait between status checks grows to this
# --batch: while waiting, status checks that fail even after their retries are tried again
# at the next poll, until they have failed for this long in a row (a batch may take 24 h).
BATCH_STATUS_OUTAGE = 3600.0

API_SEED = 0  # sent as the request's seed where the provider takes one
TEMPERATURE = 0.0  # sent where the model takes a temperature and the user set none
MAX_TOKENS = 1024  # answer token limit when the user set none
# The same for models that reason before answering: room enough that reasoning does not cut
# the answer off (OpenAI: "reserve at least 25,000 tokens for reasoning and outputs",
# platform.openai.com/docs/guides/reasoning; DeepSeek's reasoner defaults to 32K).
REASONING_MAX_TOKENS = 32768

# The sane range of each numeric sending option: beyond it a value is a typo, not a
# setting (a --timeout of a week, 10^9 samples). Every one must also be finite.
SEND_BOUNDS: dict[str, tuple[float, float]] = {
    "temperature": (0, 2),
    "max_tokens": (1, 1_000_000),
    "thinking_budget": (1, 1_000_000),
    "timeout": (0.001, 86_400),
    "max_retries": (0, 100),
    "retry_budget": (0.001, 7 * 86_400),
    "rpm": (0.001, 10_000_000),
    "tpm": (1, 10**11),
    "concurrency": (1, 1024),
    "samples": (1, 1000),
    "max_cost": (0, 10_000_000),
    "batch_poll": (0.001, 86_400),
}

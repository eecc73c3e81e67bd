"""A fixed set of questions for every simulated memory, and the answers the sim gives them.

    PYTHONPATH=SRC python -m tests.support.sim_answers > tests/providers/data/sim_answers.json

`tests/providers/test_sim_answers.py` checks the sim's answers today against the ones
stored there, which were written by the sim as it was before its answers were batched
(commit 89bff7a): the speed work may not change what any memory answers. Each answer is
stored with a digest of its prompt, so a changed question is told apart from a changed
answer. Only the provider's public entry point (`generate`) is used, so the same script
runs against either version.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from qmkar.providers.base import ModelRequest
from qmkar.providers.registry import resolve
from qmkar.render import default_template, render
from qmkar.tasks import generate, make_spec

# (model, task, task options, questions): every memory at its defaults, some options that
# change the update rule, and every task the sim reads.
MEMORIES = ["softmax", "linear", "gla", "delta", "gated-delta", "window", "hybrid"]
CASES: list[tuple[str, str, dict[str, Any], int]] = [
    *[(f"sim:{m}", "qmkar", {"pairs": 100}, 10) for m in MEMORIES],
    *[(f"sim:{m}", "qmkar", {"pairs": 500}, 6) for m in MEMORIES],
    *[(f"sim:{m}", "mqar", {"pairs": 200}, 4) for m in MEMORIES],
    *[(f"sim:{m}", "counting", {}, 4) for m in MEMORIES],
    *[(f"sim:{m}", task, {}, 2) for m in MEMORIES
      for task in ("qmkar-kv", "mqar-kv", "parity", "dyck", "copy")],
    ("sim:delta?beta=0.5&d=64", "qmkar", {"pairs": 300}, 6),
    ("sim:gated-delta?decay=0.9", "qmkar", {"pairs": 300}, 6),
    ("sim:window?w=16&temperature=0.2", "qmkar", {"pairs": 300}, 6),
    ("sim:hybrid?layers=2&d=128", "qmkar", {"pairs": 300}, 6),
    ("sim:linear?d=1024&threshold=0.8", "qmkar", {"pairs": 300}, 6),
    ("sim:delta", "qmkar", {"pairs": 2000}, 3),
    ("sim:gated-delta", "qmkar", {"pairs": 2000}, 3),
]


def answers() -> Iterator[dict[str, Any]]:
    """One row per question: model, task, index, the prompt's digest, answer and details."""
    for model, task, options, n in CASES:
        provider = resolve(model)
        template = default_template(task)
        for index, item in enumerate(generate(make_spec(task, **options), n, 0)):
            messages = render(item, template)
            response = asyncio.run(provider.generate(item, ModelRequest(messages=messages)))
            text = "\n".join(m["content"] for m in messages)
            yield {"model": model, "task": task, "options": options, "index": index,
                   "prompt": hashlib.sha256(text.encode()).hexdigest()[:16],
                   "answer": response.text,
                   "details": {k: v for k, v in response.extra.items() if k not in ("memory", "options")}}


if __name__ == "__main__":
    print(json.dumps(list(answers()), indent=0))

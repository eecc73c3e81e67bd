"""Bit parity (task parity) and controlled bit parity (task parity-ones).

From the ETH poster on linear models' associative memory: is the number of 1s in a
bit string odd? `parity` draws every bit at random; `parity-ones` fixes how many 1s
there are (`ones`, or `ones` + 1, chosen by the seed so both answers occur), so that
a long string is mostly 0s and the few 1s must be found and counted.
The answer is expected[0]: 1 for odd, 0 for even.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from qmkar.tasks.base import Item, item_id, require
from qmkar.tasks.sequences import DEFAULT_LENGTHS, length_for

LABELS = {1: "odd", 0: "even"}


class ParityParams(NamedTuple):
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    ones: int | None = None  # None: task parity; a number: task parity-ones


def task_name(params: ParityParams) -> str:
    return "parity" if params.ones is None else "parity-ones"


def check(params: ParityParams) -> None:
    """Raise UsageError for options no dataset can satisfy."""
    require(all(length >= 1 for length in params.lengths), "--lengths must all be at least 1")
    if params.ones is not None:
        require(params.ones >= 0, f"--ones must be at least 0, not {params.ones}")
        shortest = min(params.lengths)
        require(
            params.ones + 1 <= shortest,
            f"--ones {params.ones} needs strings of at least {params.ones + 1} bits (it uses "
            f"{params.ones} or {params.ones + 1} ones) but the shortest length is {shortest}",
        )


def generate_one(params: ParityParams, seed: int, index: int) -> Item:
    """Item `index` of the dataset for `seed`; independent of how many items are made."""
    task = task_name(params)
    rng = random.Random(f"{task}/{seed}/{index}")
    length = length_for(params.lengths, index)
    if params.ones is None:
        bits = [rng.randint(0, 1) for _ in range(length)]
    else:
        count = params.ones + rng.randint(0, 1)
        where = set(rng.sample(range(length), count))
        bits = [1 if i in where else 0 for i in range(length)]
    positions = [i for i, bit in enumerate(bits) if bit]
    options: dict[str, object] = {"length": length, "lengths": list(params.lengths)}
    if params.ones is not None:
        options["ones"] = params.ones
    options["seed"] = seed
    content = {"values": bits, "options": options}
    return Item(
        id=item_id(task, index, content),
        task=task,
        values=bits,
        query=[],
        expected=[len(positions) % 2],
        target_positions=positions,
        params=options,
    )


def answer_text(item: Item) -> str:
    """A correct answer, as the oracle writes it."""
    return LABELS[item.expected[0]]

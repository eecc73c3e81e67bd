"""Many random draws at once, giving exactly what `random.Random`'s own methods would.

`randint` and `shuffle` spend most of their time in argument checks and method calls
(randint -> randrange -> _randbelow): with hundreds of draws per question that was the
larger part of generating a context. These functions make the same calls to the
generator's `getrandbits` in the same order (CPython's rejection sampling: k = n's bit
length, draw k bits until below n), so a seed gives the same numbers, the generator ends
in the same state, and datasets keep their bytes (tests/tasks/test_placement.py pins them).
"""

from __future__ import annotations

import random
from typing import Any


def randints(rng: random.Random, low: int, high: int, count: int) -> list[int]:
    """[rng.randint(low, high) for _ in range(count)], without the per-call overhead."""
    getrandbits = rng.getrandbits
    n = high - low + 1
    k = n.bit_length()
    drawn: list[int] = []
    append = drawn.append
    for _ in range(count):
        r = getrandbits(k)
        while r >= n:
            r = getrandbits(k)
        append(low + r)
    return drawn


def randints_except(rng: random.Random, low: int, high: int, count: int, skipped: int) -> list[int]:
    """`count` draws of rng.randint(low, high), each draw equal to `skipped` thrown away."""
    getrandbits = rng.getrandbits
    n = high - low + 1
    k = n.bit_length()
    drawn: list[int] = []
    append = drawn.append
    skip = skipped - low
    left = count
    while left:
        r = getrandbits(k)
        while r >= n:
            r = getrandbits(k)
        if r != skip:
            append(low + r)
            left -= 1
    return drawn


def shuffle(rng: random.Random, x: list[Any]) -> None:
    """rng.shuffle(x): the same swaps from the same draws. Step i draws below i + 1 with
    k = (i + 1).bit_length() bits; the steps are taken a run of equal k at a time, so k is
    not worked out again for every step."""
    getrandbits = rng.getrandbits
    first = len(x) - 1  # the first step of a run
    while first > 0:
        k = (first + 1).bit_length()
        last = (1 << (k - 1)) - 1  # the run's last step: i + 1 = 2 ** (k - 1)
        for i in range(first, last - 1, -1):
            j = getrandbits(k)
            while j > i:
                j = getrandbits(k)
            x[i], x[j] = x[j], x[i]
        first = last - 1

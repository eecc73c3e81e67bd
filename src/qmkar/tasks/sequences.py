"""What the sequence tasks (parity, parity-ones, dyck, copy) share: their lengths.

These tasks are asked at several lengths to draw length-generalisation curves: item
i of a dataset has length lengths[i % len(lengths)], so any n covers the lengths
evenly and item i still depends only on (options, seed, i).
"""

from __future__ import annotations

from qmkar.errors import UsageError

DEFAULT_LENGTHS = (32, 48, 64, 128, 256)


def parse_lengths(text: str) -> tuple[int, ...]:
    """Read "32,48,64" into (32, 48, 64); raise UsageError otherwise."""
    try:
        lengths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(
            f"--lengths must be whole numbers joined by commas (for example 32,48,64), not {text!r}"
        ) from None
    if not lengths or any(length < 1 for length in lengths):
        raise UsageError(f"--lengths {text!r}: give one or more lengths of at least 1, e.g. 32,64")
    return lengths


def length_for(lengths: tuple[int, ...], index: int) -> int:
    """The length of item `index`."""
    return lengths[index % len(lengths)]

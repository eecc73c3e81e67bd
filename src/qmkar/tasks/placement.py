"""Where target pairs sit in a context, and which distractor keys look like the target.

Placement follows "Revealing and Mitigating the Local Pattern Shortcuts of Mamba"
(standard / last / shuffle): `random` (the blog's shuffle, the default), `start`,
`end`, `spread` (evenly from first to last), or explicit depths `depth:0.1,0.5,0.9`,
one per target. A depth is position / (pairs - 1): 0 is the first pair, 1 the last.
Near keys are the same paper's robustness noise and the blog's 150/151 confusions.
"""

from __future__ import annotations

import random
from typing import Annotated, NamedTuple

from pydantic import PlainSerializer

from qmkar.errors import UsageError
from qmkar.tasks.base import IntRange, from_text
from qmkar.tasks.draws import shuffle

KINDS = ("random", "start", "end", "spread")


class Placement(NamedTuple):
    """A placement rule: a kind, or explicit depths (kind 'depth')."""

    kind: str = "random"
    depths: tuple[float, ...] = ()

    def __str__(self) -> str:
        if self.kind == "depth":
            return "depth:" + ",".join(f"{d:g}" for d in self.depths)
        return self.kind


def parse_placement(text: str) -> Placement:
    """Read `random|start|end|spread` or `depth:D1,D2,...` (each 0..1); raise UsageError otherwise."""
    cleaned = text.strip().lower()
    if cleaned in KINDS:
        return Placement(cleaned)
    if cleaned.startswith("depth:"):
        parts = [p for p in cleaned[len("depth:"):].split(",") if p.strip()]
        try:
            depths = tuple(float(p) for p in parts)
        except ValueError:
            raise UsageError(
                f"--placement {text!r}: depths must be numbers from 0 to 1, e.g. depth:0.1,0.5,0.9"
            ) from None
        if not depths or any(not 0 <= d <= 1 for d in depths):
            raise UsageError(
                f"--placement {text!r}: give one depth from 0 to 1 per target, e.g. depth:0.1,0.5,0.9"
            )
        return Placement("depth", depths)
    raise UsageError(
        f"unknown --placement {text!r}; choose random, start, end, spread or depth:D1,D2,... "
        "(one depth from 0 to 1 per target)"
    )


# A placement field: "depth:0.1,0.5,0.9" in JSON and on the command line, a Placement in code.
PlacementField = Annotated[Placement, from_text(lambda text, option: parse_placement(text)),
                           PlainSerializer(str)]
PLACEMENT_HELP = ("where target pairs sit: random, start, end, spread or depth:D1,D2,... "
                  "(one 0..1 depth per target)")


def check_placement(placement: Placement, pairs: int, targets: int) -> None:
    """Raise UsageError when the placement cannot put `targets` pairs among `pairs`."""
    if placement.kind != "depth":
        return
    if len(placement.depths) != targets:
        raise UsageError(
            f"--placement {placement} gives {len(placement.depths)} depths but --targets is "
            f"{targets}; give one depth per target"
        )
    slots = target_slots(placement, pairs, targets)
    if len(set(slots)) != len(slots):
        raise UsageError(
            f"--placement {placement} puts two targets on the same pair among {pairs}; "
            "use depths further apart or more --pairs"
        )


def target_slots(placement: Placement, pairs: int, targets: int) -> list[int]:
    """Context indices of the target pairs for a non-random placement, in depth order."""
    last = pairs - 1
    if placement.kind == "start":
        return list(range(targets))
    if placement.kind == "end":
        return list(range(pairs - targets, pairs))
    if placement.kind == "spread":
        if targets == 1:
            return [last // 2]
        return [round(i * last / (targets - 1)) for i in range(targets)]
    if placement.kind == "depth":
        return [round(d * last) for d in placement.depths]
    raise ValueError(f"placement {placement} has no fixed slots")


def arrange(
    rng: random.Random, placement: Placement, targets: list, distractors: list
) -> tuple[list, list[float] | None]:
    """The context with targets placed, and their depths (None for `random`).

    `random` shuffles everything together, exactly as the blog's generator does.
    Otherwise the distractors are shuffled and the targets put in their slots, the
    i-th target value at the i-th slot (target values are already in random order).
    """
    if placement.kind == "random":
        pairs = targets + distractors
        shuffle(rng, pairs)
        return pairs, None
    size = len(targets) + len(distractors)
    slots = target_slots(placement, size, len(targets))
    rest = list(distractors)
    shuffle(rng, rest)
    by_slot = dict(zip(slots, targets, strict=True))
    filler = iter(rest)
    pairs = [by_slot[i] if i in by_slot else next(filler) for i in range(size)]
    last = max(size - 1, 1)
    return pairs, [round(s / last, 4) for s in sorted(slots)]


def near_candidates(target: int, key_range: IntRange) -> list[int]:
    """Keys in `key_range` within 2 of `target` or with all its digits but one, ascending.

    The same relation as score.near_keys, so a near distractor's value taken by a
    model is counted as an FP of kind `near`.
    """
    found: set[int] = set()
    for delta in (-2, -1, 1, 2):
        found.add(target + delta)
    digits = str(target)
    for index, old in enumerate(digits):
        for new in "0123456789":
            if new == old or (index == 0 and new == "0" and len(digits) > 1):
                continue
            found.add(int(digits[:index] + new + digits[index + 1:]))
    return sorted(k for k in found if key_range.low <= k <= key_range.high and k != target)


def near_keys_for(
    rng: random.Random, target: int, key_range: IntRange, count: int, unique: bool
) -> list[int]:
    """`count` distractor keys near `target`: distinct when `unique`, else drawn with replacement."""
    if count == 0:  # the default: no draws either way, and listing the candidates is not free
        return []
    candidates = near_candidates(target, key_range)
    if unique:
        if count > len(candidates):
            raise UsageError(
                f"--near-keys {count} with --unique-distractors needs {count} distinct keys near "
                f"{target} but --key-range {key_range} holds only {len(candidates)}"
            )
        return rng.sample(candidates, count)
    return [rng.choice(candidates) for _ in range(count)]


"""Dyck: is a string of three bracket types balanced? (task dyck)

From the ETH poster on linear models' associative memory: Dyck words over (), [] and
{} nested at most `max_depth` (6) deep. About half the items are balanced; the
others are a balanced word with one change: two neighbours swapped (every bracket
count stays the same, so only the order tells) or one bracket turned into another
type (then a count per type shows it). The answer is expected[0]: 1 for balanced,
0 for unbalanced; target_positions holds the changed position(s).
"""

from __future__ import annotations

import random

from qmkar.tasks.base import Item, require
from qmkar.tasks.sequences import LabelFamily, SequenceParams, length_for

OPEN = "([{"
CLOSE = ")]}"
LABELS = {1: "balanced", 0: "unbalanced"}
WORDS = {"balanced": 1, "unbalanced": 0, "imbalanced": 0}


class DyckParams(SequenceParams):
    max_depth: int = 6
    seed: int | None = None


def is_balanced(text: str) -> bool:
    """Whether every bracket is closed by one of its own type, in order."""
    stack: list[str] = []
    for symbol in text:
        if symbol in OPEN:
            stack.append(symbol)
        elif not stack or OPEN.index(stack.pop()) != CLOSE.index(symbol):
            return False
    return not stack


def max_depth(text: str) -> int:
    """The deepest nesting reached, counting opens minus closes."""
    depth = deepest = 0
    for symbol in text:
        depth += 1 if symbol in OPEN else -1
        deepest = max(deepest, depth)
    return deepest


def balanced_word(rng: random.Random, length: int, depth_limit: int) -> str:
    """A random balanced word of even `length` nested at most `depth_limit` deep."""
    stack: list[int] = []
    out: list[str] = []
    for i in range(length):
        remaining = length - i
        can_open = len(stack) < depth_limit and len(stack) + 2 <= remaining
        if can_open and (not stack or rng.random() < 0.5):
            kind = rng.randrange(3)
            stack.append(kind)
            out.append(OPEN[kind])
        else:
            out.append(CLOSE[stack.pop()])
    return "".join(out)


def corrupt(rng: random.Random, word: str, depth_limit: int) -> tuple[str, list[int]]:
    """An unbalanced word near `word` and the changed positions."""
    if rng.random() < 0.5:
        # Swap two different neighbours; some swaps stay balanced ("(())" -> "()()"),
        # so try a few places before falling back to changing a type.
        for _ in range(100):
            position = rng.randrange(len(word) - 1)
            swapped = word[:position] + word[position + 1] + word[position] + word[position + 2:]
            if not is_balanced(swapped) and max_depth(swapped) <= depth_limit:
                return swapped, [position, position + 1]
    position = rng.randrange(len(word))
    symbols = OPEN if word[position] in OPEN else CLOSE
    other = rng.choice([s for s in symbols if s != word[position]])
    return word[:position] + other + word[position + 1:], [position]


class Dyck(LabelFamily):
    name = "dyck"
    params_type = DyckParams
    options = {"length": "one length instead of --lengths",
               "lengths": "context lengths, item i gets the (i mod k)-th"}
    placeholders = {"sequence": "the brackets joined by spaces"}
    optional_placeholders = {"length": "number of brackets"}
    words, labels = WORDS, LABELS
    sim_reads = "brackets"
    context_field = "text"

    def check(self, params: DyckParams) -> None:
        super().check(params)
        odd = [length for length in params.lengths if length % 2 or length < 2]
        require(not odd, f"dyck --lengths must be even and at least 2 (a balanced word pairs "
                         f"every bracket), not {', '.join(map(str, odd))}")

    def allowed_length(self, size: int) -> int:
        return max(2, size - size % 2)  # a balanced word has an even length

    def generate_one(self, params: DyckParams, seed: int, index: int) -> Item:
        rng = random.Random(f"dyck/{seed}/{index}")
        length = length_for(params.lengths, index)
        word = balanced_word(rng, length, params.max_depth)
        balanced = rng.random() < 0.5
        changed: list[int] = []
        if not balanced:
            word, changed = corrupt(rng, word, params.max_depth)
        recorded = DyckParams(length=length, lengths=params.lengths, max_depth=params.max_depth,
                              seed=seed)
        return self.new_item(
            index, recorded, ("text",),
            text=word,
            query=[],
            expected=[int(balanced)],
            target_positions=changed,
        )

    def content_problem(self, item: Item) -> str | None:
        text = item.text or ""
        if not text or any(symbol not in OPEN + CLOSE for symbol in text):
            return "a dyck item's text is a non-empty string of the brackets ()[]{}"
        balanced = int(is_balanced(text))
        if item.expected != [balanced]:
            return (f"expected {item.expected[:5]} contradicts its text, which is "
                    f"{LABELS[balanced]} (expected [{balanced}])")
        return None

    def prompt_fields(self, item: Item) -> dict[str, str]:
        return {"sequence": " ".join(item.text or ""), "length": str(item.size)}



FAMILY = Dyck()

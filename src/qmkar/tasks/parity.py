"""Bit parity (task parity) and controlled bit parity (task parity-ones).

From the ETH poster on linear models' associative memory: is the number of 1s in a
bit string odd? `parity` draws every bit at random; `parity-ones` fixes how many 1s
there are (`ones`, or `ones` + 1, chosen by the seed so both answers occur), so that
a long string is mostly 0s and the few 1s must be found and counted.
The answer is expected[0]: 1 for odd, 0 for even.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from qmkar.tasks.base import Item, TaskParams, require
from qmkar.tasks.sequences import LabelFamily, SequenceParams, length_for

LABELS = {1: "odd", 0: "even"}
WORDS = {"odd": 1, "even": 0}


class ParityParams(SequenceParams):
    seed: int | None = None


class ParityOnesParams(SequenceParams):
    ones: int = 4
    seed: int | None = None


class Parity(LabelFamily):
    name = "parity"
    params_type: ClassVar[type[TaskParams]] = ParityParams
    options = {"length": "one length instead of --lengths",
               "lengths": "context lengths, item i gets the (i mod k)-th"}
    placeholders = {"bits": "the bits joined by spaces"}
    optional_placeholders = {"length": "number of bits"}
    words, labels = WORDS, LABELS
    sim_reads = "bits"

    def bits(self, params: ParityParams, rng: random.Random, length: int) -> list[int]:
        return [rng.randint(0, 1) for _ in range(length)]

    def generate_one(self, params: ParityParams, seed: int, index: int) -> Item:
        rng = random.Random(f"{self.name}/{seed}/{index}")
        length = length_for(params.lengths, index)
        bits = self.bits(params, rng, length)
        positions = [i for i, bit in enumerate(bits) if bit]
        fields: dict[str, Any] = {"length": length, "lengths": params.lengths, "seed": seed}
        if isinstance(params, ParityOnesParams):
            fields["ones"] = params.ones
        recorded = self.params_type(**fields)
        return self.new_item(
            index, recorded, ("values",),
            values=bits,
            query=[],
            expected=[len(positions) % 2],
            target_positions=positions,
        )

    def content_problem(self, item: Item) -> str | None:
        bits = item.values or []
        if any(bit not in (0, 1) for bit in bits):
            return f"a {self.name} item's values are bits, 0 or 1"
        ones = [i for i, bit in enumerate(bits) if bit]
        if item.target_positions != ones:
            return f"target_positions {item.target_positions[:5]} are not where its 1s are ({ones[:5]})"
        if item.expected != [len(ones) % 2]:
            return (f"expected {item.expected[:5]} contradicts its bits, which hold {len(ones)} ones "
                    f"({self.labels[len(ones) % 2]}: expected [{len(ones) % 2}])")
        return None

    def prompt_fields(self, item: Item) -> dict[str, str]:
        return {"bits": " ".join(str(b) for b in item.values or []), "length": str(item.size)}



class ParityOnes(Parity):
    name = "parity-ones"
    params_type = ParityOnesParams
    options = {**Parity.options,
               "ones": "number of 1s per string (or one more, so both answers occur)"}

    def check(self, params: ParityOnesParams) -> None:
        super().check(params)
        require(params.ones >= 0, f"--ones must be at least 0, not {params.ones}")
        shortest = min(params.lengths)
        require(
            params.ones + 1 <= shortest,
            f"--ones {params.ones} needs strings of at least {params.ones + 1} bits (it uses "
            f"{params.ones} or {params.ones + 1} ones) but the shortest length is {shortest}",
        )

    def bits(self, params: ParityParams, rng: random.Random, length: int) -> list[int]:
        assert isinstance(params, ParityOnesParams)
        count = params.ones + rng.randint(0, 1)
        where = set(rng.sample(range(length), count))
        return [1 if i in where else 0 for i in range(length)]


PARITY = Parity()
PARITY_ONES = ParityOnes()

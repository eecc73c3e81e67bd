"""How the simulated memories read and answer the variant tasks, from the prompt text alone.

sim.py reads the recall prompts ("pairs") and counting ("list"); a family whose `sim_reads`
names one of READERS below is read and answered here, with the same memories and codebooks:

- "multipart" (qmkar-kv, mqar-kv): pairs `k: K1-K2, v: V1-V2`. A multi-part key's vector is
  the normalised sum of one vector per part, each part position with its own codebook, so
  keys sharing all parts but one are alike; values likewise. The queried keys are the
  groups outside the pairs that occur as keys in them (the template's example value is not
  a key). Candidates are the values written in the context.
- "bits" (parity, parity-ones): the 1s are counted the way counting counts a value, and the
  count's parity answered: a memory that cannot count cannot tell odd from even.
- "brackets" (dyck): each bracket's opens and closes are counted the same way, and the word
  called balanced when every type's counts match. Counts cannot see order, so a swap of two
  neighbours (counts unchanged) always passes as balanced.
- "sequence" (copy): the numbers are written under their positions (keys 0..L-1) and every
  position read back: copying is recall with positions for keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from qmkar.errors import ProviderCallError
from qmkar.providers import sim_memory
from qmkar.tasks import family

if TYPE_CHECKING:
    from qmkar.providers.sim import Answer, SimModel

MULTIPART = re.compile(r"\bk\s*:\s*(\d+(?:-\d+)*)\s*,\s*v\s*:\s*(\d+(?:-\d+)*)")
GROUP = re.compile(r"\d+(?:-\d+)*")
BITS = re.compile(r"[01](?:[ \t]+[01])*")
BRACKETS = re.compile(r"[()\[\]{}](?:[ \t]+[()\[\]{}])*")
NUMBERS = re.compile(r"\d+(?:[ \t]+\d+)*")
OPEN, CLOSE = "([{", ")]}"
# Each part position of a multi-part key or value has its own codebook: its seed is moved on
# by this much per position, far from any seed a user would pick.
PART_SEED_STEP = 1_000_003


def _unreadable(task: str, why: str) -> ProviderCallError:
    return ProviderCallError(
        f"sim cannot read this {task} prompt: {why}. It reads prompts laid out like the built-in "
        f"template prompts/{task}.txt", kind="unreadable_prompt", fatal=True)


def _longest(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    matches = list(pattern.finditer(text))
    return max(matches, key=lambda m: m.end() - m.start()) if matches else None


def answer(model: SimModel, task: str, text: str) -> Answer:
    """The memory's answer to a prompt of a variant task."""
    reads = family(task).sim_reads
    if reads not in READERS:
        raise ProviderCallError(f"sim has no reader for task {task!r}", kind="unreadable_prompt")
    return READERS[reads](model, task, text)


# --- counting what a context holds: parity and dyck ------------------------------------------


def _count(model: SimModel, numbers: list[int], queried: int) -> int:
    """How many times `queried` occurs in `numbers`, as the memory counts (sim's counting)."""
    from qmkar.providers.sim import Prompt

    return int(model.answer("counting", Prompt(values=numbers, query=[queried])).text)


def _bits(model: SimModel, task: str, text: str) -> Answer:
    from qmkar.providers.sim import Answer

    found = _longest(BITS, text)
    if found is None:
        raise _unreadable(task, "it holds no run of 0s and 1s")
    bits = [int(bit) for bit in found[0].split()]
    ones = _count(model, bits, 1)
    return Answer("odd" if ones % 2 else "even", {"ones_counted": ones})


def _brackets(model: SimModel, task: str, text: str) -> Answer:
    from qmkar.providers.sim import Answer

    found = _longest(BRACKETS, text)
    if found is None:
        raise _unreadable(task, "it holds no run of brackets")
    # Each bracket is written as a number (its place in "([{)]}") so the counting memory can
    # store it; ( and ) are then 0 and 3, as alike as any two small numbers.
    codes = {symbol: code for code, symbol in enumerate(OPEN + CLOSE)}
    symbols = [codes[s] for s in found[0].split()]
    counts = {s: _count(model, symbols, codes[s]) for s in OPEN + CLOSE}
    balanced = all(counts[o] == counts[c] for o, c in zip(OPEN, CLOSE, strict=True))
    return Answer("balanced" if balanced else "unbalanced", {"counts": counts})


# --- recall with positions or multi-part keys: copy, qmkar-kv, mqar-kv -----------------------


def _layers(model: SimModel, parts: list[tuple[int, ...]]) -> list[np.ndarray]:
    """Key vectors of multi-part keys, one array per layer the memory reads."""
    top = max(max(p) for p in parts)
    width = len(parts[0])
    layers = []
    for layer in range(model.layers):
        total = np.zeros((len(parts), model.d), dtype=np.float32)
        for position in range(width):
            seed = model.seed + PART_SEED_STEP * position
            table = sim_memory.key_table(seed, model.d, model.mix, top, layer)
            total += table[np.asarray([p[position] for p in parts])]
        layers.append(total / np.linalg.norm(total, axis=1, keepdims=True))
    return layers


def _value_vectors(model: SimModel, values: list[tuple[int, ...]]) -> np.ndarray:
    total = np.zeros((len(values), model.d), dtype=np.float32)
    for position in range(len(values[0])):
        column = [v[position] for v in values]
        low, high = min(column), max(column)
        table = sim_memory.value_table(model.seed + PART_SEED_STEP * position, model.d, low, high)
        total += table[np.asarray(column) - low]
    return total / np.linalg.norm(total, axis=1, keepdims=True)


def _read_chunked(model: SimModel, keys: list[np.ndarray], values: np.ndarray,
                  queries: list[np.ndarray]) -> np.ndarray:
    """Read-outs for many queries, a block of them at a time (softmax and linear build a
    queries x writes matrix; a long copy would otherwise need gigabytes). The delta rules
    take them all at once: they read the state once for any number of queries."""
    step = len(queries[0]) if model.config.memory in sim_memory.DELTA_RULES else 512
    parts = [sim_memory.read(model.config.memory, keys, [q[i:i + step] for q in queries], values,
                             model.memory_options) for i in range(0, len(queries[0]), step)]
    return np.concatenate(parts)


def _decoded(model: SimModel, readout: np.ndarray, candidates: np.ndarray) -> list[int]:
    """Indices of the candidates passing the threshold, best first."""
    return sim_memory.decode(readout, candidates, 0, model.config.options["threshold"]).values


def _parts(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("-"))


def _multipart(model: SimModel, task: str, text: str) -> Answer:
    from qmkar.providers.sim import Answer

    matches = list(MULTIPART.finditer(text))
    if not matches:
        raise _unreadable(task, "it holds no 'k: K1-K2, v: V1-V2' pairs")
    pairs = [(_parts(m[1]), _parts(m[2])) for m in matches]
    if len({len(k) for k, _ in pairs}) > 1 or len({len(v) for _, v in pairs}) > 1:
        raise _unreadable(task, "its keys (or values) do not all have the same number of parts")
    rest = _outside(text, matches)
    known = {k for k, _ in pairs}
    query = list(dict.fromkeys(g for g in (_parts(m[0]) for m in GROUP.finditer(rest)) if g in known))
    if not query or (family(task).width_name == "targets" and len(query) != 1):
        raise _unreadable(task, f"outside the pairs it names {len(query)} of the context's keys, not the "
                          "queried key" + ("" if family(task).width_name == "targets" else "s"))
    keys = _layers(model, [k for k, _ in pairs] + query)
    written = [v for _, v in pairs]
    candidates = list(dict.fromkeys(written))
    vectors = _value_vectors(model, candidates)
    index = {v: i for i, v in enumerate(candidates)}
    values = vectors[[index[v] for v in written]]
    n = len(pairs)
    readouts = sim_memory.read(model.config.memory, [k[:n] for k in keys], [k[n:] for k in keys], values,
                               model.memory_options)
    answered: list[tuple[int, ...]] = []
    for readout in readouts:
        answered += [candidates[i] for i in _decoded(model, readout, vectors)
                     if candidates[i] not in answered]
    shown = ", ".join("-".join(str(p) for p in v) for v in answered)
    return Answer(shown or "none", {"candidates": len(candidates)})


def _outside(text: str, matches: list[re.Match[str]]) -> str:
    kept, last = [], 0
    for match in matches:
        kept.append(text[last:match.start()])
        last = match.end()
    kept.append(text[last:])
    return " ".join(kept)


def _sequence(model: SimModel, task: str, text: str) -> Answer:
    from qmkar.providers.sim import Answer

    found = _longest(NUMBERS, text)
    if found is None:
        raise _unreadable(task, "it holds no numbers")
    numbers = [int(n) for n in found[0].split()]
    low, high = min(numbers), max(numbers)
    table = sim_memory.value_table(model.seed, model.d, low, high)
    positions = np.arange(len(numbers))
    keys = [sim_memory.key_table(model.seed, model.d, model.mix, len(numbers), layer)[positions]
            for layer in range(model.layers)]
    readouts = _read_chunked(model, keys, table[np.asarray(numbers) - low], keys)
    copied = []
    for readout in readouts:
        best = _decoded(model, readout, table)
        if best:
            copied.append(low + best[0])
    return Answer(" ".join(map(str, copied)) or "none", {"positions": len(numbers)})


READERS: dict[str, Callable[[SimModel, str, str], Any]] = {
    "multipart": _multipart, "bits": _bits, "brackets": _brackets, "sequence": _sequence,
}

"""Associative memories in numpy: the test-time regression view of sequence models.

Every memory stores (key vector, value vector) pairs written in context order and is
read with a query key. `read()` computes each memory's read-out in closed (parallel)
form (the delta rules a block of writes at a time, so time grows linearly with the pairs);
`recurrent_state()` applies the same update rules one write at a time and is the reference
the tests check `read()` against. `decode_many()` scores many read-outs against every
candidate value with one matrix product.

Numbers become vectors through seeded codebooks: `key_table()` builds key vectors whose
similarity grows for numerically close keys and keys sharing digits; `value_table()`
gives each value an independent random unit vector.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from qmkar.providers.sim_delta import delta_weights

BLOCK = 256  # codebook rows are generated in blocks, so a row never depends on table size
SMOOTH_WIDTH = 1.0  # correlation of the "magnitude" part: exp(-gap**2 / (4 * width**2))
SMOOTH_REACH = 4
MAX_DIGITS = 20
PAGE = 16 * BLOCK

# Stream labels for the seeded generator, one per kind of random vector.
_IDENTITY, _SMOOTH, _DIGIT, _VALUE, _UNIT = 1, 2, 3, 4, 5

MEMORIES = ("softmax", "linear", "gla", "delta", "gated-delta", "window", "hybrid")


def _rows(seed: int, layer: int, stream: int, d: int, start: int, stop: int) -> np.ndarray:
    """Gaussian rows start..stop-1 (entries N(0, 1/d)) of one seeded stream."""
    parts = []
    for block in range(start // BLOCK, (stop - 1) // BLOCK + 1):
        seq = np.random.SeedSequence([seed, layer, stream, d, block])
        rows = np.random.Generator(np.random.PCG64(seq)).standard_normal((BLOCK, d), dtype=np.float32)
        lo, hi = max(start, block * BLOCK) - block * BLOCK, min(stop, (block + 1) * BLOCK) - block * BLOCK
        parts.append(rows[lo:hi])
    return np.concatenate(parts) / np.float32(np.sqrt(d))


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


class KeyMix(NamedTuple):
    """Shares of a key vector's variance: its own random part, closeness, shared digits."""

    near: float = 0.2
    digits: float = 0.2

    @property
    def identity(self) -> float:
        return 1.0 - self.near - self.digits


def _digit_parts(seed: int, layer: int, d: int, numbers: np.ndarray) -> np.ndarray:
    """Sum over digit positions (from the right) of a vector per (position, digit), / sqrt(#digits)."""
    table = _rows(seed, layer, _DIGIT, d, 0, MAX_DIGITS * 10).reshape(MAX_DIGITS, 10, d)
    out = np.zeros((len(numbers), d), dtype=np.float32)
    lengths = np.array([len(str(int(n))) for n in numbers])
    rest = numbers.astype(np.int64).copy()
    for position in range(int(lengths.max())):
        present = lengths > position
        out[present] += table[position, rest[present] % 10]
        rest //= 10
    return out / np.sqrt(lengths, dtype=np.float32)[:, None]


@lru_cache(maxsize=16)
def _key_table(seed: int, layer: int, d: int, mix: KeyMix, size: int) -> np.ndarray:
    numbers = np.arange(size)
    identity = _rows(seed, layer, _IDENTITY, d, 0, size)
    # The magnitude part: a Gaussian-smoothed random walk over the integers, so keys
    # 150 and 151 share most of it and keys 10 apart share none.
    offsets = np.arange(-SMOOTH_REACH, SMOOTH_REACH + 1)
    kernel = np.exp(-(offsets**2) / (2 * SMOOTH_WIDTH**2)).astype(np.float32)
    kernel /= np.sqrt((kernel**2).sum())
    raw = _rows(seed, layer, _SMOOTH, d, 0, size + 2 * SMOOTH_REACH)
    smooth = sum(w * raw[i : i + size] for i, w in enumerate(kernel))
    digits = _digit_parts(seed, layer, d, numbers)
    keys = (
        np.sqrt(mix.identity, dtype=np.float32) * identity
        + np.sqrt(mix.near, dtype=np.float32) * smooth
        + np.sqrt(mix.digits, dtype=np.float32) * digits
    )
    keys = _unit_rows(keys)
    keys.setflags(write=False)
    return keys


def key_table(seed: int, d: int, mix: KeyMix, top: int, layer: int = 0) -> np.ndarray:
    """Unit key vectors for the numbers 0..top (at least); row n is the key n."""
    size = (top // BLOCK + 1) * BLOCK
    return _key_table(seed, layer, d, mix, size)


@lru_cache(maxsize=4)
def _value_blocks(seed: int, d: int, first: int, last: int) -> np.ndarray:
    values = _unit_rows(_rows(seed, 0, _VALUE, d, first * BLOCK, (last + 1) * BLOCK))
    values.setflags(write=False)
    return values


class ValuePage(NamedTuple):
    """Unit value vectors for whole pages of values: row i is the value `first` + i."""

    table: np.ndarray
    first: int
    columns: np.ndarray  # the table transposed (d x values, C order): decode_many's product reads it


@lru_cache(maxsize=4)
def _value_columns(seed: int, d: int, first: int, last: int) -> np.ndarray:
    columns = np.ascontiguousarray(_value_blocks(seed, d, first, last).T)
    columns.setflags(write=False)
    return columns


def _page_blocks(low: int, high: int) -> tuple[int, int]:
    return low // PAGE * (PAGE // BLOCK), (high // PAGE + 1) * (PAGE // BLOCK) - 1


def value_page(seed: int, d: int, low: int, high: int) -> ValuePage:
    """The pages of PAGE values holding low..high, built once and shared: the slightly
    different ranges of successive questions (each context's smallest..largest value)
    read one table, so their read-outs can be decoded with one product."""
    first, last = _page_blocks(low, high)
    return ValuePage(_value_blocks(seed, d, first, last), first * BLOCK, _value_columns(seed, d, first, last))


def value_table(seed: int, d: int, low: int, high: int) -> np.ndarray:
    """Unit value vectors for low..high; row i is the value low + i (a slice of a page)."""
    first, last = _page_blocks(low, high)
    return _value_blocks(seed, d, first, last)[low - first * BLOCK : high + 1 - first * BLOCK]


def unit_value(seed: int, d: int) -> np.ndarray:
    """The value every counting write stores: one unit vector ("one more")."""
    return _unit_rows(_rows(seed, 0, _UNIT, d, 0, 1))[0]


class MemoryOptions(NamedTuple):
    """The options that shape a memory's update and read.

    The defaults are the rules' neutral settings, not a simulated model's defaults (those
    are sim.OPTIONS, which sets every field a memory reads): a hand-built case names only
    what it tests.
    """

    temperature: float = 1.0  # softmax, window, hybrid's softmax layer (1: logits unscaled)
    decay: float = 1.0  # gla, gated-delta, hybrid's linear layers (1: no decay)
    beta: float = 1.0  # delta, gated-delta (1: each write replaces what its key read)
    window: int | None = None  # window: the last `window` pairs (None: every pair)
    layers: int = 0  # hybrid: linear layers beside its one softmax layer (0: softmax alone)


def _softmax_rows(logits: np.ndarray) -> np.ndarray:
    logits = logits - logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)


def _decay_powers(n: int, decay: float) -> np.ndarray:
    """decay ** (n - 1 - j) for j in 0..n-1: how much of write j survives to the read."""
    if decay == 1.0:
        return np.ones(n)
    return decay ** np.arange(n - 1, -1, -1, dtype=np.float64)


def _mix(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """weights @ values: the weights are worked out in float64, the sum over the value
    vectors is taken in their own type (the sim's are float32, and so are its read-outs)."""
    return weights.astype(values.dtype, copy=False) @ values


def read_softmax(keys: np.ndarray, values: np.ndarray, queries: np.ndarray, temperature: float) -> np.ndarray:
    weights = _softmax_rows((queries @ keys.T).astype(np.float64) / temperature)
    return _mix(weights, values)


def read_linear(keys: np.ndarray, values: np.ndarray, queries: np.ndarray, decay: float = 1.0) -> np.ndarray:
    """S = sum_j decay^(n-1-j) v_j k_j^T read with q: sum_j decay^(n-1-j) (k_j . q) v_j."""
    weights = (queries @ keys.T).astype(np.float64) * _decay_powers(len(keys), decay)
    return _mix(weights, values)


def read_delta(
    keys: np.ndarray, values: np.ndarray, queries: np.ndarray, beta: float, decay: float = 1.0
) -> np.ndarray:
    """The (gated) delta rule's read-outs, its weights solved a block of writes at a time
    (sim_delta.delta_weights)."""
    if len(queries) > keys.shape[1]:
        # More queries than dimensions (copy reads every position): read the state's d
        # columns once, with the unit vectors as queries; each query combines them.
        columns = read_delta(keys, values, np.eye(keys.shape[1], dtype=keys.dtype), beta, decay)
        return queries.astype(np.float64) @ columns
    return _mix(delta_weights(keys, queries, beta, decay), values)


DELTA_RULES = ("delta", "gated-delta")


def read(
    memory: str,
    key_layers: list[np.ndarray],
    query_layers: list[np.ndarray],
    values: np.ndarray,
    options: MemoryOptions,
) -> np.ndarray:
    """Read-outs (one row per query) of `memory` after writing keys/values in order.

    `key_layers[0]` / `query_layers[0]` are the key vectors every memory uses; hybrid
    also uses layers 1..options.layers for its linear layers.
    """
    if memory in DELTA_RULES:
        decay = options.decay if memory == "gated-delta" else 1.0
        return read_delta(key_layers[0], values, query_layers[0], options.beta, decay)
    layers = 1 + options.layers if memory == "hybrid" else 1
    similarities = [q @ k.T for k, q in zip(key_layers[:layers], query_layers[:layers], strict=True)]
    return read_weighted(memory, similarities, values, options)


def read_weighted(memory: str, similarities: list[np.ndarray], values: np.ndarray,
                  options: MemoryOptions) -> np.ndarray:
    """Every memory but the delta rules reads sum_j weight_j v_j, each write's weight a
    function of the query-key similarities (queries x writes, one matrix per layer)."""
    first = similarities[0].astype(np.float64)
    n = first.shape[1]
    if memory in ("softmax", "hybrid"):
        weights = _softmax_rows(first / options.temperature)
    elif memory == "window":
        seen = n if options.window is None else min(options.window, n)  # the last `seen` writes
        weights = np.zeros_like(first)
        weights[:, n - seen :] = _softmax_rows(first[:, n - seen :] / options.temperature)
    elif memory == "linear":
        weights = first
    elif memory == "gla":
        weights = first * _decay_powers(n, options.decay)
    else:
        raise ValueError(f"unknown memory {memory!r}")
    if memory == "hybrid":
        # MiniMax-01's pattern: several linear-attention layers and one softmax layer add
        # their outputs to one residual stream. Each layer has its own key codebook
        # (its own key projection); the value space is shared so the sum can be decoded.
        for layer in range(1, options.layers + 1):
            weights = weights + similarities[layer].astype(np.float64) * _decay_powers(n, options.decay)
    return _mix(weights, values)


def recurrent_state(memory: str, keys: np.ndarray, values: np.ndarray, options: MemoryOptions) -> np.ndarray:
    """The d_v x d_k state after writing each (key, value) in turn; the update rules by the book.

    softmax, window and hybrid keep every pair (a KV cache), so they have no fixed state.
    """
    state = np.zeros((values.shape[1], keys.shape[1]))
    for k, v in zip(keys.astype(np.float64), values.astype(np.float64), strict=True):
        if memory == "linear":
            state += np.outer(v, k)
        elif memory == "gla":
            state = options.decay * state + np.outer(v, k)
        elif memory == "delta":
            state += options.beta * np.outer(v - state @ k, k)
        elif memory == "gated-delta":
            state = options.decay * state
            state += options.beta * np.outer(v - state @ k, k)
        else:
            raise ValueError(f"{memory} has no fixed-size state")
    return state


class Decoded(NamedTuple):
    """Candidate values whose score passed the threshold, best first, and the best score."""

    values: list[int]
    best: float


# A float32 dot product of a unit vector with r is off by at most about d * 2^-24 * |r|
# (the classic bound for a sum of d products); decode_many allows twice that.
ROUNDING = 2.0 * 2.0**-24


def decode_many(
    readouts: np.ndarray, table: np.ndarray, spans: list[tuple[int, int]], lows: list[int], threshold: float,
    columns: np.ndarray | None = None,
) -> list[Decoded]:
    """Decode many read-outs against the rows of one value table with one matrix product.

    Read-out i is scored against rows spans[i] = (start, stop) of `table`, which stand for
    the values lows[i], lows[i] + 1, ...; candidates scoring at least `threshold` x the
    best are kept, best first, and nothing when the best score is not positive. `columns`,
    the table transposed and contiguous, if given, is what the product reads: BLAS takes a
    few read-outs times it about twice as fast as times the rows.

    The product is float32 (the table's type), but which candidates pass and in what order
    is decided on exact scores: every candidate the float32 score cannot place for certain
    (near the best, near the cut, or passing) is scored again in float64. So an answer does
    not depend on which questions shared its product, nor on how BLAS rounded it.
    """
    narrow = readouts.astype(np.float32)
    first, last = min(start for start, _ in spans), max(stop for _, stop in spans)
    # one product for every read-out, a row each
    scores = narrow @ (table[first:last].T if columns is None else columns[:, first:last])
    wide = narrow.astype(np.float64)
    slacks = ROUNDING * table.shape[1] * np.sqrt((wide * wide).sum(axis=1))
    decoded = []
    for row, ((start, stop), low) in enumerate(zip(spans, lows, strict=True)):
        approx = scores[row, start - first : stop - first]
        top, slack = float(approx.max()), float(slacks[row])
        # Every candidate that may be the best or pass the cut (which is at least
        # threshold x (top - slack)); all of them when no score is clearly positive.
        if top > slack:
            maybe = np.flatnonzero(approx >= threshold * (top - slack) - slack)
        else:
            maybe = np.arange(len(approx))
        sure = table[start + maybe].astype(np.float64) @ wide[row]
        best = float(sure.max())
        if best <= 0:
            decoded.append(Decoded([], best))
            continue
        passed = sure >= threshold * best
        order = maybe[passed][np.argsort(-sure[passed], kind="stable")]
        decoded.append(Decoded([low + int(i) for i in order], best))
    return decoded


def decode(readout: np.ndarray, candidates: np.ndarray, low: int, threshold: float) -> Decoded:
    """decode_many for one read-out scored against every row of `candidates`."""
    return decode_many(readout[None, :], candidates, [(0, len(candidates))], [low], threshold)[0]

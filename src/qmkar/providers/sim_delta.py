"""The delta rules' read in closed form, solved a block of writes at a time.

sim_memory.read_delta turns the weights found here into read-outs; they are kept apart
because the blockwise solve (and its block inverses) is most of the delta rules' time.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.lib.stride_tricks import as_strided

# The delta rules are solved this many writes at a time (see delta_weights); a power of two.
DELTA_BLOCK = 64


def _diagonal_blocks(matrices: np.ndarray, size: int) -> np.ndarray:
    """A view of the size x size blocks on the diagonals of C-ordered (count, s, s) matrices."""
    count, s = matrices.shape[0], matrices.shape[-1]
    item = matrices.itemsize
    return as_strided(matrices, (count, s // size, size, size), (s * s * item, (size * s + size) * item,
                                                                  s * item, item))


def unit_upper_inverses(matrices: np.ndarray) -> np.ndarray:
    """Inverses of unit upper-triangular (count, s, s) matrices, s a power of two, given by
    their strict upper triangles (the diagonal and below are not read).

    Built up from the diagonal: once the blocks of size h are inverted, each block of
    size 2h, [[A, B], [0, D]], has the inverse [[A^-1, -A^-1 B D^-1], [0, D^-1]]. A few
    batched products instead of a general inverse (LU and all) of each block: less than
    half the time, and equal to it to within float64 rounding."""
    s = matrices.shape[-1]
    inverses = np.zeros_like(matrices)
    steps = np.arange(s)
    inverses[:, steps, steps] = 1.0
    even = steps[::2]
    inverses[:, even, even + 1] = -matrices[:, even, even + 1]  # blocks of 2
    half = 2
    while half < s:
        known, given = _diagonal_blocks(inverses, 2 * half), _diagonal_blocks(matrices, 2 * half)
        upper = known[..., :half, :half] @ given[..., :half, half:]
        known[..., :half, half:] = -upper @ known[..., half:, half:]
        half *= 2
    return inverses


@lru_cache(maxsize=8)
def _decay_gaps(size: int, decay: float) -> np.ndarray:
    """decay ** (s - t) for s >= t within a block (1 elsewhere)."""
    steps = np.arange(size)
    gaps = decay ** np.maximum(steps[None, :] - steps[:, None], 0)
    gaps.setflags(write=False)
    return gaps


def delta_weights(keys: np.ndarray, queries: np.ndarray, beta: float, decay: float = 1.0) -> np.ndarray:
    """The weight of each value in the (gated) delta rule's read (queries x writes): the read
    is weights @ values. In parallel form, a block of writes at a time.

    Write t adds u_t k_t^T with u_t = beta (v_t - decay S_{t-1} k_t); unrolled, this is
    (I + beta M) U = beta V with M[t, j] = decay^(t-j) (k_t . k_j) for j < t (the
    "WY" form used to train DeltaNet in parallel). The read is S_n q = W U with
    W[j] = decay^(n-1-j) (k_j . q), so solving the transposed, unit upper-triangular
    system with W gives the read without forming the d x d state. It is solved block by
    block from the last write back: a block's coupling to every later write goes through
    one d x m sum (sum over later s of decay^(s-b) k_s x_s^T), so time grows linearly
    with the writes and memory holds no n x n matrix.
    """
    n, m = len(keys), len(queries)
    d, size = keys.shape[1], DELTA_BLOCK
    blocks = -(-n // size)
    # Zero keys after the last write pad the writes to whole blocks: they add nothing.
    narrow = np.zeros((blocks * size, d), dtype=keys.dtype)
    narrow[:n] = keys
    wide = narrow.astype(np.float64)
    weights = np.zeros((m, blocks * size))
    weights[:, :n] = (queries @ keys.T).astype(np.float64)
    if decay != 1.0:
        weights[:, :n] *= decay ** np.arange(n - 1, -1, -1, dtype=np.float64)  # decay^(n-1-j)
    stacked = wide.reshape(blocks, size, d)
    # [t, s] = k_t . k_s (used for s > t), in the keys' own type as every similarity is
    grams = narrow.reshape(blocks, size, d) @ narrow.reshape(blocks, size, d).transpose(0, 2, 1)
    coupling = grams.astype(np.float64)
    if decay != 1.0:
        coupling *= _decay_gaps(size, decay)
    inverses = unit_upper_inverses(beta * coupling)  # every block's system I + beta M^T at once
    # Without decay every factor below is 1 and is left out (multiplying by 1 changes nothing).
    steps = np.arange(size)
    to_end = beta if decay == 1.0 else beta * (decay ** (size - steps))[:, None]  # beta decay^(end - t)
    # decay^(s - start) k_s
    from_start = wide if decay == 1.0 else wide * np.tile(decay**steps, blocks)[:, None]
    mixed = np.empty((blocks * size, m))
    later = np.zeros((d, m))
    for block in range(blocks - 1, -1, -1):
        rows = slice(block * size, (block + 1) * size)
        # what the writes after this block add to each row: decay^(end - t) k_t . later
        solved = inverses[block] @ (weights[:, rows].T - to_end * (stacked[block] @ later))
        mixed[rows] = solved
        if decay != 1.0:
            later *= decay**size
        later += from_start[rows].T @ solved
    return beta * mixed[:n].T



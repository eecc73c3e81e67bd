"""The memories' update rules on small hand-checked cases, and the codebooks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qmkar.providers import sim_memory as sm
from qmkar.providers.sim_delta import unit_upper_inverses
from qmkar.providers.sim_memory import KeyMix, MemoryOptions

E = np.eye(4)  # orthonormal keys e0..e3
A, B, C = np.array([1.0, 0, 0]), np.array([0, 1.0, 0]), np.array([0, 0, 1.0])


def state(memory: str, writes: list[tuple[np.ndarray, np.ndarray]], **options) -> np.ndarray:
    keys = np.array([k for k, _ in writes])
    values = np.array([v for _, v in writes])
    return sm.recurrent_state(memory, keys, values, MemoryOptions(**options))


def parallel(memory: str, writes, queries: np.ndarray, **options) -> np.ndarray:
    keys = np.array([k for k, _ in writes])
    values = np.array([v for _, v in writes])
    return sm.read(memory, [keys], [queries], values, MemoryOptions(**options))


def test_linear_attention_adds_every_value_written_under_a_key():
    writes = [(E[0], A), (E[1], B), (E[0], C)]
    s = state("linear", writes)
    np.testing.assert_allclose(s @ E[0], A + C)
    np.testing.assert_allclose(s @ E[1], B)
    np.testing.assert_allclose(parallel("linear", writes, E[:2]), [A + C, B])


def test_gla_decays_older_writes():
    writes = [(E[0], A), (E[0], B)]
    np.testing.assert_allclose(state("gla", writes, decay=0.5) @ E[0], 0.5 * A + B)
    np.testing.assert_allclose(parallel("gla", writes, E[:1], decay=0.5), [0.5 * A + B])


def test_delta_rule_with_beta_one_on_orthonormal_keys_holds_exactly_the_last_value():
    writes = [(E[0], A), (E[1], B), (E[0], C)]
    s = state("delta", writes, beta=1.0)
    np.testing.assert_allclose(s @ E[0], C, atol=1e-12)  # A was overwritten, not added to
    np.testing.assert_allclose(s @ E[1], B, atol=1e-12)
    np.testing.assert_allclose(s @ E[2], 0 * A, atol=1e-12)
    np.testing.assert_allclose(parallel("delta", writes, E[:3], beta=1.0), [C, B, 0 * A], atol=1e-12)


def test_delta_rule_with_smaller_beta_moves_part_way_to_the_new_value():
    # first write: 0.5 A; second: 0.5 A + 0.5 (A - 0.5 A) = 0.75 A
    writes = [(E[0], A), (E[0], A)]
    np.testing.assert_allclose(state("delta", writes, beta=0.5) @ E[0], 0.75 * A)
    np.testing.assert_allclose(parallel("delta", writes, E[:1], beta=0.5), [0.75 * A])


def test_gated_delta_decays_then_corrects():
    # write 1: A e0^T. write 2 (key e1): decay to 0.5 A e0^T, then add B e1^T.
    writes = [(E[0], A), (E[1], B)]
    s = state("gated-delta", writes, beta=1.0, decay=0.5)
    np.testing.assert_allclose(s @ E[0], 0.5 * A)
    np.testing.assert_allclose(s @ E[1], B)
    # write 3 (key e0 again): the decayed 0.25 A under e0 is replaced by C exactly
    s = state("gated-delta", writes + [(E[0], C)], beta=1.0, decay=0.5)
    np.testing.assert_allclose(s @ E[0], C, atol=1e-12)


def test_softmax_weights_by_exponentiated_similarity():
    writes = [(E[0], A), (E[1], B)]
    out = parallel("softmax", writes, E[:1], temperature=0.5)[0]
    w = math.exp(2) / (math.exp(2) + 1)  # logits 1/0.5 and 0/0.5
    np.testing.assert_allclose(out, w * A + (1 - w) * B)


def test_window_sees_only_the_last_w_pairs():
    writes = [(E[0], A), (E[1], B), (E[0], C)]
    out = parallel("window", writes, E[:2], temperature=0.01, window=2)
    np.testing.assert_allclose(out[0], C, atol=1e-12)  # A fell out of the window
    np.testing.assert_allclose(out[1], B, atol=1e-12)


def test_hybrid_adds_its_linear_layers_to_its_softmax_layer():
    rng = np.random.default_rng(3)
    layers = [sm._unit_rows(rng.standard_normal((6, 8))) for _ in range(3)]
    queries = [k[:2] for k in layers]
    values = rng.standard_normal((6, 5))
    opts = MemoryOptions(temperature=0.3, layers=2)
    expected = sm.read_softmax(layers[0], values, queries[0], 0.3) + sum(
        sm.read_linear(layers[i], values, queries[i]) for i in (1, 2)
    )
    np.testing.assert_allclose(sm.read("hybrid", layers, queries, values, opts), expected)
    no_linear = MemoryOptions(temperature=0.3, layers=0)
    np.testing.assert_allclose(
        sm.read("hybrid", layers, queries, values, no_linear),
        sm.read("softmax", layers, queries, values, no_linear),
    )


@pytest.mark.parametrize(
    "memory,options",
    [
        ("linear", {}),
        ("gla", {"decay": 0.9}),
        ("delta", {"beta": 1.0}),
        ("delta", {"beta": 0.3}),
        ("gated-delta", {"beta": 0.8, "decay": 0.95}),
    ],
)
@pytest.mark.parametrize("pairs,queries", [(60, 3), (150, 3), (150, 20)])
def test_parallel_read_equals_writing_one_pair_at_a_time(memory, options, pairs, queries):
    # More pairs than dimensions; the delta rules solve 64 writes at a time (so 150 is two
    # full blocks and a part), and read more queries than dimensions through the state.
    rng = np.random.default_rng(7)
    keys = sm._unit_rows(rng.standard_normal((pairs, 12)))
    values = rng.standard_normal((pairs, 5))
    queries = sm._unit_rows(rng.standard_normal((queries, 12)))
    s = sm.recurrent_state(memory, keys, values, MemoryOptions(**options))
    np.testing.assert_allclose(
        sm.read(memory, [keys], [queries], values, MemoryOptions(**options)), (s @ queries.T).T,
        atol=1e-9,
    )


def test_the_delta_rules_block_inverses_are_the_inverses():
    rng = np.random.default_rng(3)
    blocks = np.eye(64) + np.triu(rng.standard_normal((5, 64, 64)) / 8, 1)
    np.testing.assert_allclose(unit_upper_inverses(blocks), np.linalg.inv(blocks), atol=1e-12)
    # only the strict upper triangle is read
    np.testing.assert_array_equal(unit_upper_inverses(blocks + np.tril(blocks)),
                                  unit_upper_inverses(blocks))


def test_decode_keeps_candidates_above_the_threshold_times_the_best():
    candidates = np.eye(5, dtype=np.float32)  # values 100..104, orthonormal
    readout = np.array([0.2, 1.0, 0.6, 0.49, -1.0])
    decoded = sm.decode(readout, candidates, 100, 0.5)
    assert decoded.values == [101, 102]
    assert decoded.best == pytest.approx(1.0)
    assert sm.decode(-np.ones(5), candidates, 100, 0.5).values == []


def test_numerically_close_keys_and_keys_sharing_digits_are_similar():
    keys = sm.key_table(0, 512, KeyMix(near=0.2, digits=0.2), 300)

    def sim(a: int, b: int) -> float:
        return float(keys[a] @ keys[b])

    neighbours = np.mean([sim(k, k + 1) for k in range(100, 290)])
    one_digit = np.mean([sim(k, k + 10) for k in range(100, 190)])  # same units and hundreds
    unrelated = np.mean([sim(a, b) for a in range(111, 120) for b in range(222, 230)
                         if not set(str(a)) & set(str(b))])
    assert neighbours > one_digit > unrelated + 0.05
    assert abs(unrelated) < 0.05
    flat = sm.key_table(0, 512, KeyMix(near=0.0, digits=0.0), 300)
    assert abs(np.mean([float(flat[k] @ flat[k + 1]) for k in range(100, 290)])) < 0.05


def test_codebooks_are_deterministic_and_do_not_depend_on_table_size():
    mix = KeyMix()
    small = sm.key_table(5, 64, mix, 300)
    large = sm.key_table(5, 64, mix, 5000)
    np.testing.assert_array_equal(small[:301], large[:301])
    assert not np.allclose(sm.key_table(6, 64, mix, 300)[:301], small[:301])
    narrow = sm.value_table(5, 64, 1000, 1999)
    wide = sm.value_table(5, 64, 0, 99_999)
    np.testing.assert_array_equal(narrow, wide[1000:2000])
    np.testing.assert_allclose(np.linalg.norm(narrow, axis=1), 1.0, rtol=1e-5)


def test_decoding_many_read_outs_at_once_gives_each_the_answer_it_gets_alone():
    table = sm.value_table(0, 256, 0, 4095)
    rng = np.random.default_rng(5)
    # read-outs near chosen values, as a memory's are, each scored against its own span
    readouts = np.array([table[i] + 0.6 * table[i + 7] + 0.01 * rng.standard_normal(256)
                         for i in (100, 900, 2000)])
    spans = [(50, 1200), (800, 1000), (1500, 4000)]
    together = sm.decode_many(readouts, table, spans, [start + 10 for start, _ in spans], 0.5)
    # the product read from the table transposed, as the sim's pages keep it, decides the same
    assert sm.decode_many(readouts, table, spans, [start + 10 for start, _ in spans], 0.5,
                          np.ascontiguousarray(table.T)) == together
    for readout, (start, stop), decoded in zip(readouts, spans, together, strict=True):
        alone = sm.decode(readout, table[start:stop], start + 10, 0.5)
        assert decoded == alone
    assert together[0].values[:2] == [110, 117] and together[1].values[:2] == [910, 917]

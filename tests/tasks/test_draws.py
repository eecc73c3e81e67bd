"""tasks/draws.py makes the draws random.Random's own methods make, and leaves the same state."""

from __future__ import annotations

import random

import pytest

from qmkar.tasks.draws import randints, randints_except, shuffle

SEEDS = [0, 1, 7, "qmkar/0/17", "mqar/3/5"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 100, 500, 1025])
def test_shuffle_swaps_as_random_shuffle_does(seed, size):
    ours, theirs = random.Random(seed), random.Random(seed)
    mine, wanted = list(range(size)), list(range(size))
    shuffle(ours, mine)
    theirs.shuffle(wanted)
    assert mine == wanted
    assert ours.getstate() == theirs.getstate()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("low", "high"),
                         [(0, 0), (5, 6), (100, 300), (1000, 9999), (0, 2**32 - 1), (-3, 2**40)])
def test_randints_draw_as_randint_does(seed, low, high):
    ours, theirs = random.Random(seed), random.Random(seed)
    assert randints(ours, low, high, 300) == [theirs.randint(low, high) for _ in range(300)]
    assert ours.getstate() == theirs.getstate()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("low", "high", "skipped"), [(5, 6, 5), (100, 300, 150), (100, 300, 7), (0, 3, 3)])
def test_randints_except_throw_away_the_skipped_draws(seed, low, high, skipped):
    ours, theirs = random.Random(seed), random.Random(seed)
    wanted: list[int] = []
    while len(wanted) < 200:
        if (drawn := theirs.randint(low, high)) != skipped:
            wanted.append(drawn)
    assert randints_except(ours, low, high, 200, skipped) == wanted
    assert ours.getstate() == theirs.getstate()

"""bench/rounds.py: the order of the timed rounds every bench table uses (common.median_ms_each)."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from rounds import round_orders  # noqa: E402


@pytest.mark.parametrize("names", [["before", "after"], ["ours", "cudnn", "flash"], list("abcd")])
def test_every_function_takes_every_position_equally_often_in_whole_blocks(names):
    n = len(names)
    orders = round_orders(names, 3 * 2 * n, random.Random(0))
    assert len(orders) == 6 * n and all(sorted(order) == sorted(names) for order in orders)
    for position in range(n):
        assert Counter(order[position] for order in orders) == {name: 6 for name in names}


def test_two_functions_alternate_first_place_within_each_block():
    for seed in range(5):
        orders = round_orders(["before", "after"], 8, random.Random(seed))
        firsts = [order[0] for order in orders]
        assert Counter(firsts[:4]) == Counter(firsts[4:]) == {"before": 2, "after": 2}


def test_a_fixed_seed_gives_the_same_orders_and_none_are_asked_for_nothing():
    assert round_orders(list("abc"), 7, random.Random(3)) == round_orders(list("abc"), 7, random.Random(3))
    assert round_orders([], 5, random.Random(0)) == [] and round_orders(list("ab"), 0, random.Random(0)) == []

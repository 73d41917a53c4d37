"""The order in which common.median_ms_each times its functions, round by round (no torch: tested
on the build machine).

Rounds come in blocks of 2n (n functions): one shuffled order, then its n rotations, then the
same n rotations reversed. Within a block every function takes every position equally often
(twice), and for two functions the block is AB, BA, BA, AB. Why: one shuffled order per round
from a fixed seed left the positions unbalanced by the same sequence in every row (with two
functions: more rounds of one order than the other), so a function that gains from going second
(a warmer clock, the other's L2 lines) would gain in every row alike: one candidate cause of
A/A pairs of FP8 plans at 0.979-0.993 (docs/design/sm90-mainloop-plan.md, "Step 2 measured"),
the libraries' load order the other.
"""

from __future__ import annotations

import random


def round_orders(names: list, rounds: int, rng: random.Random) -> list:
    """`rounds` orders of `names`, each a permutation, balanced within each block of 2n rounds."""
    orders: list = []
    n = len(names)
    while n and len(orders) < rounds:
        base = list(names)
        rng.shuffle(base)
        rotations = [base[k:] + base[:k] for k in range(n)]
        orders += rotations + [list(reversed(order)) for order in rotations]
    return orders[:rounds]

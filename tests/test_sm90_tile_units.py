"""sm90/tile_units.h: how a windowed causal SM90 plan pairs a sequence's query tiles (compiled on the host).

The header promises: every tile in exactly one unit of one or two tiles; no unit costs more than
the costliest tile plus the slack; units costliest first; on a causal plan's costs without a
window, tile n-1-j with tile j. Costs here are those schedule.cu's window_units gives a tile: its
keys from the first one its first row sees to its last row's diagonal.
"""

from __future__ import annotations

import pytest

from host_program import run_program

PROGRAM = """
#include <cstdio>
#include <vector>
#include "sm90/tile_units.h"
int main() {
    const std::vector<std::vector<long long>> cases = {%s};
    const long long slacks[] = {%s};
    for (size_t c = 0; c < cases.size(); ++c) {
        const std::vector<int64_t> costs(cases[c].begin(), cases[c].end());
        for (const fas_sm90::TileUnit& unit : fas_sm90::balanced_units(costs, slacks[c])) {
            std::printf("%%zu %%d %%d\\n", c, unit.first, unit.second);
        }
    }
}
"""


def causal_costs(qo: int, kv: int, rows: int, window: int) -> list[int]:
    """Keys tile t of a causal sequence loads: from its first row's first key to its last row's diagonal."""
    costs = []
    for t in range(-(-qo // rows)):
        first = 0 if window < 0 else max(0, t * rows + kv - qo - window)
        last = min(kv, (t + 1) * rows + kv - qo)
        costs.append(max(0, last - first))
    return costs


LAYOUTS = [(qo, kv, rows, window) for rows in (128, 192)
           for qo, kv in ((1, 1), (300, 300), (4096, 4096), (32768, 32768), (512, 4096), (3000, 40000))
           for window in (-1, 0, 100, 128, 4096, 16384)]
CASES = [causal_costs(*layout) for layout in LAYOUTS] + [[], [5], [7, 7, 7], [1, 2, 3, 100]]
SLACKS = [layout[2] for layout in LAYOUTS] + [128, 128, 0, 3]


@pytest.fixture(scope="module")
def units(tmp_path_factory) -> dict[int, list[tuple[int, int]]]:
    """Each case's units, in order; one compile per module."""
    cases = ", ".join("{" + ", ".join(map(str, costs)) + "}" for costs in CASES)
    out = run_program(tmp_path_factory.mktemp("tile_units"), PROGRAM % (cases, ", ".join(map(str, SLACKS))))
    listed: dict[int, list[tuple[int, int]]] = {c: [] for c in range(len(CASES))}
    for line in out.split("\n"):
        if line:
            c, first, second = map(int, line.split())
            listed[c].append((first, second))
    return listed


def unit_cost(costs: list[int], unit: tuple[int, int]) -> int:
    return costs[unit[0]] + (costs[unit[1]] if unit[1] >= 0 else 0)


def test_every_tile_is_in_exactly_one_unit(units):
    for c, costs in enumerate(CASES):
        tiles = [t for unit in units[c] for t in unit if t >= 0]
        assert sorted(tiles) == list(range(len(costs))), c


def test_no_unit_costs_more_than_the_costliest_tile_plus_the_slack(units):
    for c, costs in enumerate(CASES):
        for unit in units[c]:
            assert unit_cost(costs, unit) <= max(costs) + SLACKS[c], (c, unit)


def test_units_come_costliest_tile_first(units):
    for c, costs in enumerate(CASES):
        firsts = [costs[first] for first, _ in units[c]]
        assert firsts == sorted(firsts, reverse=True), c
        assert all(second < 0 or costs[second] <= costs[first] for first, second in units[c]), c


def test_without_a_window_it_is_the_causal_pairing_of_tile_n_minus_1_minus_j_with_tile_j(units):
    """On whole tiles (tile t: (t + 1) x rows keys); a shorter last tile lowers the cap."""
    for c, (qo, kv, rows, window) in enumerate(LAYOUTS):
        if window >= 0 or qo != kv or qo % rows:
            continue
        n = len(CASES[c])
        assert units[c] == [(n - 1 - j, j if n - 1 - j != j else -1) for j in range((n + 1) // 2)], c


def test_under_a_wide_window_units_cost_about_one_full_tile(units):
    """The balance the kernel's fixed dealing needs: at most one unit (the leftover middle of the
    cheaper tiles) below half the costliest tile; before, the first tiles made units of one to
    two tiles' cost."""
    for c, (qo, kv, rows, window) in enumerate(LAYOUTS):
        costs = CASES[c]
        if window < rows or len(costs) < 4:
            continue
        light = [unit for unit in units[c] if unit_cost(costs, unit) * 2 < max(costs)]
        assert len(light) <= 1, (LAYOUTS[c], light)

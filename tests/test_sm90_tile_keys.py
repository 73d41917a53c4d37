"""sm90/tile_keys.h: the keys an SM90 query tile loads (compiled on the host).

The header promises: without a window every key from the sequence's start; under a left window
the keys from the first one the tile's first row sees (queries bottom-right aligned), so no row
of the tile misses a key it sees and no key left of all their windows is loaded; on a paged
cache the start is the page holding that key (counted in page entries), at most a page early.
"""

from __future__ import annotations

import itertools

import pytest

from host_program import run_program

KV_START = 1000  # a sequence's first key row (or page entry) in the batch
ROWS = (64, 128, 192)
SHAPES = [(qo, kv) for qo in (1, 9, 130, 300) for kv in (300, 1029, 4097) if qo <= kv]
WINDOWS = (-1, 0, 1, 50, 128, 4096)
PAGES = (0, 1, 16, 256)  # 0: contiguous keys

PROGRAM = """
#include <cstdio>
#include "sm90/tile_keys.h"
int main() {
    const int cases[][5] = {%s};
    for (const auto& c : cases) {
        const int rows = c[0], qo = c[1], kv = c[2], window = c[3], page = c[4];
        for (int t = 0; t * rows < qo; ++t) {
            const fas_sm90::TileKeys k = fas_sm90::tile_keys(t, rows, %d, kv, qo, window, page);
            std::printf("%%d %%d %%d %%d %%d %%d %%d %%d\\n", rows, qo, kv, window, page, t, k.start, k.length);
        }
    }
}
"""


@pytest.fixture(scope="module")
def tiles(tmp_path_factory) -> list[tuple[int, ...]]:
    """Every tile of the grid: (rows, qo, kv, window, page, t, start, length); one compile per module."""
    grid = list(itertools.product(ROWS, SHAPES, WINDOWS, PAGES))
    rows = ", ".join(f"{{{r}, {qo}, {kv}, {w}, {p}}}" for r, (qo, kv), w, p in grid)
    out = run_program(tmp_path_factory.mktemp("tile_keys"), PROGRAM % (rows, KV_START))
    return [tuple(map(int, line.split())) for line in out.split("\n") if line]


def first_key(row: int, qo: int, kv: int, window: int) -> int:
    """The first key query `row` sees (bottom-right aligned, left window; 0 without one)."""
    return 0 if window < 0 else max(0, row + kv - qo - window)


def test_every_tile_of_every_layout_is_listed(tiles):
    listed = tiles
    expected = sum(-(-qo // r) for r, (qo, _), _, _ in itertools.product(ROWS, SHAPES, WINDOWS, PAGES))
    assert len(listed) == expected


def test_a_tile_starts_at_its_first_rows_first_key_or_the_page_holding_it(tiles):
    for rows, qo, kv, window, page, t, start, length in tiles:
        case = (rows, qo, kv, window, page, t)
        wanted = first_key(t * rows, qo, kv, window)
        skipped = (start - KV_START) * (page if page else 1)
        if page:
            assert skipped % page == 0 and wanted - page < skipped <= wanted, case
        else:
            assert skipped == wanted, case
        assert length == kv - skipped, case  # every key to the sequence's end


def test_no_row_of_a_tile_sees_a_key_before_its_start(tiles):
    for rows, qo, kv, window, page, t, start, _ in tiles:
        skipped = (start - KV_START) * (page if page else 1)
        for row in range(t * rows, min(qo, (t + 1) * rows)):
            assert first_key(row, qo, kv, window) >= skipped, (rows, qo, kv, window, page, t, row)


def test_without_a_window_every_tile_loads_every_key(tiles):
    for rows, qo, kv, window, page, t, start, length in tiles:
        if window < 0:
            assert (start, length) == (KV_START, kv), (rows, qo, kv, page, t)

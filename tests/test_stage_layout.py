"""paged/stage_layout.h: the decode kernels' tile layouts and the rule their fragment addresses use
(compiled on the host).

The header promises, for every layout the kernels instantiate: a lane's ldmatrix offset at row
x + R (R a multiple of 16) and chunk s + c (s even, c in {0, 1}) is its own part L(x, c) with
L(0, s) XORed in and L(R, 0) added, and that the layouts are the swizzles they name (distinct
bank groups for the 8 rows of an ldmatrix phase, and every chunk of a tile at its own offset).
"""

from __future__ import annotations

import pytest

from host_program import run_program

# (name, C++ layout, rows of a tile, 16-byte chunks per row): the stream shape's stages (paged.h:
# stream_keys, its switch included; rows of 64, 128, 256 and 512 bytes), the cp.async shapes' e4m3
# and 16-bit stages and every Q tile (16 rows; 64 keeps the bank test meaningful at 8-row phases).
LAYOUTS = [
    ("stream 64 B x 256", "layout::stream<64, 256>", 256, 4),  # FAS_DECODE_HD64_E4M3_WARP_KEYS=32
    ("stream 64 B x 512", "layout::stream<64, 512>", 512, 4),  # hd64 e4m3: 64 keys a warp
    ("stream 128 B x 256", "layout::stream<128, 256>", 256, 8),
    ("stream 128 B x 128", "layout::stream<128, 128>", 128, 8),
    ("stream 256 B x 128", "layout::stream<256, 128>", 128, 16),
    ("stream 256 B x 64", "layout::stream<256, 64>", 64, 16),
    ("stream 512 B x 64", "layout::stream<512, 64>", 64, 32),
    ("e4m3 rows, hd64", "layout::rows8<64>", 64, 4),
    ("e4m3 rows, hd128", "layout::rows8<128>", 64, 8),
    ("e4m3 rows, hd256", "layout::rows8<256>", 32, 16),
    ("16-bit rows, hd64", "layout::rows16<64>", 64, 8),
    ("16-bit rows, hd128", "layout::rows16<128>", 64, 16),
    ("16-bit rows, hd256", "layout::rows16<256>", 32, 32),
]

PROGRAM = """
#include <cstdio>
#include <set>
#include "paged/stage_layout.h"
using namespace fas_paged::decode;
template <typename L> void check(const char* name, L l, int rows, int chunks) {
    long rule = 0, broken = 0, clashes = 0, reused = 0;
    std::set<unsigned> seen;
    for (int x = 0; x < rows; ++x)
        for (int chunk = 0; chunk < chunks; ++chunk) reused += !seen.insert(l(x, chunk)).second;
    for (int x = 0; x < rows; ++x)
        for (int r = 0; x + r < rows; r += 16)
            for (int c = 0; c < 2 && c < chunks; ++c)
                for (int s = 0; s + c < chunks; s += 2, ++rule) broken += layout::at(l, l(x, c), r, s) != l(x + r, s + c);
    for (int x = 0; x + 8 <= rows; x += 8)  // an ldmatrix phase: 8 rows of one chunk, 16 bytes each
        for (int chunk = 0; chunk < chunks; ++chunk) {
            std::set<unsigned> groups;
            for (int i = 0; i < 8; ++i) groups.insert(l(x + i, chunk) / 16 % 8);
            clashes += groups.size() != 8;
        }
    std::printf("%s|%ld|%ld|%ld|%ld\\n", name, rule, broken, clashes, reused);
}
int main() {
@CALLS@
}
"""


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict:
    """{layout name: (cases of the rule, cases broken, ldmatrix phases with a bank clash, offsets reused)}."""
    calls = "\n".join(f'    check("{n}", [](int r, int c) {{ return {f}(r, c); }}, {rows}, {chunks});'
                      for n, f, rows, chunks in LAYOUTS)
    lines = run_program(tmp_path_factory.mktemp("stage_layout"), PROGRAM.replace("@CALLS@", calls)).splitlines()
    return {name: tuple(int(v) for v in rest) for name, *rest in (line.split("|") for line in lines)}


def test_every_layout_the_kernels_use_is_checked(checked):
    assert sorted(checked) == sorted(name for name, *_ in LAYOUTS)


@pytest.mark.parametrize("name", [name for name, *_ in LAYOUTS])
def test_a_lanes_offset_is_its_own_part_xor_the_step_plus_the_block(checked, name):
    cases, broken, _, _ = checked[name]
    assert cases > 0 and broken == 0, f"{name}: {broken} of {cases} offsets differ from layout::at's"


@pytest.mark.parametrize("name", [name for name, *_ in LAYOUTS])
def test_layouts_give_each_chunk_its_own_offset_and_each_phase_eight_bank_groups(checked, name):
    _, _, clashes, reused = checked[name]
    assert (clashes, reused) == (0, 0)

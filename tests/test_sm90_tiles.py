"""sm90/tiles.h: the tile table the planner and the launchers read (compiled on the host).

The header promises: a softcap kernel takes its plain kernel's shape except the 16-bit head dim 256
non-causal one (80 keys a stage instead of 64); query rows never depend on the score transform (the
planner reads them without it); paged and FP8 kernels ignore the softcap flag; a paged kernel's
keys a stage suit its page gather (one producer thread a key, at most 128, a multiple of
1024 / head dim) and its stages fit shared memory beside Q.
"""

from __future__ import annotations

from host_program import run_program

PROGRAM = """
#include <cstdio>
#include <initializer_list>
#include "sm90/tiles.h"
int main() {
    for (int fp8 = 0; fp8 < 2; ++fp8)
        for (int hd : {64, 96, 128, 192, 256})
            for (int causal = 0; causal < 2; ++causal)
                for (int paged = 0; paged < 2; ++paged)
                    for (int softcap = 0; softcap < 2; ++softcap) {
                        const auto t = fas_sm90::tile_shape(fp8, hd, causal, paged, softcap);
                        std::printf("%d %d %d %d %d %d %d %d\\n", fp8, hd, causal, paged, softcap, t.q_rows, t.kv_rows,
                                    t.stages);
                    }
}
"""


def tile_table(tmp_path) -> dict:
    table = {}
    for line in run_program(tmp_path, PROGRAM).split("\n"):
        if line:
            fp8, hd, causal, paged, softcap, q, kv, stages = map(int, line.split())
            table[(fp8, hd, causal, paged, softcap)] = (q, kv, stages)
    return table


def test_softcap_changes_only_the_16_bit_hd256_non_causal_tile_and_never_the_query_rows(tmp_path):
    table = tile_table(tmp_path)
    assert len(table) == 2 * 5 * 2 * 2 * 2
    for (fp8, hd, causal, paged, softcap), shape in table.items():
        if not softcap:
            continue
        plain = table[(fp8, hd, causal, paged, 0)]
        assert shape[0] == plain[0], (fp8, hd, causal, paged)
        if (fp8, hd, causal, paged) == (0, 256, 0, 0):
            assert plain == (128, 64, 2) and shape == (128, 80, 2)
        else:
            assert shape == plain, (fp8, hd, causal, paged)


def test_paged_tiles_suit_the_page_gather_and_fit_shared_memory(tmp_path):
    table = tile_table(tmp_path)
    for head_dim in (64, 128, 256):  # the paged kernels' head dims (16-bit)
        q_rows, kv_rows, stages = table[(0, head_dim, 1, 1, 0)]
        assert kv_rows <= 128 and kv_rows % (1024 // head_dim) == 0, (head_dim, kv_rows)
        shared = 2 * head_dim * (q_rows + stages * 2 * kv_rows)  # bytes of Q and of each stage's K and V
        assert shared <= 227 * 1024, (head_dim, q_rows, kv_rows, stages)
    assert table[(0, 256, 1, 1, 0)] == (128, 64, 2)

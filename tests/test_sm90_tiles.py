"""sm90/tiles.h: the FP8 two-score-tile switch (compiled on the host).

The header promises: without FAS_SM90_FP8_TWO_S no kernel keeps a second score tile; with it FP8
head dims 128 (128-key tiles of three stages) and 256 (64-key tiles of two) do, and every other
tile shape stays as it was. The shapes it picks must fit a block's shared memory and the
consumers' registers.
"""

from __future__ import annotations

from pathlib import Path

from host_program import run_program

HEAD_DIMS = (64, 96, 128, 192, 256)

PROGRAM = """
#include <cstdio>
#include <initializer_list>
#include "sm90/tiles.h"
int main() {
    for (int fp8 = 0; fp8 < 2; ++fp8)
        for (int head_dim : {%s})
            for (int causal = 0; causal < 2; ++causal) {
                const auto t = fas_sm90::tile_shape(fp8, head_dim, causal);
                std::printf("%%d %%d %%d %%d %%d %%d %%d\\n", fp8, head_dim, causal, t.q_rows, t.kv_rows, t.stages,
                            fp8 ? fas_sm90::fp8_two_score_tiles(head_dim) : 0);
            }
}
"""


def tiles(tmp_path: Path, *defines: str) -> dict:
    """{(fp8, head_dim, causal): (q_rows, kv_rows, stages, two score tiles)}."""
    out = run_program(tmp_path, PROGRAM % ", ".join(map(str, HEAD_DIMS)), *defines)
    table = {}
    for line in filter(None, out.split("\n")):
        fp8, head_dim, causal, q_rows, kv_rows, stages, two = map(int, line.split())
        table[(bool(fp8), head_dim, bool(causal))] = (q_rows, kv_rows, stages, bool(two))
    return table


def test_without_the_flag_no_kernel_keeps_a_second_score_tile(tmp_path):
    assert not any(two for (_, _, _, two) in tiles(tmp_path).values())


def test_the_flag_narrows_only_the_fp8_hd128_and_hd256_tiles(tmp_path):
    before, after = tiles(tmp_path), tiles(tmp_path, "FAS_SM90_FP8_TWO_S=1")
    narrowed = {128: (128, 3), 256: (64, 2)}  # head dim: keys a tile, stages
    for key, shape in after.items():
        fp8, head_dim, _ = key
        if fp8 and head_dim in narrowed:
            assert shape == (before[key][0], *narrowed[head_dim], True), key
            assert shape[1] < before[key][1], key
        else:
            assert shape == before[key], key


def test_the_two_tile_shape_fits_shared_memory_and_the_consumer_registers(tmp_path):
    for (fp8, head_dim, _), (q_rows, kv_rows, stages, two) in tiles(tmp_path, "FAS_SM90_FP8_TWO_S=1").items():
        if not two:
            continue
        # Q, then K, V and V^T (e4m3) per stage, and O (16-bit) in its own bytes.
        smem = q_rows * head_dim + stages * 3 * kv_rows * head_dim + q_rows * head_dim * 2
        assert smem <= 227 * 1024, (head_dim, smem)
        # A consumer thread of two 64-row warpgroups: two S and O in fp32, P in e4m3, ~30 for the rest.
        per_thread = 2 * kv_rows // 2 + head_dim // 2 + kv_rows // 8
        assert per_thread + 30 <= 240, (head_dim, per_thread)

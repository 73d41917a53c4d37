"""sm90/tiles.h: the two-score-tile switches (compiled on the host).

The header promises: without FAS_SM90_FP8_TWO_S or FAS_SM90_SOFTCAP_TWO_S no kernel keeps a second
score tile and softcap kernels take the plain kernels' tiles; FAS_SM90_FP8_TWO_S narrows FP8 head
dims 128 (128-key tiles of three stages) and 256 (64-key tiles of two), FAS_SM90_SOFTCAP_TWO_S the
16-bit softcap kernels at head dim 128 (96-key tiles of three), and every other tile
shape stays as it was. The shapes they pick must fit a block's shared memory and the consumers'
registers.
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
            for (int causal = 0; causal < 2; ++causal)
                for (int softcap = 0; softcap < 2 - fp8; ++softcap) {
                    const auto t = fas_sm90::tile_shape(fp8, head_dim, causal, false, softcap);
                    std::printf("%%d %%d %%d %%d %%d %%d %%d %%d\\n", fp8, head_dim, causal, softcap, t.q_rows,
                                t.kv_rows, t.stages, fas_sm90::two_score_tiles(fp8, head_dim, softcap));
                }
}
"""


def tiles(tmp_path: Path, *defines: str) -> dict:
    """{(fp8, head_dim, causal, softcap): (q_rows, kv_rows, stages, two score tiles)}."""
    out = run_program(tmp_path, PROGRAM % ", ".join(map(str, HEAD_DIMS)), *defines)
    table = {}
    for line in filter(None, out.split("\n")):
        fp8, head_dim, causal, softcap, q_rows, kv_rows, stages, two = map(int, line.split())
        table[(bool(fp8), head_dim, bool(causal), bool(softcap))] = (q_rows, kv_rows, stages, bool(two))
    return table


def test_without_flags_no_kernel_keeps_a_second_score_tile_and_softcap_shares_the_plain_tiles(tmp_path):
    table = tiles(tmp_path)
    assert not any(two for (_, _, _, two) in table.values())
    for (fp8, head_dim, causal, softcap), shape in table.items():
        if softcap:
            assert shape == table[(fp8, head_dim, causal, False)]


def narrowed_by(flag: str) -> dict:
    """(fp8, head_dim, causal, softcap) -> (keys a tile, stages) where `flag` narrows the tile."""
    if flag == "FAS_SM90_FP8_TWO_S=1":
        return {(True, d, c, False): shape for d, shape in ((128, (128, 3)), (256, (64, 2))) for c in (False, True)}
    return {(False, 128, c, True): (96, 3) for c in (False, True)}


def test_each_flag_narrows_only_its_kernels_tiles(tmp_path):
    before = tiles(tmp_path)
    for flag in ("FAS_SM90_FP8_TWO_S=1", "FAS_SM90_SOFTCAP_TWO_S=1"):
        narrowed = narrowed_by(flag)
        for key, shape in tiles(tmp_path, flag).items():
            if key in narrowed:
                assert shape == (before[key][0], *narrowed[key], True), (flag, key)
                assert shape[1] < before[key][1], (flag, key)
            else:
                assert shape == before[key], (flag, key)


def test_the_two_tile_shapes_fit_shared_memory_and_the_consumer_registers(tmp_path):
    table = tiles(tmp_path, "FAS_SM90_FP8_TWO_S=1", "FAS_SM90_SOFTCAP_TWO_S=1")
    for (fp8, head_dim, _, _), (q_rows, kv_rows, stages, two) in table.items():
        if not two:
            continue
        # Q, then per stage K and V (and e4m3 V^T), and O (16-bit) in its own bytes.
        size = 1 if fp8 else 2
        smem = q_rows * head_dim * size + stages * (3 if fp8 else 2) * kv_rows * head_dim * size
        smem += q_rows * head_dim * 2
        assert smem <= 227 * 1024, (fp8, head_dim, smem)
        # A consumer thread of two 64-row warpgroups: two S and O in fp32, P in the input type, ~30 for the rest.
        per_thread = 2 * kv_rows // 2 + head_dim // 2 + kv_rows * size // 8
        assert per_thread + 30 <= 240, (fp8, head_dim, per_thread)

"""sm90/tiles.h: the tile table the planner and the launchers read (compiled on the host).

The header promises: a softcap kernel takes its plain kernel's shape except the 16-bit head dim 256
non-causal one (80 keys a stage instead of 64); query rows never depend on the score transform (the
planner reads them without it); paged and FP8 kernels ignore the softcap flag; a paged kernel's
keys a stage suit its page gather (one producer thread a key, at most 128, a multiple of
1024 / head dim) and its stages fit shared memory beside Q; a shape of several CTAs an SM has one
consumer warpgroup (64 query rows) and fits its share of the SM's shared memory.
"""

from __future__ import annotations

from host_program import run_program

KINDS = ("varlen", "softcap", "packed", "paged")  # fas_sm90::TileFor, in order

PROGRAM = """
#include <cstdio>
#include <initializer_list>
#include "sm90/tiles.h"
int main() {
    using fas_sm90::TileFor;
    for (int fp8 = 0; fp8 < 2; ++fp8)
        for (int hd : {64, 96, 128, 192, 256})
            for (int causal = 0; causal < 2; ++causal)
                for (TileFor kind : {TileFor::kVarlen, TileFor::kSoftcap, TileFor::kPacked, TileFor::kPaged}) {
                    const auto t = fas_sm90::tile_shape(fp8, hd, causal, kind);
                    std::printf("%d %d %d %d %d %d %d %d\\n", fp8, hd, causal, static_cast<int>(kind), t.q_rows,
                                t.kv_rows, t.stages, t.ctas_per_sm);
                }
}
"""


def tile_table(tmp_path) -> dict:
    """(fp8, head_dim, causal, kind) -> (query rows, kv rows, stages, CTAs an SM)."""
    table = {}
    for line in run_program(tmp_path, PROGRAM).split("\n"):
        if line:
            fp8, hd, causal, kind, q, kv, stages, ctas = map(int, line.split())
            table[(fp8, hd, causal, KINDS[kind])] = (q, kv, stages, ctas)
    return table


def test_softcap_changes_only_the_16_bit_hd256_non_causal_tile_and_never_the_query_rows(tmp_path):
    table = tile_table(tmp_path)
    assert len(table) == 2 * 5 * 2 * len(KINDS)
    for (fp8, hd, causal, kind), shape in table.items():
        if kind != "softcap":
            continue
        plain = table[(fp8, hd, causal, "varlen")]
        assert shape[0] == plain[0], (fp8, hd, causal)
        if (fp8, hd, causal) == (0, 256, 0):
            assert plain == (128, 64, 2, 1) and shape == (128, 80, 2, 1)
        else:
            assert shape == plain, (fp8, hd, causal)


def test_paged_tiles_suit_the_page_gather_and_fit_shared_memory(tmp_path):
    table = tile_table(tmp_path)
    for head_dim in (64, 128, 256):  # the paged kernels' head dims (16-bit)
        q_rows, kv_rows, stages, ctas = table[(0, head_dim, 1, "paged")]
        assert ctas == 1 and kv_rows <= 128 and kv_rows % (1024 // head_dim) == 0, (head_dim, kv_rows)
        shared = 2 * head_dim * (q_rows + stages * 2 * kv_rows)  # bytes of Q and of each stage's K and V
        assert shared <= 227 * 1024, (head_dim, q_rows, kv_rows, stages)
    assert table[(0, 256, 1, "paged")] == (128, 64, 2, 1)


def test_only_the_packed_hd96_kernel_shares_its_sm_and_its_blocks_fit_their_share(tmp_path):
    table = tile_table(tmp_path)
    shared = {key: shape for key, shape in table.items() if shape[3] > 1}
    assert shared == {(0, 96, 0, "packed"): (64, 64, 2, 3)}
    for (fp8, head_dim, causal, kind), (q_rows, kv_rows, stages, ctas) in shared.items():
        assert q_rows == 64  # one consumer warpgroup: the registers of three blocks allow no second
        # Q, the stages' K and V, and O in bytes of its own (16-bit); each block reserves 1 KiB.
        block = 2 * head_dim * (q_rows + stages * 2 * kv_rows + q_rows)
        assert ctas * (block + 1024 + 1024) <= 228 * 1024, (head_dim, block, ctas)
    # Every other packed kernel runs the non-causal varlen kernel's shape.
    for (fp8, head_dim, causal, kind), shape in table.items():
        if kind == "packed" and (fp8, head_dim, causal) != (0, 96, 0):
            assert shape == table[(fp8, head_dim, causal, "varlen")], (fp8, head_dim, causal)

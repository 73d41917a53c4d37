// Tile shapes of the SM90 (FA3-class) kernels: the one table that both the planner (query rows
// per work tile) and the launcher (kernel traits) read, so the two cannot disagree. No CUTLASS
// types: host code includes it.
#ifndef FAS_SM90_TILES_H
#define FAS_SM90_TILES_H

namespace fas_sm90 {

struct TileShape {
    int q_rows;           // query rows per CTA tile (64 per consumer warpgroup)
    int kv_rows;          // keys per K/V pipeline stage
    int stages;           // K/V pipeline depth
    int ctas_per_sm = 1;  // CTAs resident on one SM: registers and shared memory are split that way
};

// Which kernels a shape is for, beside input type, head dim and mask: varlen K/V (plain scores),
// varlen with a softcap, packed short sequences, or a paged cache (softcap or not).
enum class TileFor { kVarlen, kSoftcap, kPacked, kPaged };

// Whether CuTe's GMMA selector has one instruction of width n (a tile's keys per stage in the QK
// GEMM, the head dim in the PV GEMM) without its extended shapes: 8, 16, 32, 64, 96, 128, 192 and
// 256. Other widths (80) it runs as several narrower instructions (n = 80: five of width 16,
// hdim 256 causal 35% slower on an H200) unless the TU defines
// CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED, whose header costs ~40 s of front end on 2 cores; so
// sm90/launch.cuh asserts that a kernel TU defines it exactly where its tile needs it, and
// kernelgen defines it there (kernel_sources.SM90_EXTENDED_GMMA_CAUSAL_HEAD_DIMS).
constexpr bool gmma_width_without_extended_shapes(int n) {
    return n == 8 || n == 16 || n == 32 || n == 64 || n == 96 || n == 128 || n == 192 || n == 256;
}

#ifdef FAS_SM90_TILES_OVERRIDE
// Tuning builds only (bench/tune_tiles.py): another table, same signature.
#include FAS_SM90_TILES_OVERRIDE
#else
// FlashInfer's own choices for these kernels (flashinfer-python 0.7.2.post1) except three shapes
// our H100 tuning chose: hdim 64 causal, hdim 128 non-causal, hdim 256 causal; head dims 96 and
// 192 (which FlashInfer does not build) are ours too (measurements: docs/design/sm90-tiles.md:
// 192-row tiles spill at 96). Shared memory bounds them: Q tile + stages * (K + V [+ V
// transposed, FP8]) tiles within 227 KiB.
//
// Paged KV (cp.async page gather by four producer warps): FlashInfer's choices for its paged SM90
// kernels, except 128 keys per stage at head dim 128 (96 upstream; 2-3% faster on the H100, and
// 3 or 4 stages were not: docs/design/decode-plan.md, "Chunked prefill") and 64 at head dim 256
// (32 upstream: 0.77-0.83 of the time on the H200, softcap and windows alike, though ptxas spills
// 72-80 bytes; 48 keys, 80 or 3 stages of 32 gained less: docs/design/sm90-tiles.md). The gather
// gives each key one thread that looks its page up, so kv_rows is at most 128 and a multiple of
// 1024 / head_dim (static_assert in sm90/paged_launch.cuh).
//
// Softcap (the varlen 16-bit softcap kernels): the plain kernel's shape, except at head dim 256
// non-causal, where 80 keys (the causal kernel's) spread softcap's per-tile work over more keys:
// 0.869 of the 64-key kernel's time on the H200, while plain at 80 keys ran 1.01-1.04
// (docs/design/softcap.md). Query rows never differ, so the
// planner, which reads them without knowing the score transform, agrees with every kernel.
//
// Packed at head dim 96 (the vision tower's windows of at most 64 patches): 64 x 64 tiles, one
// consumer warpgroup and three CTAs an SM. A 64-patch window then computes its own scores, not a
// quarter of a 128 x 128 tile's (H200: 1.29-1.34x the 128 x 128 packed kernel on such windows; the
// varlen kernels lost 3-37% in 64-row tiles: docs/design/sm90-shared-sm.md). The other packed
// kernels take their varlen shape.
constexpr TileShape tile_shape(bool fp8, int head_dim, bool causal, TileFor kind = TileFor::kVarlen) {
    if (kind == TileFor::kPacked && !fp8 && !causal && head_dim == 96) return {64, 64, 2, 3};
    if (kind == TileFor::kPaged) {
        if (head_dim == 64) return {192, 96, 2};
        if (head_dim == 128) return {128, 128, 2};
        return {128, 64, 2};
    }
    if (fp8) {
        if (head_dim == 64) return {192, 128, 4};
        if (head_dim == 96 || head_dim == 128) return {128, 192, 2};
        return {128, 128, 2};  // 192 (with its own O staging: our epilogue) and 256
    }
    if (head_dim == 64) return causal ? TileShape{128, 128, 2} : TileShape{192, 128, 2};
    if (head_dim == 96) return TileShape{128, 128, 2};
    if (head_dim == 128) return TileShape{128, 128, 2};
    if (head_dim == 192) return causal ? TileShape{128, 80, 2} : TileShape{128, 96, 2};
    return causal || kind == TileFor::kSoftcap ? TileShape{128, 80, 2} : TileShape{128, 64, 2};
}
#endif

}  // namespace fas_sm90

#endif  // FAS_SM90_TILES_H

// Tile shapes of the SM90 (FA3-class) kernels: the one table that both the planner (query rows
// per work tile) and the launcher (kernel traits) read, so the two cannot disagree. No CUTLASS
// types: host code includes it.
#ifndef FAS_SM90_TILES_H
#define FAS_SM90_TILES_H

namespace fas_sm90 {

struct TileShape {
    int q_rows;   // query rows per CTA tile (64 per consumer warpgroup)
    int kv_rows;  // keys per K/V pipeline stage
    int stages;   // K/V pipeline depth
};

#ifdef FAS_SM90_TILES_OVERRIDE
// Tuning builds only (bench/tune_tiles.py): another table, same signature.
#include FAS_SM90_TILES_OVERRIDE
#else
// FlashInfer's own choices for these kernels (prefill_sm90.cuh, quantization/prefill_sm90.cuh of
// flashinfer-python 0.7.2.post1) except where our tuning runs measured better (bench/tune_tiles.py,
// H100, docs/bench/sm90-tiles-h100.md): hdim 64 causal 128x128 (FlashInfer 192x128: 0.75-0.94x
// of cuDNN at 1k-4k tokens per sequence, 0.91-1.04x with 128x128), hdim 128 non-causal 128x128
// (FlashInfer 128x192: 8-13% slower at 1k keys per sequence, 1-5% at 4k, no steady difference
// at 8k-16k; 128 divides those lengths, 192 leaves a partly empty last KV tile) and hdim 256
// causal 128x80 (FlashInfer 128x64; +6% at 16k). Shared memory bounds them: Q tile + stages *
// (K + V [+ V transposed, FP8]) tiles within 227 KiB.
constexpr TileShape tile_shape(bool fp8, int head_dim, bool causal) {
    if (fp8) {
        if (head_dim == 64) return {192, 128, 4};
        if (head_dim == 128) return {128, 192, 2};
        return {128, 128, 2};
    }
    if (head_dim == 64) return causal ? TileShape{128, 128, 2} : TileShape{192, 128, 2};
    if (head_dim == 128) return TileShape{128, 128, 2};
    return causal ? TileShape{128, 80, 2} : TileShape{128, 64, 2};
}
#endif

}  // namespace fas_sm90

#endif  // FAS_SM90_TILES_H

// The attention variant of packed SM90 plans (sm90/packed_args.h): FlashInfer's StandardAttention
// math plus a block-diagonal mask, each score kept only where its key lies in the keys its row's
// sequence sees (the plan's per-row table, with causal and left-window bounds folded in). A
// packed plan's work tiles are single query tiles over one key tile, so the mask runs on every
// tile; the bounds are read once per work tile, before the tile's first GEMM.
#ifndef FAS_SM90_SEGMENT_MASK_CUH
#define FAS_SM90_SEGMENT_MASK_CUH

#include <cstdint>

#include <cutlass/cutlass.h>

#include <flashinfer/attention/hopper/attention_updater.cuh>
#include <flashinfer/math.cuh>

#include "sm90/packed_args.h"
#include "sm90/sinks.cuh"

namespace fas_sm90 {

struct SoftmaxScaleAndRowKeys {
    float sm_scale;
    const uint32_t* row_keys;  // packed_row_keys(): [lo, hi) per query row of the batch
    const float* sinks;        // per query head (sm90/sinks.cuh); NULL: none
};

// The plain variant's math (SinkAttention: scale and sinks) plus the block-diagonal mask. A
// consumer thread holds two rows of the score tile (the WGMMA accumulator layout: warpgroup w
// rows 64w..64w+63, its warp k rows 16k..16k+15, lane l rows l/4 and l/4 + 8); their bounds are
// loaded at construction, so the per-score test is a select and one unsigned compare
// (kv_idx - lo < hi - lo).
template <int HeadDim>
struct SegmentMaskAttention : SinkAttention<HeadDim, /*Packed=*/true> {
    uint32_t row0;  // this thread's first row within the tile; the second is row0 + 8
    uint32_t lo0, width0, lo1, width1;

    template <typename MainloopParams, typename BlockCoord>
    __device__ SegmentMaskAttention(const MainloopParams& params, const BlockCoord& block_coord)
        : SinkAttention<HeadDim, /*Packed=*/true>(params, block_coord) {
        const auto [q_tile, qo_head, kv_head, qo_start, kv_start, qo_len, kv_len, batch] = block_coord;
        // Warpgroup 0 is the producer; packed plans list only tile 0 of each work unit.
        const int t = static_cast<int>(threadIdx.x) - cutlass::NumThreadsPerWarpGroup;
        row0 = static_cast<uint32_t>((t / 128) * 64 + (t % 128) / 32 * 16 + (t % 32) / 4);
        const uint32_t* rows = params.additional_params.row_keys + qo_start;
        // Rows past the tile's queries are never stored: they see every key (no empty rows).
        const uint32_t all = pack_row_keys(0, static_cast<uint32_t>(kv_len));
        const uint32_t keys0 = row0 < static_cast<uint32_t>(qo_len) ? __ldg(rows + row0) : all;
        const uint32_t keys1 = row0 + 8 < static_cast<uint32_t>(qo_len) ? __ldg(rows + row0 + 8) : all;
        lo0 = keys0 & 0xffffu;
        width0 = (keys0 >> 16) - lo0;
        lo1 = keys1 & 0xffffu;
        width1 = (keys1 >> 16) - lo1;
    }

    template <typename MainloopParams, typename T>
    __device__ __forceinline__ T LogitsTransform(const MainloopParams&, T logits, uint32_t, uint32_t qo_idx,
                                                 uint32_t kv_idx, uint32_t, uint32_t) const {
        const bool first = qo_idx == row0;
        const uint32_t lo = first ? lo0 : lo1;
        const uint32_t width = first ? width0 : width1;
        return kv_idx - lo < width ? logits : T(-flashinfer::math::inf);
    }
};

}  // namespace fas_sm90

#endif  // FAS_SM90_SEGMENT_MASK_CUH

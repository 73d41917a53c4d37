// Launcher of the packed SM90 kernels (sm90/packed_args.h): FlashInfer's 16-bit varlen kernel,
// non-causal and without the window template, with our attention variant SegmentMaskAttention,
// which masks each score to the keys its row's sequence sees. A packed plan's work tiles are
// single query tiles over one or two key tiles, so the mask runs on every tile it computes; the
// per-row bounds are read once per work tile, before the tile's first GEMM.
//
// Included only by the generated kernel TUs of the sm90_packed_prefill family.
#ifndef FAS_SM90_PACKED_LAUNCH_CUH
#define FAS_SM90_PACKED_LAUNCH_CUH

#include "sm90/launch.cuh"
#include "sm90/packed_args.h"

namespace fas_sm90 {

struct SoftmaxScaleAndRowKeys {
    float sm_scale;
    const uint32_t* row_keys;  // packed_row_keys(): [lo, hi) per query row of the batch
};

// StandardAttention's math plus the block-diagonal mask. A consumer thread holds two rows of
// the score tile (the WGMMA accumulator layout: warpgroup w rows 64w..64w+63, its warp k rows
// 16k..16k+15, lane l rows l/4 and l/4 + 8); their bounds are loaded at construction, so the
// per-score test is a select and one unsigned compare (kv_idx - lo < hi - lo).
struct SegmentMaskAttention {
    float sm_scale_log2;
    float scale_pv = 1.f;  // no V scale in 16-bit kernels
    uint32_t row0;         // this thread's first row within the tile; the second is row0 + 8
    uint32_t lo0, width0, lo1, width1;

    template <typename MainloopParams, typename BlockCoord>
    __device__ SegmentMaskAttention(const MainloopParams& params, const BlockCoord& block_coord) {
        const auto [q_tile, qo_head, kv_head, qo_start, kv_start, qo_len, kv_len, batch] = block_coord;
        sm_scale_log2 = params.additional_params.sm_scale * flashinfer::math::log2e;
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

    template <int NUM_ROWS_PER_THREAD>
    __device__ auto GetAttentionUpdater() {
        return flashinfer::OnlineSoftmax<NUM_ROWS_PER_THREAD, /*WITH_SCALE=*/true>(sm_scale_log2);
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

template <typename Input, int HeadDim, int CtaQ, int CtaKV, int Stages>
struct AssemblyPacked {
    using Additional = SoftmaxScaleAndRowKeys;
    using Traits = flashinfer::AttentionKernelTraits</*USE_TMA_LOAD_KV=*/true, HeadDim, HeadDim, CtaQ, CtaKV, Stages,
                                                     Input, Input, Input, int32_t, SegmentMaskAttention>;
    using Kernel = KernelTraits<Traits, SeparateOStorage<Traits>>;
    using Mainloop = flashinfer::CollectiveMainloop<Additional, Traits, /*CAUSAL=*/false>;
    using Epilogue = Epilogue16<Traits>;
    static void* kernel() {
        return reinterpret_cast<void*>(&flashinfer::PrefillWithKVCacheKernel<Mainloop, Epilogue, Kernel,
                                                                             /*LEFT_SLIDING_WINDOW=*/false,
                                                                             /*CAUSAL=*/false, SerpentineTileScheduler>);
    }
};

// The non-causal 16-bit tile shape of the head dim: a packed unit is one such query tile.
template <typename Input, int HeadDim, int CtaQ = tile_shape(false, HeadDim, false).q_rows,
          int CtaKV = tile_shape(false, HeadDim, false).kv_rows, int Stages = tile_shape(false, HeadDim, false).stages>
cudaError_t run_packed(const RaggedArgs& args, cudaStream_t stream) {
    static_assert(HeadDim % 32 == 0 && HeadDim <= 256, "FlashInfer's SM90 traits take head dims that are multiples of 32");
    static_assert(CtaKV <= 256, "row bounds are 16-bit key indices within one tile");
    if (args.head_dim > HeadDim || args.head_dim % 8 != 0 || args.softcap > 0.f || args.tiles_per_unit != 1) {
        return cudaErrorInvalidValue;
    }
    using Assembly = AssemblyPacked<Input, HeadDim, CtaQ, CtaKV, Stages>;
    const int64_t nnz_qo = args.nnz_qo;
    const int64_t nnz_kv = args.nnz_kv;
    const int d = args.head_dim;
    const typename Assembly::Mainloop::Params mainloop = Assembly::Mainloop::to_underlying_arguments(
        {static_cast<const Input*>(args.q), gmem_layout(nnz_qo, args.num_qo_heads, d, args.q_row_stride),
         static_cast<const Input*>(args.k), gmem_layout(nnz_kv, args.num_kv_heads, d, args.k_row_stride),
         static_cast<const Input*>(args.v), gmem_layout(nnz_kv, args.num_kv_heads, d, args.v_row_stride),
         kNoWindow, SoftmaxScaleAndRowKeys{args.softmax_scale, packed_row_keys(args)}});
    return launch<Assembly>(mainloop, epilogue_params<Assembly, Input>(args), args, stream);
}

}  // namespace fas_sm90

#endif  // FAS_SM90_PACKED_LAUNCH_CUH

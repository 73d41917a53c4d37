// The SM90 prefill kernel over a paged KV cache (chunked prefill): launch.cuh's 16-bit assembly
// with FlashInfer's sparse mainloop. Q, the consumers, our epilogue, shared-memory layout and
// scheduler are those of the varlen kernels. Included only by the build-generated kernel TUs,
// each of which defines one launch_paged_ragged<Dtype, HeadDim, Causal> or
// launch_paged_ragged_softcap<Dtype, HeadDim, Causal> specialization.
#ifndef FAS_SM90_PAGED_LAUNCH_CUH
#define FAS_SM90_PAGED_LAUNCH_CUH

#include "sm90/launch.cuh"

namespace fas_sm90 {

// S: kPlain (sinks allowed) or kSoftcap (a tanh per score, no sinks), as the varlen kernels.
template <typename Input, int HeadDim, bool Causal, Scores S = Scores::kPlain>
cudaError_t run_paged(const RaggedArgs& args, cudaStream_t stream) {
    static_assert(HeadDim == 64 || HeadDim == 128 || HeadDim == 256,
                  "the paged tile table (sm90/tiles.h) has head dims 64, 128 and 256");
    static_assert(S != Scores::kSegments, "packed plans are varlen");
    // A left window as the varlen kernels take it (the plan starts each tile's keys at the page
    // holding its window's first key: sm90/tile_keys.h).
    if (args.head_dim != HeadDim || (args.softcap > 0.f) != (S == Scores::kSoftcap) ||
        (args.sinks != nullptr && S == Scores::kSoftcap) || (args.window_right != 0 && !Causal)) {
        return cudaErrorInvalidValue;
    }
    constexpr TileShape kTile = tile_shape(false, HeadDim, Causal, TileFor::kPaged);
    static_assert(kTile.kv_rows <= 128 && kTile.kv_rows % (1024 / HeadDim) == 0,
                  "the page gather gives each key of a K/V tile one thread of the producer warpgroup");
    using Assembly = Assembly16<Input, Input, HeadDim, Causal, kTile.q_rows, kTile.kv_rows, kTile.stages, true, S>;
    using Mainloop = typename Assembly::Mainloop;
    const auto layout = [](int64_t rows, int heads, int64_t row_stride) {
        return gmem_layout(rows, heads, HeadDim, row_stride);
    };
    // K/V layouts give the loader the row and head strides within a page (their row count is unused).
    const typename Mainloop::Params mainloop = Mainloop::to_underlying_arguments(
        {static_cast<const Input*>(args.q), layout(args.nnz_qo, args.num_qo_heads, args.q_row_stride),
         static_cast<const Input*>(args.k), layout(0, args.num_kv_heads, args.k_row_stride),
         static_cast<const Input*>(args.v), layout(0, args.num_kv_heads, args.v_row_stride), args.page_indices,
         window_left_param(args), args.page_stride, args.page_stride,
         static_cast<uint32_t>(args.page_size), Assembly::additional(args)});
    return launch<Assembly>(mainloop, epilogue_params<Assembly, Input>(args), args, stream);
}

}  // namespace fas_sm90

#endif  // FAS_SM90_PAGED_LAUNCH_CUH

// Heavy half of the SM90 (FA3-class) fp16/bf16 ragged prefill family: FlashInfer's Hopper kernel
// (BatchPrefillWithRaggedKVCacheDispatched, per-head persistent schedule, no sliding window,
// StandardAttention math with our race-free epilogue, sm90/ordered_epilogue.cuh) driven by our
// params. Included only by the build-generated kernel translation units, each of which defines
// one launch_ragged<Dtype, Dtype, HeadDim, Causal> specialization as run_ragged<...>.
#ifndef FAS_SM90_RAGGED_LAUNCH_CUH
#define FAS_SM90_RAGGED_LAUNCH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cutlass/numeric_types.h>

#include <flashinfer/attention/hopper/prefill_sm90.cuh>

#include "sm90/ordered_epilogue.cuh"
#include "sm90/ragged_params.cuh"

namespace fas_sm90 {

template <typename CutlassType, int HeadDim, bool Causal>
cudaError_t run_ragged(const RaggedArgs& args, cudaStream_t stream) {
    static_assert(HeadDim == 64 || HeadDim == 128 || HeadDim == 256,
                  "FlashInfer's SM90 prefill kernel exists for head dims 64, 128 and 256 only");
    using Params = RaggedParams<CutlassType, CutlassType, SoftmaxScaleOnly>;
    Params params = ragged_params<Params>(args, HeadDim);
    params.additional_params.sm_scale = args.softmax_scale;
    constexpr flashinfer::MaskMode kMask = Causal ? flashinfer::MaskMode::kCausal : flashinfer::MaskMode::kNone;
    try {
        return flashinfer::BatchPrefillWithRaggedKVCacheDispatched<
            HeadDim, HeadDim, kMask, /*LEFT_SLIDING_WINDOW=*/false, /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
            OrderedEpilogueAttention, Params>(params, /*enable_pdl=*/false, stream);
    } catch (...) {
        return cudaErrorUnknown;  // host-side failure inside the dispatcher; nothing escapes
    }
}

}  // namespace fas_sm90

#endif  // FAS_SM90_RAGGED_LAUNCH_CUH

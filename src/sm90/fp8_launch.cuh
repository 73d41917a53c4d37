// Heavy half of the SM90 FP8 ragged prefill family: FlashInfer's Hopper FP8 kernel
// (BatchFP8PrefillWithRaggedKVCacheDispatched: e4m3 q/k/v, in-kernel V transpose, P quantized
// to e4m3 for the second GEMM, fp32 descale factors per head, fp16/bf16 output; per-head
// persistent schedule, no sliding window) with our ordered epilogue (sm90/ordered_epilogue.cuh).
// Included only by the build-generated kernel translation units, each of which defines one
// launch_ragged<E4M3, OutputDtype, HeadDim, Causal> specialization as run_ragged_fp8<...>.
#ifndef FAS_SM90_FP8_LAUNCH_CUH
#define FAS_SM90_FP8_LAUNCH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cutlass/numeric_types.h>

#include <flashinfer/attention/hopper/quantization/prefill_sm90.cuh>

#include "sm90/ordered_epilogue.cuh"
#include "sm90/ragged_params.cuh"

namespace fas_sm90 {

template <typename OutputCutlassType, int HeadDim, bool Causal>
cudaError_t run_ragged_fp8(const RaggedArgs& args, cudaStream_t stream) {
    static_assert(HeadDim == 64 || HeadDim == 128 || HeadDim == 256,
                  "FlashInfer's SM90 FP8 prefill kernel exists for head dims 64, 128 and 256 only");
    using Params = RaggedParams<cutlass::float_e4m3_t, OutputCutlassType, Fp8Descales>;
    Params params = ragged_params<Params>(args, HeadDim);
    params.additional_params = {args.softmax_scale, args.q_descale, 1.0f, args.k_descale, 1.0f, args.v_descale, 1.0f};
    constexpr flashinfer::MaskMode kMask = Causal ? flashinfer::MaskMode::kCausal : flashinfer::MaskMode::kNone;
    try {
        return flashinfer::BatchFP8PrefillWithRaggedKVCacheDispatched<
            HeadDim, kMask, /*LEFT_SLIDING_WINDOW=*/false, /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
            OrderedEpilogueFP8Attention, Params>(params, /*enable_pdl=*/false, stream);
    } catch (...) {
        return cudaErrorUnknown;  // host-side failure inside the dispatcher; nothing escapes
    }
}

}  // namespace fas_sm90

#endif  // FAS_SM90_FP8_LAUNCH_CUH

// Heavy half of the SM90 (FA3-class) ragged prefill family: FlashInfer's Hopper kernel
// (BatchPrefillWithRaggedKVCacheDispatched, per-head persistent schedule, no sliding window,
// StandardAttention math, with our race-free epilogue: sm90/ordered_epilogue.cuh) driven by our
// own params struct. Included only by the build-generated kernel translation units, each of
// which defines one launch_ragged<Dtype, HeadDim, Causal> specialization as run_ragged<...>.
#ifndef FAS_SM90_RAGGED_LAUNCH_CUH
#define FAS_SM90_RAGGED_LAUNCH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cutlass/numeric_types.h>

#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>

#include "sm90/ordered_epilogue.cuh"

#include "sm90/ragged_args.h"

namespace fas_sm90 {

// Exactly the members that BatchPrefillWithRaggedKVCacheKernelTraitsDispatched and the
// StandardAttention variant read. Members probed with DEFINE_HAS_MEMBER and left out here
// (v scale, multi-item scoring) take the kernel's defaults (1, nullptr / 0).
template <typename Element>
struct RaggedParams {
    using DTypeQ = Element;
    using DTypeKV = Element;
    using DTypeO = Element;
    using IdType = int32_t;

    struct AdditionalParams {
        float sm_scale;
    } additional_params;

    DTypeQ* q_ptr;
    DTypeKV* k_ptr;
    DTypeKV* v_ptr;
    DTypeO* o_ptr;
    float* lse_ptr;

    IdType* qo_tile_indices;
    IdType* qo_indptr;
    IdType* kv_indptr;
    IdType* qo_lens;
    IdType* kv_lens;
    IdType* head_indices;
    IdType* work_indptr;
    IdType* batch_indices;

    int64_t q_stride_n, q_stride_h;
    int64_t k_stride_n, k_stride_h;
    int64_t v_stride_n, v_stride_h;
    int64_t o_stride_n, o_stride_h;
    int64_t nnz_qo;
    int64_t nnz_kv;

    int num_qo_heads;
    int num_kv_heads;
    int window_left;  // read only with LEFT_SLIDING_WINDOW; -1
};

template <typename CutlassType, int HeadDim, bool Causal>
cudaError_t run_ragged(const RaggedArgs& args, cudaStream_t stream) {
    static_assert(HeadDim == 64 || HeadDim == 128 || HeadDim == 256,
                  "FlashInfer's SM90 prefill kernel exists for head dims 64, 128 and 256 only");
    using Params = RaggedParams<CutlassType>;
    Params params{};
    params.additional_params.sm_scale = args.softmax_scale;
    params.q_ptr = static_cast<CutlassType*>(const_cast<void*>(args.q));
    params.k_ptr = static_cast<CutlassType*>(const_cast<void*>(args.k));
    params.v_ptr = static_cast<CutlassType*>(const_cast<void*>(args.v));
    params.o_ptr = static_cast<CutlassType*>(args.out);
    params.lse_ptr = args.lse;
    params.qo_tile_indices = const_cast<int32_t*>(args.qo_tile_indices);
    params.qo_indptr = const_cast<int32_t*>(args.qo_indptr);
    params.kv_indptr = const_cast<int32_t*>(args.kv_indptr);
    params.qo_lens = const_cast<int32_t*>(args.qo_lens);
    params.kv_lens = const_cast<int32_t*>(args.kv_lens);
    params.head_indices = const_cast<int32_t*>(args.head_indices);
    params.work_indptr = const_cast<int32_t*>(args.work_indptr);
    params.batch_indices = const_cast<int32_t*>(args.batch_indices);
    params.q_stride_n = args.q_row_stride;
    params.k_stride_n = args.k_row_stride;
    params.v_stride_n = args.v_row_stride;
    params.o_stride_n = args.out_row_stride;
    params.q_stride_h = params.k_stride_h = params.v_stride_h = params.o_stride_h = HeadDim;
    params.nnz_qo = args.nnz_qo;
    params.nnz_kv = args.nnz_kv;
    params.num_qo_heads = args.num_qo_heads;
    params.num_kv_heads = args.num_kv_heads;
    params.window_left = -1;
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

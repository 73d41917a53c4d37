// The params struct that FlashInfer's SM90 ragged prefill dispatchers read, filled from our
// RaggedArgs; shared by the fp16/bf16 (ragged_launch.cuh) and FP8 (fp8_launch.cuh) launchers.
#ifndef FAS_SM90_RAGGED_PARAMS_CUH
#define FAS_SM90_RAGGED_PARAMS_CUH

#include <cstdint>

#include "sm90/ragged_args.h"

namespace fas_sm90 {

// Attention-variant parameters of the 16-bit kernels: only the softmax scale. Members that the
// variants probe with DEFINE_HAS_MEMBER and that are left out (q/k/v scales, multi-item scoring)
// take the kernel's defaults (1, nullptr / 0).
struct SoftmaxScaleOnly {
    float sm_scale;
};

// Of the FP8 kernels: the softmax scale and per-head descale factors (NULL pointer = the scalar).
struct Fp8Descales {
    float sm_scale;
    const float* maybe_scale_q;
    float scale_q_scalar;
    const float* maybe_scale_k;
    float scale_k_scalar;
    const float* maybe_scale_v;
    float scale_v_scalar;
};

// Exactly the members that the ragged dispatchers (BatchPrefillWithRaggedKVCache... and
// BatchFP8PrefillWithRaggedKVCache...KernelTraitsDispatched) and the variants read.
template <typename Input, typename Output, typename Additional>
struct RaggedParams {
    using DTypeQ = Input;
    using DTypeKV = Input;
    using DTypeO = Output;
    using IdType = int32_t;
    using AdditionalParams = Additional;

    AdditionalParams additional_params;

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

// Everything but additional_params, from the launch arguments (heads contiguous in a row).
template <typename Params>
Params ragged_params(const RaggedArgs& args, int64_t head_dim) {
    using Input = typename Params::DTypeQ;
    using Output = typename Params::DTypeO;
    Params params{};
    params.q_ptr = static_cast<Input*>(const_cast<void*>(args.q));
    params.k_ptr = static_cast<Input*>(const_cast<void*>(args.k));
    params.v_ptr = static_cast<Input*>(const_cast<void*>(args.v));
    params.o_ptr = static_cast<Output*>(args.out);
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
    params.q_stride_h = params.k_stride_h = params.v_stride_h = params.o_stride_h = head_dim;
    params.nnz_qo = args.nnz_qo;
    params.nnz_kv = args.nnz_kv;
    params.num_qo_heads = args.num_qo_heads;
    params.num_kv_heads = args.num_kv_heads;
    params.window_left = -1;
    return params;
}

}  // namespace fas_sm90

#endif  // FAS_SM90_RAGGED_PARAMS_CUH

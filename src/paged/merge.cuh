// What every paged kernel TU shares: the element types, the launch with programmatic dependent
// launch, and the merge of a split plan's partial results (FlashInfer's persistent
// variable-length merge of rows with their log2 LSE), launched after the attention kernel.
// Only kernel TUs include this (it pulls in FlashInfer's headers); everything else sees paged.h.
#ifndef FAS_PAGED_MERGE_CUH
#define FAS_PAGED_MERGE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include <flashinfer/attention/cascade.cuh>

#include "paged/paged.h"

namespace fas_paged {

template <int Dtype>
struct Element;
template <>
struct Element<FAS_DTYPE_FP16> {
    using type = half;
};
template <>
struct Element<FAS_DTYPE_BF16> {
    using type = nv_bfloat16;
};

// Launches kernel(args...) with programmatic dependent launch: it may start while the kernel
// before it on the stream drains, and waits (griddepcontrol.wait) before it reads anything that
// kernel could write; what it reads earlier is the plan's own schedule. Saves a launch gap per
// kernel. Every paged launch goes through here.
template <typename Kernel, typename... Args>
cudaError_t launch_overlapped(Kernel kernel, dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                              Args... args) {
    cudaLaunchAttribute overlap{};
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    config.attrs = &overlap;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, args...);
}

// The partial rows are fp32 (both paged kernels write them so: launch.cuh); TOut: the output's.
template <typename TOut, int HeadDim>
struct MergeTraits {
    using TIn = float;
    static constexpr uint32_t kVec = (16 / sizeof(TIn)) > (HeadDim / 32) ? (16 / sizeof(TIn)) : (HeadDim / 32);
    static constexpr uint32_t kBdx = HeadDim / kVec;
    static constexpr uint32_t kBdy = 128 / kBdx;
    static constexpr uint32_t kStages = 4;
    static constexpr size_t kSmem = kStages * kBdy * HeadDim * sizeof(TIn) + 128 * sizeof(float);
    static_assert(kSmem <= 48 * 1024, "the merge launches without a shared-memory opt-in");
    static constexpr auto kernel =
        flashinfer::PersistentVariableLengthMergeStatesKernel<kVec, kBdx, kBdy, kStages, TIn, TOut, int32_t>;
};

// Folds each output row's chunks (a.tmp_v / a.tmp_s at a.merge_indptr) into a.out and a.lse.
template <typename TOut, int HeadDim>
cudaError_t launch_merge(const LaunchArgs& a, cudaStream_t stream) {
    using Traits = MergeTraits<TOut, HeadDim>;
    // One CTA per (row, head) pair at most, a few per SM (the merge is persistent).
    const int64_t pairs = static_cast<int64_t>(a.merge_rows) * a.num_heads_q;
    const int64_t ctas = std::max<int64_t>(1, std::min<int64_t>(pairs, 4LL * a.sm_count));
    const int64_t out_offset = static_cast<int64_t>(a.first_row) * a.num_heads_q;
    const cudaError_t error = launch_overlapped(
        Traits::kernel, dim3(static_cast<unsigned>(ctas)), dim3(Traits::kBdx, Traits::kBdy), Traits::kSmem, stream,
        static_cast<float*>(a.tmp_v), a.tmp_s, const_cast<int32_t*>(a.merge_indptr),
        static_cast<TOut*>(a.out) + out_offset * HeadDim, a.lse == nullptr ? nullptr : a.lse + out_offset,
        static_cast<uint32_t>(a.merge_rows), static_cast<uint32_t*>(nullptr), static_cast<uint32_t>(a.num_heads_q));
    if (error != cudaSuccess) return error;
    return cudaGetLastError();
}

}  // namespace fas_paged

#endif  // FAS_PAGED_MERGE_CUH

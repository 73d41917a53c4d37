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

#include "paged/fold.cuh"
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
// before it on the stream drains, and waits (griddepcontrol.wait) before it reads or writes
// anything that kernel could touch; what it reads earlier is the plan's own schedule. Saves a
// launch gap per kernel. Every paged launch goes through here.
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

// The decode kernel's merge: a CTA per (row, head) of out's rows from first_row on, folding the
// row's chunks (partial rows merge_indptr[r] .. merge_indptr[r + 1] - 1, their fp32 O and log2
// LSE) in fold.cuh's order: warp w holds state w (chunks w, w + 8, ...), its loads of up to 8
// chunks issued together, and the 8 states meet in shared memory. Rows of one chunk were written
// to out by the attention kernel itself (decode_math.cuh's store_chunk) and are skipped, so a
// device-length plan whose update chose no split passes through at the cost of reading
// merge_indptr.
constexpr int kMergeWarps = kFoldStates;
template <typename T, int HeadDim>
__global__ void __launch_bounds__(32 * kMergeWarps) merge_decode_kernel(const __grid_constant__ LaunchArgs a) {
    constexpr int kPerLane = HeadDim / 32;
    constexpr int kAhead = 8;  // chunks a warp loads before folding them
    __shared__ float state[kMergeWarps][2];
    __shared__ float partial[kMergeWarps][HeadDim];
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    // The next kernel (the next layer's attention) may launch once every CTA of this grid has
    // started: it waits for this grid's end before touching out or the partials
    // (launch_overlapped), so its launch hides behind this kernel's wait and run instead of
    // following them (docs/design/device-lengths.md, fifth round).
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    // A device-length plan's unsplit update (every row one chunk, written by the attention kernel).
    if (a.device_ctas != nullptr && a.kv_chunk_size[0] == kUnsplitChunk) return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t pairs = static_cast<int64_t>(a.merge_rows) * a.num_heads_q;
    for (int64_t pair = blockIdx.x; pair < pairs; pair += gridDim.x) {
        const int r = static_cast<int>(pair / a.num_heads_q), head = static_cast<int>(pair % a.num_heads_q);
        const int begin = a.merge_indptr[r], end = a.merge_indptr[r + 1];
        if (end - begin <= 1) continue;  // uniform across the CTA
        float m = -INFINITY, d = 0.f, o[kPerLane] = {};
        for (int first = begin + warp; first < end; first += kAhead * kMergeWarps) {
            float s[kAhead], v[kAhead][kPerLane];
#pragma unroll
            for (int k = 0; k < kAhead; ++k) {
                const int c = first + k * kMergeWarps;
                load_partial<HeadDim>(a, c < end ? c : begin, head, lane, c < end, s[k], v[k]);
            }
#pragma unroll
            for (int k = 0; k < kAhead; ++k) fold_step(m, d, o, s[k], v[k]);
        }
        if (lane == 0) {
            state[warp][0] = m;
            state[warp][1] = d;
        }
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) partial[warp][lane * kPerLane + e] = o[e];
        __syncthreads();
        const auto m_of = [&](int w) { return state[w][0]; };
        const float2 total = fold_total(m_of, [&](int w) { return state[w][1]; });
        const float inverse = fold_inverse(total.y);
        const int64_t row = static_cast<int64_t>(a.first_row) + r;
        T* out = static_cast<T*>(a.out) + (row * a.num_heads_q + head) * HeadDim;
        for (int e = threadIdx.x; e < HeadDim; e += blockDim.x) {
            out[e] = static_cast<T>(__fmul_rn(fold_value(total.x, m_of, [&](int w) { return partial[w][e]; }), inverse));
        }
        if (a.lse != nullptr && threadIdx.x == 0) a.lse[row * a.num_heads_q + head] = fold_lse(total.x, total.y);
        __syncthreads();  // the next pair reuses state and partial
    }
}

template <typename T, int HeadDim>
cudaError_t launch_merge_decode(const LaunchArgs& a, cudaStream_t stream) {
    static_assert(HeadDim % 32 == 0, "a warp's lanes split the head dim evenly");
    const int64_t pairs = static_cast<int64_t>(a.merge_rows) * a.num_heads_q;
    // Eight CTAs per SM at most; two for a device-length plan (one that does not fold), which
    // launches the merge in every layer, its CTAs only starting and returning after an unsplit
    // update (8 per SM cost the smallest layers 1-2 us; 2 per SM cost host plans' many-row merges
    // as much: 64 x 4k 8/1).
    const int64_t per_sm = a.device_ctas != nullptr ? 2 : 8;
    const int64_t ctas = std::max<int64_t>(1, std::min<int64_t>(pairs, per_sm * a.sm_count));
    const cudaError_t error = launch_overlapped(merge_decode_kernel<T, HeadDim>, dim3(static_cast<unsigned>(ctas)),
                                                dim3(32 * kMergeWarps), 0, stream, a);
    if (error != cudaSuccess) return error;
    return cudaGetLastError();
}

}  // namespace fas_paged

#endif  // FAS_PAGED_MERGE_CUH

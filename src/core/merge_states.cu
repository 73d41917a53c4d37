// The merge of partial attentions by their LSE (core/merge_states.h): one thread per 16 bytes
// of an output row; each weighs the row's partials itself (a few LSE loads, L1 hits after the
// row's first thread), so that no thread waits on another. Memory-bound: it reads each partial
// once and writes out once.
#include "core/merge_states.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace fas {

namespace {

constexpr int kChunk = 8;  // elements per thread: 16 bytes of a 16-bit row

// A 16-bit element's pair type and its float conversions.
template <typename T>
struct Pair;
template <>
struct Pair<half> {
    using type = half2;
    static __device__ __forceinline__ float2 widen(type p) { return __half22float2(p); }
    static __device__ __forceinline__ type narrow(float x, float y) { return __floats2half2_rn(x, y); }
};
template <>
struct Pair<nv_bfloat16> {
    using type = nv_bfloat162;
    static __device__ __forceinline__ float2 widen(type p) { return __bfloat1622float2(p); }
    static __device__ __forceinline__ type narrow(float x, float y) { return __floats2bfloat162_rn(x, y); }
};

// 16 bytes of T to floats, and back.
template <typename T>
__device__ __forceinline__ void widen(const uint4& bits, float (&x)[kChunk]) {
    const auto* pairs = reinterpret_cast<const typename Pair<T>::type*>(&bits);
#pragma unroll
    for (int i = 0; i < kChunk / 2; ++i) {
        const float2 f = Pair<T>::widen(pairs[i]);
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}
template <typename T>
__device__ __forceinline__ uint4 narrow(const float (&x)[kChunk]) {
    uint4 bits;
    auto* pairs = reinterpret_cast<typename Pair<T>::type*>(&bits);
#pragma unroll
    for (int i = 0; i < kChunk / 2; ++i) pairs[i] = Pair<T>::narrow(x[2 * i], x[2 * i + 1]);
    return bits;
}

template <typename T>
__global__ void merge_states_kernel(const MergeLaunch m) {
    const float inf = __int_as_float(0x7f800000);
    const int chunks = m.head_dim / kChunk;
    const int64_t work = static_cast<int64_t>(m.num_tokens) * m.num_heads * chunks;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < work;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t row = i / chunks;
        const int chunk = static_cast<int>(i - row * chunks);
        const int64_t token = row / m.num_heads;
        const int head = static_cast<int>(row - token * m.num_heads);
        const auto lse_of = [&](int s) { return m.lse[s][token * m.lse_token_stride[s] + head * m.lse_head_stride[s]]; };
        // The largest finite LSE; an infinite one saw no key, a NaN poisons the row.
        float top = -inf;
        bool nan = false;
        for (int s = 0; s < m.num_states; ++s) {
            const float l = lse_of(s);
            nan |= l != l;
            if (fabsf(l) != inf) top = fmaxf(top, l);
        }
        float acc[kChunk] = {};
        float merged_lse = inf;  // no partial saw a key: out = 0, lse = +infinity
        if (nan) {
            merged_lse = __int_as_float(0x7fc00000);
#pragma unroll
            for (int e = 0; e < kChunk; ++e) acc[e] = merged_lse;
        } else if (top != -inf) {
            const int64_t at = token * m.token_stride + head * m.head_stride + chunk * kChunk;
            float sum = 0.f;
            for (int s = 0; s < m.num_states; ++s) {
                const float l = lse_of(s);
                if (fabsf(l) == inf) continue;
                const float w = expf(l - top);
                float x[kChunk];
                widen<T>(*reinterpret_cast<const uint4*>(static_cast<const T*>(m.v[s]) + at), x);
#pragma unroll
                for (int e = 0; e < kChunk; ++e) acc[e] = fmaf(w, x[e], acc[e]);
                sum += w;
            }
            const float scale = 1.f / sum;
#pragma unroll
            for (int e = 0; e < kChunk; ++e) acc[e] *= scale;
            merged_lse = top + logf(sum);
        }
        T* const out = static_cast<T*>(m.out) + token * m.out_token_stride + head * m.out_head_stride + chunk * kChunk;
        *reinterpret_cast<uint4*>(out) = narrow<T>(acc);
        if (m.out_lse != nullptr && chunk == 0) {
            m.out_lse[token * m.out_lse_token_stride + head * m.out_lse_head_stride] = merged_lse;
        }
    }
}

}  // namespace

cudaError_t launch_merge_states(const MergeLaunch& merge, int sm_count, cudaStream_t stream) {
    const int64_t work = static_cast<int64_t>(merge.num_tokens) * merge.num_heads * (merge.head_dim / kChunk);
    if (work <= 0) return cudaSuccess;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((work + threads - 1) / threads, 16LL * std::max(sm_count, 1));
    if (merge.dtype == FAS_DTYPE_BF16) {
        merge_states_kernel<nv_bfloat16><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(merge);
    } else {
        merge_states_kernel<half><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(merge);
    }
    return cudaGetLastError();
}

}  // namespace fas

// The KV append kernel (paged/append.h): one warp per new token writes its K and V rows to the
// token's slot, 16 bytes per lane and access (8 elements), K and V loads issued together so that
// each lane has two in flight; e4m3 caches take value / scale (IEEE division, so that the bits
// match a host reference) rounded to e4m3 with saturation, 8 bytes per store. A memory-bound
// copy: how close it gets to the device's copy bandwidth is in bench/bench_append.py.
#include "paged/append.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace fas_paged {

namespace {

constexpr int kWarpsPerBlock = 8;

template <typename T>
__device__ __forceinline__ float to_float(T value);
template <>
__device__ __forceinline__ float to_float(__half value) { return __half2float(value); }
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }

// Eight 16-bit elements divided by scale and rounded to e4m3 (saturating), as 8 bytes.
template <typename T>
__device__ __forceinline__ uint2 quantize(uint4 bits, float scale) {
    const T* values = reinterpret_cast<const T*>(&bits);
    uint2 out;
    uint16_t* pairs = reinterpret_cast<uint16_t*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 pair = make_float2(__fdiv_rn(to_float(values[2 * i]), scale),
                                        __fdiv_rn(to_float(values[2 * i + 1]), scale));
        pairs[i] = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3);
    }
    return out;
}

template <typename T, bool Fp8>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) append_kernel(const AppendLaunch args) {
    const int token = blockIdx.x * kWarpsPerBlock + static_cast<int>(threadIdx.x) / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    if (token >= args.num_tokens) return;
    const int64_t slot = __ldg(args.slots + token);
    if (slot < 0) return;  // padding
    if (slot >= args.num_slots) {
        if (lane == 0 && args.invalid_slots != nullptr) atomicAdd(args.invalid_slots, 1);
        return;
    }
    const int64_t page = slot / args.page_size;
    const int64_t offset = slot - page * args.page_size;
    const uint4* k_src = reinterpret_cast<const uint4*>(static_cast<const T*>(args.k_new) + token * args.k_new_row_stride);
    const uint4* v_src = reinterpret_cast<const uint4*>(static_cast<const T*>(args.v_new) + token * args.v_new_row_stride);
    const int64_t k_dst = page * args.k_page_stride + offset * args.k_row_stride;  // elements
    const int64_t v_dst = page * args.v_page_stride + offset * args.v_row_stride;
    const int vectors = args.num_heads * args.head_dim / 8;  // heads are contiguous within a row
    const int vectors_per_head = args.head_dim / 8;
    for (int j = lane; j < vectors; j += 32) {
        const uint4 k = __ldg(k_src + j);
        const uint4 v = __ldg(v_src + j);
        if constexpr (Fp8) {
            const int head = j / vectors_per_head;
            uint8_t* k_cache = static_cast<uint8_t*>(args.k_cache) + k_dst;
            uint8_t* v_cache = static_cast<uint8_t*>(args.v_cache) + v_dst;
            reinterpret_cast<uint2*>(k_cache)[j] = quantize<T>(k, __ldg(args.k_scale + head));
            reinterpret_cast<uint2*>(v_cache)[j] = quantize<T>(v, __ldg(args.v_scale + head));
        } else {
            reinterpret_cast<uint4*>(static_cast<T*>(args.k_cache) + k_dst)[j] = k;
            reinterpret_cast<uint4*>(static_cast<T*>(args.v_cache) + v_dst)[j] = v;
        }
    }
}

template <typename T>
cudaError_t launch_typed(const AppendLaunch& args, cudaStream_t stream) {
    const dim3 grid((args.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
    if (args.cache_dtype == FAS_DTYPE_E4M3) {
        append_kernel<T, true><<<grid, kWarpsPerBlock * 32, 0, stream>>>(args);
    } else {
        append_kernel<T, false><<<grid, kWarpsPerBlock * 32, 0, stream>>>(args);
    }
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_append(const AppendLaunch& args, cudaStream_t stream) {
    if (args.num_tokens == 0) return cudaSuccess;
    return args.dtype == FAS_DTYPE_BF16 ? launch_typed<__nv_bfloat16>(args, stream) : launch_typed<__half>(args, stream);
}

}  // namespace fas_paged

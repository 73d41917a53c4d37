// Log2 to natural-log conversion of a kernel-written LSE (core/lse.h).
#include "core/lse.h"

#include <algorithm>

namespace fas {

namespace {

constexpr float kLn2 = 0.69314718055994530942f;

__global__ void lse_log2_to_ln_kernel(float* lse, int64_t count) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float value = lse[i];
        lse[i] = value == -__int_as_float(0x7f800000) ? __int_as_float(0x7f800000) : value * kLn2;
    }
}

}  // namespace

cudaError_t convert_lse_log2_to_ln(float* lse, int64_t count, int sm_count, cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((count + threads - 1) / threads, 8LL * std::max(sm_count, 1));
    lse_log2_to_ln_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(lse, count);
    return cudaGetLastError();
}

}  // namespace fas

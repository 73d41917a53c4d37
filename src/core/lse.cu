// The LSE kernels behind core/lse.h: log2 to natural log, token-major to fas_fwd's batch layout.
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

// One thread per output element: writes coalesced, reads strided by `heads` (a few KiB a call).
__global__ void lse_to_batch_kernel(const float* token_major, float* batch_major, int64_t count, int seqlen_q,
                                    int heads) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t s = i % seqlen_q, bh = i / seqlen_q, h = bh % heads, b = bh / heads;
        batch_major[i] = token_major[(b * seqlen_q + s) * heads + h];
    }
}

// Blocks of 256 threads for `count` elements, at most max_blocks (the kernels loop over the rest).
unsigned grid_for(int64_t count, int64_t max_blocks) {
    return static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, max_blocks));
}

}  // namespace

cudaError_t reorder_lse_to_batch(const float* token_major, float* batch_major, int batch, int seqlen_q, int heads,
                                 cudaStream_t stream) {
    const int64_t count = static_cast<int64_t>(batch) * seqlen_q * heads;
    if (count <= 0) return cudaSuccess;
    lse_to_batch_kernel<<<grid_for(count, 1024), 256, 0, stream>>>(token_major, batch_major, count, seqlen_q, heads);
    return cudaGetLastError();
}

cudaError_t convert_lse_log2_to_ln(float* lse, int64_t count, int sm_count, cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    lse_log2_to_ln_kernel<<<grid_for(count, 8LL * std::max(sm_count, 1)), 256, 0, stream>>>(lse, count);
    return cudaGetLastError();
}

}  // namespace fas

// The row copies behind core/rows.h: one 16-byte vector per thread and step.
#include "core/rows.h"

#include <algorithm>

namespace fas {

namespace {

__global__ void replicate_rows_kernel(const uint4* src, int64_t src_stride, int64_t rows, int64_t row_vectors,
                                      int copies, uint4* dst) {
    const int64_t per_copy = rows * row_vectors;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < per_copy;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const uint4 value = src[(i / row_vectors) * src_stride + i % row_vectors];
        for (int c = 0; c < copies; ++c) dst[c * per_copy + i] = value;
    }
}

}  // namespace

cudaError_t replicate_rows(const void* src, int64_t src_stride_bytes, int64_t rows, int64_t row_bytes, int copies,
                           void* dst, int sm_count, cudaStream_t stream) {
    const int64_t vectors = rows * (row_bytes / 16);
    if (vectors <= 0 || copies <= 0) return cudaSuccess;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((vectors + 255) / 256, 4LL * std::max(sm_count, 1)));
    replicate_rows_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint4*>(src), src_stride_bytes / 16, rows,
                                                      row_bytes / 16, copies, static_cast<uint4*>(dst));
    return cudaGetLastError();
}

}  // namespace fas

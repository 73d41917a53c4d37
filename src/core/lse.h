// The kernels of the SM90 and paged families write log2(sum exp2) per row; the API promises the
// natural logarithm, and +infinity for rows that saw no key (FA2's convention).
#ifndef FAS_CORE_LSE_H
#define FAS_CORE_LSE_H

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fas {

// Enqueues the in-place conversion of `count` floats at lse on stream.
cudaError_t convert_lse_log2_to_ln(float* lse, int64_t count, int sm_count, cudaStream_t stream);

}  // namespace fas

#endif  // FAS_CORE_LSE_H

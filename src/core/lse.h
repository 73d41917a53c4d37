// The kernels of the SM90 and paged families write log2(sum exp2) per row; the API promises the
// natural logarithm, and +infinity for rows that saw no key (FA2's convention).
#ifndef FAS_CORE_LSE_H
#define FAS_CORE_LSE_H

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fas {

// Enqueues the in-place conversion of `count` floats at lse on stream.
cudaError_t convert_lse_log2_to_ln(float* lse, int64_t count, int sm_count, cudaStream_t stream);

// Whether fas_fwd's batch-layout LSE [batch, heads, seqlen_q] differs from the token-major one a
// plan writes (and so goes through scratch and reorder_lse_to_batch): asked for, with more than
// one query a sequence (with one the two layouts are the same).
inline bool batch_lse_needs_reorder(const float* softmax_lse, int seqlen_q) {
    return softmax_lse != nullptr && seqlen_q > 1;
}

// Enqueues the copy of a token-major LSE [batch * seqlen_q, heads] (a plan's, over the batch
// layout's offsets) into fas_fwd's batch layout [batch, heads, seqlen_q]; the two must not overlap.
cudaError_t reorder_lse_to_batch(const float* token_major, float* batch_major, int batch, int seqlen_q, int heads,
                                 cudaStream_t stream);

}  // namespace fas

#endif  // FAS_CORE_LSE_H

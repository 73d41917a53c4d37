// The merge of partial attentions by their LSE (fas_merge_states, flash_attn_standalone_merge.h):
// the launch its validation (api/merge.cpp) fills in, every stride resolved.
#ifndef FAS_CORE_MERGE_STATES_H
#define FAS_CORE_MERGE_STATES_H

#include <cuda_runtime_api.h>

#include <cstdint>

#include "flash_attn_standalone.h"

namespace fas {

struct MergeLaunch {
    fas_dtype dtype;
    int num_states, num_tokens, num_heads, head_dim;
    const void* v[FAS_MERGE_MAX_STATES];
    const float* lse[FAS_MERGE_MAX_STATES];
    int64_t token_stride, head_stride;  // of every partial output
    int64_t lse_token_stride[FAS_MERGE_MAX_STATES], lse_head_stride[FAS_MERGE_MAX_STATES];
    void* out;
    int64_t out_token_stride, out_head_stride;
    float* out_lse;  // nullptr: not written
    int64_t out_lse_token_stride, out_lse_head_stride;
};

// Enqueues the merge on stream; rows of num_tokens x num_heads, none if either is 0.
cudaError_t launch_merge_states(const MergeLaunch& merge, int sm_count, cudaStream_t stream);

}  // namespace fas

#endif  // FAS_CORE_MERGE_STATES_H

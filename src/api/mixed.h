// Mixed plans: a paged batch in which some sequences decode (at most kMaxDecodeQueries queries)
// and others are in (chunked) prefill, as continuous-batching schedulers produce it. The decode
// sequences at the batch's start or end become one part planned on the paged family's decode
// kernel (query heads packed into rows, KV split), the rest one part on the family a prefill
// plan would take (SM90 paged where built); a run launches both parts on the caller's stream.
#ifndef FAS_API_MIXED_H
#define FAS_API_MIXED_H

#include "flash_attn_standalone.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>

namespace fas {

struct MixedPart {
    fas_plan* plan = nullptr;
    int first_sequence = 0;
    int sequences = 0;
    int64_t first_page = 0;  // its entries of page_indices start here
};

struct MixedPlan {
    MixedPart decode, prefill;
    // Concurrent parts: the decode part runs on `side`, forked from and joined back into the
    // run's stream with the two events; the lock keeps one run's record/wait pairs together.
    cudaStream_t side = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    std::mutex lock;
    ~MixedPlan();  // destroys the parts (fas_plan_destroy's contract: their runs are complete)
};

// Where a paged batch splits (the first sequence of its second part), or 0 when it does not: a
// run of decode-shaped sequences at the start or at the end (the longer one) with at least one
// sequence of more than kMaxDecodeQueries queries elsewhere. Decode-shaped sequences between
// prefill ones stay in the prefill part.
int mixed_split(const fas_plan_args& args);

// Plans both parts (each an ordinary plan of its sequences; args was validated whole). *out stays
// NULL when mixing does not pay (the decode part would not run on the decode kernel) or a part
// cannot be planned alone.
fas_status create_mixed_plan(const fas_plan_args& args, int split, std::unique_ptr<MixedPlan>* out);
fas_status run_mixed_plan(MixedPlan& plan, const fas_plan_run_args& args);
// fas_plan_destroy_async of both parts; the plan then holds none.
fas_status retire_mixed_plan(MixedPlan* plan, cudaStream_t stream);
// Fills the parts' share of fas_plan_info (family, kernels and work) into *info.
void mixed_plan_info(const MixedPlan& plan, fas_plan_info* info);

}  // namespace fas

#endif  // FAS_API_MIXED_H

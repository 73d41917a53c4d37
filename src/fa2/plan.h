// FA2 plans of the plan API: a varlen layout fixed at fas_plan_create, with the offsets
// uploaded once and an LSE scratch of the plan's own, so that a run allocates nothing.
#ifndef FAS_FA2_PLAN_H
#define FAS_FA2_PLAN_H

#include <memory>

#include "fa2/fa2.h"

namespace fas_fa2 {

struct Plan {
    fas::Layout layout;                    // resolved, varlen, total_q/total_k from the host offsets
    LaunchPlan launch{};
    int32_t* cu_seqlens_device = nullptr;  // [cu_seqlens_q | cu_seqlens_k], batch_size + 1 each
    float* lse_scratch = nullptr;          // [num_heads_q, total_q], written when a run passes no LSE
    size_t device_bytes = 0;

    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan();  // cudaFree: must not overlap the plan's runs
};

// Uploads the host offsets on stream and waits for the upload (the plan owns the copy).
fas_status create_plan(const fas::Layout& layout, const Kernel* kernel, const int32_t* cu_seqlens_q,
                       const int32_t* cu_seqlens_k, cudaStream_t stream, std::unique_ptr<Plan>* out);

fas_status run_plan(const Plan& plan, const void* q, const void* k, const void* v, void* out, float* softmax_lse,
                    cudaStream_t stream);

}  // namespace fas_fa2

#endif  // FAS_FA2_PLAN_H

// What a plan object holds of its family: one interface over the four kinds of plan (FA2, SM90,
// paged, and mixed: two plans of those), so that runs, releases and fas_plan_get_info dispatch
// once, through it, and a new kind of plan adds an implementation, not a branch at each call.
// The implementations (family_plan.cpp) wrap each family's own plan (fa2/plan.h, sm90/sm90.h,
// paged/paged.h, api/mixed.h), which know nothing of this interface.
#ifndef FAS_API_FAMILY_PLAN_H
#define FAS_API_FAMILY_PLAN_H

#include "flash_attn_standalone.h"

#include <cuda_runtime_api.h>

#include <memory>

#include "api/mixed.h"
#include "fa2/plan.h"
#include "paged/paged.h"
#include "sm90/sm90.h"

namespace fas {

class FamilyPlan {
public:
    virtual ~FamilyPlan() = default;
    // One run of the plan with these tensors (validated against the plan's layout already).
    virtual fas_status run(const fas_plan_run_args& args) = 0;
    // Orders the release of the plan's device memory after the work queued on `stream`
    // (fas_plan_destroy_async); the plan is deleted after.
    virtual fas_status retire(cudaStream_t stream) = 0;
    // The family's share of fas_plan_info: device_bytes and the schedule's fields (the plan
    // object fills family, layout and device).
    virtual void fill_info(fas_plan_info* info) const = 0;
    // A device-length plan's schedule for this step's DEVICE lengths (fas_plan_update); every
    // other plan refuses with FAS_ERROR_INVALID_ARGUMENT (this default).
    virtual fas_status update(const int32_t* kv_lengths, cudaStream_t stream);
};

std::unique_ptr<FamilyPlan> family_plan(std::unique_ptr<fas_fa2::Plan> plan);
std::unique_ptr<FamilyPlan> family_plan(std::unique_ptr<fas_sm90::Plan> plan);
std::unique_ptr<FamilyPlan> family_plan(std::unique_ptr<fas_paged::Plan> plan);
std::unique_ptr<FamilyPlan> family_plan(std::unique_ptr<MixedPlan> plan);

}  // namespace fas

#endif  // FAS_API_FAMILY_PLAN_H

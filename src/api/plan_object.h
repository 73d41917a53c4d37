// The plan API's object, struct fas_plan (opaque in the public header): what plan.cpp creates,
// runs and releases, and plan_info.cpp reports.
#ifndef FAS_API_PLAN_OBJECT_H
#define FAS_API_PLAN_OBJECT_H

#include <cstdint>
#include <memory>
#include <string>

#include "api/family_plan.h"
#include "core/layout.h"
#include "flash_attn_standalone.h"

namespace fas {

constexpr uint64_t kPlanMagic = 0x666173506c616e31ull;  // "fasPlan1"
constexpr uint64_t kDeadPlanMagic = 0x64656164506c616eull;

}  // namespace fas

struct fas_plan {
    uint64_t magic = fas::kPlanMagic;
    fas_family family = FAS_FAMILY_FA2;
    int device = 0;
    int kernel_head_dim = 0;
    fas::Layout layout;  // resolved; total_q / total_k from the host offsets
    std::string sm90_unused_reason;
    std::unique_ptr<fas::FamilyPlan> impl;  // the family's plan: every live plan has one

    ~fas_plan() { magic = fas::kDeadPlanMagic; }
};

namespace fas {

// FAS_SUCCESS for a live plan, else FAS_ERROR_INVALID_ARGUMENT with a message.
fas_status check_plan(const fas_plan* plan);
// FAS_SUCCESS when the calling thread's current device is the plan's (`call` names the caller).
fas_status check_plan_device(const fas_plan* plan, const char* call);

}  // namespace fas

#endif  // FAS_API_PLAN_OBJECT_H

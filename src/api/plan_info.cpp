// fas_plan_get_info: what a plan reports of itself (its family, shape and schedule), filled up
// to the caller's struct_size (size-prefixed: older callers get the fields they know).
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "api/plan.h"
#include "api/plan_object.h"
#include "api/registry.h"
#include "core/status.h"

namespace fas {

fas_status plan_info(const fas_plan* plan, fas_plan_info* info) {
    fas_status status = check_plan(plan);
    if (status != FAS_SUCCESS) return status;
    if (info == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "info is NULL; pass a fas_plan_info to fill");
    const size_t first_version = offsetof(fas_plan_info, kv_splits);
    if (info->struct_size < first_version) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("info->struct_size is ", info->struct_size, " but even the first version of fas_plan_info has ",
                           first_version, " bytes; set it to sizeof(fas_plan_info)"));
    }
    const size_t caller_size = std::min(info->struct_size, sizeof(fas_plan_info));
    fas_plan_info filled;
    std::memset(&filled, 0, sizeof(filled));
    filled.struct_size = caller_size;
    filled.family = plan->family;
    filled.family_name = family_name(plan->family);
    filled.kernel_head_dim = plan->kernel_head_dim;
    filled.lse_layout = plan->family == FAS_FAMILY_FA2 ? FAS_LSE_HEAD_MAJOR : FAS_LSE_TOKEN_MAJOR;
    filled.total_q = plan->layout.total_q;
    filled.total_k = plan->layout.total_k;
    filled.device = plan->device;
    filled.sm90_unused_reason = plan->sm90_unused_reason.c_str();
    plan->impl->fill_info(&filled);
    std::memcpy(info, &filled, caller_size);
    return FAS_SUCCESS;
}

}  // namespace fas

// fas_plan_update (DEVICE LENGTHS in flash_attn_standalone_paged.h): the checks of one update of a
// device-length plan; the schedule itself is computed on the device (paged/device_plan.cu).
#include "api/plan.h"

#include <cstddef>

#include "api/plan_object.h"
#include "core/layout.h"
#include "core/status.h"

namespace fas {

fas_status update_plan(fas_plan* plan, const fas_plan_update_args* user_args) {
    fas_status status = check_plan(plan);
    if (status != FAS_SUCCESS) return status;
    fas_plan_update_args args;
    status = read_args_struct(user_args, sizeof(fas_plan_update_args), "fas_plan_update_args",
                              "fas_plan_update_args_init()", &args);
    if (status != FAS_SUCCESS) return status;
    status = check_device_pointer(args.kv_lengths, sizeof(int32_t), "kv_lengths",
                                  "int32 key counts of this step, one per sequence of the plan");
    if (status != FAS_SUCCESS) return status;
    status = check_plan_device(plan, "fas_plan_update");
    if (status != FAS_SUCCESS) return status;
    status = check_no_pending_cuda_error();
    if (status != FAS_SUCCESS) return status;
    return plan->impl->update(args.kv_lengths, args.stream);
}

}  // namespace fas

// The plan API's object (struct fas_plan): a batch layout fixed at creation, served by the SM90
// family where a kernel is built for it and FA2 otherwise; runs take only the tensors.
#ifndef FAS_API_PLAN_H
#define FAS_API_PLAN_H

#include "flash_attn_standalone.h"

namespace fas {

fas_status create_plan(const fas_plan_args* args, fas_plan** plan);
// A plan of one part of a mixed plan (mixed.h): never split again.
fas_status create_plan_part(const fas_plan_args* args, fas_plan** plan);
// A plan on the paged or SM90 family, or *plan = NULL (FAS_SUCCESS) where the plan would be FA2's
// (fwd_route.cpp: fas_fwd's batch-layout requests, which then run FA2 directly).
fas_status create_plan_without_fa2(const fas_plan_args* args, fas_plan** plan);
fas_status run_plan(const fas_plan* plan, const fas_plan_run_args* args);
// fas_plan_update (plan_update.cpp): a device-length plan's schedule for a step's device lengths.
fas_status update_plan(fas_plan* plan, const fas_plan_update_args* args);
fas_status destroy_plan(fas_plan* plan);
fas_status destroy_plan_async(fas_plan* plan, cudaStream_t stream);
fas_status plan_info(const fas_plan* plan, fas_plan_info* info);

}  // namespace fas

#endif  // FAS_API_PLAN_H

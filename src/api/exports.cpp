// The exported C API (src/exports.map): thin wrappers that run each call under guarded(), so
// that no exception crosses the C boundary, and delegate to the file of its concern.
#include "flash_attn_standalone.h"

#include <cstring>

#include "core/device.h"
#include "api/fwd.h"
#include "api/kv_append.h"
#include "api/merge.h"
#include "api/plan.h"
#include "api/registry.h"
#include "core/status.h"

#if !defined(FAS_VERSION_MAJOR) || !defined(FAS_VERSION_MINOR) || !defined(FAS_VERSION_PATCH)
#error "FAS_VERSION_MAJOR, FAS_VERSION_MINOR and FAS_VERSION_PATCH must be defined by the build (-D)"
#endif

#define FAS_STRINGIFY_VALUE(x) #x
#define FAS_STRINGIFY(x) FAS_STRINGIFY_VALUE(x)

namespace {

constexpr const char* kVersionString =
    FAS_STRINGIFY(FAS_VERSION_MAJOR) "." FAS_STRINGIFY(FAS_VERSION_MINOR) "." FAS_STRINGIFY(FAS_VERSION_PATCH);

}  // namespace

extern "C" {

void fas_fwd_args_init(fas_fwd_args* args) { fas::init_args_struct(args); }

void fas_plan_args_init(fas_plan_args* args) { fas::init_args_struct(args); }

void fas_plan_run_args_init(fas_plan_run_args* args) { fas::init_args_struct(args); }

void fas_plan_update_args_init(fas_plan_update_args* args) { fas::init_args_struct(args); }

fas_status fas_plan_update(fas_plan* plan, const fas_plan_update_args* args) {
    return fas::guarded([&] { return fas::update_plan(plan, args); });
}

void fas_kv_append_args_init(fas_kv_append_args* args) { fas::init_args_struct(args); }

fas_status fas_kv_append(const fas_kv_append_args* args) {
    return fas::guarded([&] { return fas::kv_append(args); });
}

void fas_merge_states_args_init(fas_merge_states_args* args) { fas::init_args_struct(args); }

fas_status fas_merge_states(const fas_merge_states_args* args) {
    return fas::guarded([&] { return fas::merge_states(args); });
}

fas_status fas_fwd(const fas_fwd_args* args) {
    return fas::guarded([&] { return fas::run_forward(args); });
}

fas_status fas_fwd_workspace_size(const fas_fwd_args* args, size_t* bytes) {
    return fas::guarded([&] { return fas::forward_workspace_size(args, bytes); });
}

const char* fas_get_last_error(void) { return fas::last_error(); }

void fas_get_version(int* major, int* minor, int* patch) {
    if (major != nullptr) *major = FAS_VERSION_MAJOR;
    if (minor != nullptr) *minor = FAS_VERSION_MINOR;
    if (patch != nullptr) *patch = FAS_VERSION_PATCH;
}

const char* fas_version_string(void) { return kVersionString; }

int fas_num_kernels(void) { return fas::num_kernels(); }

fas_status fas_get_kernel_info(int index, fas_kernel_info* info) {
    return fas::guarded([&] { return fas::kernel_info(index, info); });
}

fas_status fas_query_support(fas_dtype dtype, int head_dim, int causal, int* kernel_head_dim) {
    return fas::guarded([&] { return fas::query_support(dtype, head_dim, causal, kernel_head_dim); });
}

fas_status fas_query_paged_support(fas_dtype dtype, int head_dim, int causal, int max_query_len, int group,
                                   int* query_tile_rows) {
    return fas::guarded(
        [&] { return fas::query_paged_support(dtype, head_dim, causal, max_query_len, group, query_tile_rows); });
}

fas_status fas_query_plan_support(fas_dtype dtype, int head_dim, int causal, fas_family* family,
                                  int* kernel_head_dim) {
    return fas::guarded([&] { return fas::query_plan_support(dtype, head_dim, causal, family, kernel_head_dim); });
}

fas_status fas_check_device(int device) {
    return fas::guarded([&] {
        fas::DeviceProps props{};
        return fas::check_device(device, &props);
    });
}

fas_status fas_plan_create(const fas_plan_args* args, fas_plan** plan) {
    return fas::guarded([&] { return fas::create_plan(args, plan); });
}

fas_status fas_plan_run(const fas_plan* plan, const fas_plan_run_args* args) {
    return fas::guarded([&] { return fas::run_plan(plan, args); });
}

fas_status fas_plan_destroy(fas_plan* plan) {
    return fas::guarded([&] { return fas::destroy_plan(plan); });
}

fas_status fas_plan_destroy_async(fas_plan* plan, cudaStream_t stream) {
    return fas::guarded([&] { return fas::destroy_plan_async(plan, stream); });
}

fas_status fas_plan_get_info(const fas_plan* plan, fas_plan_info* info) {
    return fas::guarded([&] { return fas::plan_info(plan, info); });
}

}  // extern "C"

// Capability queries over every family's kernel list (FA2, SM90, paged, in that order).
#include "api/registry.h"

#include "core/device.h"
#include "core/kv_cache.h"
#include "core/layout.h"
#include "core/status.h"
#include "fa2/fa2.h"
#include "paged/paged.h"
#include "sm90/sm90.h"

namespace fas {

int num_kernels() { return fas_fa2::num_kernels() + fas_sm90::num_kernels() + fas_paged::num_kernels(); }

const char* family_name(fas_family family) {
    switch (family) {
        case FAS_FAMILY_SM90: return "sm90";
        case FAS_FAMILY_PAGED: return "paged";
        case FAS_FAMILY_MIXED: return "mixed";
        default: return "fa2";
    }
}

fas_status kernel_info(int index, fas_kernel_info* info) {
    if (info == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "info is NULL; pass a fas_kernel_info to fill");
    const int count = num_kernels();
    if (index < 0 || index >= count) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("kernel index ", index, " is out of range; valid indices are 0..", count - 1,
                           " (fas_num_kernels() - 1)"));
    }
    if (index < fas_fa2::num_kernels()) {
        const fas_fa2::Kernel& entry = fas_fa2::kernel(index);
        info->dtype = entry.dtype;
        info->head_dim = entry.head_dim;
        info->causal = entry.causal ? 1 : 0;
        info->split_kv = entry.split_kv ? 1 : 0;
        info->family = entry.family;
        info->out_dtype = entry.dtype;
    } else if (index >= fas_fa2::num_kernels() + fas_sm90::num_kernels()) {
        const fas_paged::Kernel& entry = fas_paged::kernel(index - fas_fa2::num_kernels() - fas_sm90::num_kernels());
        info->dtype = entry.dtype;
        info->head_dim = entry.head_dim;
        info->causal = entry.causal ? 1 : 0;
        info->split_kv = 1;  // decode-oriented: splits long KVs across CTAs
        info->family = entry.family;
        info->out_dtype = entry.dtype;
    } else {
        const fas_sm90::Kernel& entry = fas_sm90::kernel(index - fas_fa2::num_kernels());
        info->dtype = entry.dtype;
        info->head_dim = entry.head_dim;
        info->causal = entry.causal ? 1 : 0;
        info->split_kv = 0;
        info->family = entry.family;
        info->out_dtype = entry.out_dtype;
    }
    return FAS_SUCCESS;
}

fas_status query_support(fas_dtype dtype, int head_dim, int causal, int* kernel_head_dim) {
    if (!is_16bit_dtype(dtype)) return fail_bad_dtype(dtype);
    fas_status status = validate_head_dim(head_dim);
    if (status != FAS_SUCCESS) return status;
    const fas_fa2::Kernel* kernel = nullptr;
    status = fas_fa2::select_plain_kernel(dtype, head_dim, causal != 0, &kernel);
    if (status == FAS_SUCCESS && kernel_head_dim != nullptr) *kernel_head_dim = kernel->head_dim;
    return status;
}

fas_status query_plan_support(fas_dtype dtype, int head_dim, int causal, fas_family* family, int* kernel_head_dim) {
    const bool fp8 = dtype == FAS_DTYPE_E4M3;
    if (!fp8 && !is_16bit_dtype(dtype)) return fail_bad_dtype(dtype);
    fas_status status = validate_head_dim(head_dim);
    if (status != FAS_SUCCESS) return status;
    DeviceProps device{};
    status = check_current_device(&device);
    if (status != FAS_SUCCESS) return status;
    const int out_dtype = fp8 ? -1 : static_cast<int>(dtype);
    const std::string sm90_reason = fas_sm90::kernel_unavailable_reason(dtype, out_dtype, head_dim, causal != 0, device);
    if (sm90_reason.empty()) {
        if (family != nullptr) *family = FAS_FAMILY_SM90;
        if (kernel_head_dim != nullptr) {
            *kernel_head_dim = fas_sm90::find_kernel(dtype, out_dtype, head_dim, causal != 0)->head_dim;
        }
        return FAS_SUCCESS;
    }
    if (fp8) return fail(FAS_ERROR_NOT_BUILT, concat("FP8 (e4m3) plans need an SM90 kernel: ", sm90_reason));
    const fas_fa2::Kernel* kernel = nullptr;
    status = fas_fa2::select_plain_kernel(dtype, head_dim, causal != 0, &kernel);
    if (status != FAS_SUCCESS) return status;
    if (family != nullptr) *family = FAS_FAMILY_FA2;
    if (kernel_head_dim != nullptr) *kernel_head_dim = kernel->head_dim;
    return FAS_SUCCESS;
}

fas_status query_paged_support(fas_dtype dtype, int head_dim, int causal, int max_query_len, int group,
                               int* query_tile_rows) {
    if (!is_16bit_dtype(dtype)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("dtype ", static_cast<int>(dtype), " is not FAS_DTYPE_FP16 or FAS_DTYPE_BF16; the paged "
                           "family takes 16-bit q, k and v"));
    }
    fas_status status = validate_head_dim(head_dim);
    if (status != FAS_SUCCESS) return status;
    if (max_query_len < 1 || group < 1) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("max_query_len (", max_query_len, ") and group (", group, ") must be >= 1"));
    }
    DeviceProps device{};
    status = check_current_device(&device);
    if (status != FAS_SUCCESS) return status;
    if (!device.is_sm90()) {
        return fail(FAS_ERROR_UNSUPPORTED_DEVICE,
                    concat("the device has compute capability ", device.cc_major, ".", device.cc_minor,
                           "; the paged kernels are built for 9.0"));
    }
    // Paged plans with longer queries take the SM90 paged kernel where one is built (plan.cpp).
    const fas_sm90::Kernel* sm90 = max_query_len > kMaxDecodeQueries
                                       ? fas_sm90::find_kernel(dtype, dtype, head_dim, causal != 0, fas_sm90::Kind::kPaged)
                                       : nullptr;
    if (sm90 != nullptr) {
        if (query_tile_rows != nullptr) *query_tile_rows = fas_sm90::query_tile_rows(*sm90);
        return FAS_SUCCESS;
    }
    std::string why;
    const fas_paged::Kernel* kernel =
        fas_paged::choose_kernel(dtype, dtype, head_dim, causal != 0, max_query_len, group,
                                 fas_paged::pair_tiles(/*contiguous=*/true, 0), &why);
    if (kernel == nullptr) return fail(FAS_ERROR_NOT_BUILT, why);
    if (query_tile_rows != nullptr) {
        *query_tile_rows = fas_paged::planned_tile_rows(*kernel, static_cast<int64_t>(max_query_len) * group);
    }
    return FAS_SUCCESS;
}

}  // namespace fas

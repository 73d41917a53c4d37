// fas_kv_append (KV APPEND in flash_attn_standalone_kv_append.h): every field checked on the host,
// the optional host copy of the slot mapping checked against the caches, then one launch on the
// caller's stream. Nothing is allocated and nothing waits.
#include "api/kv_append.h"

#include <cstring>

#include "api/stream_op.h"
#include "core/device.h"
#include "core/kv_cache.h"
#include "core/layout.h"
#include "core/status.h"
#include "paged/append.h"

namespace fas {

namespace {

fas_status validate(const fas_kv_append_args& args, fas_paged::AppendLaunch* launch) {
    if (!is_16bit_dtype(args.dtype)) return fail_bad_dtype(args.dtype);
    if (args.cache_dtype != args.dtype && args.cache_dtype != FAS_DTYPE_E4M3) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("cache_dtype ", static_cast<int>(args.cache_dtype), " is neither dtype (", dtype_name(args.dtype),
                           ") nor FAS_DTYPE_E4M3; the caches hold the new rows' dtype or e4m3"));
    }
    if (args.num_tokens < 0 || args.num_heads_k <= 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat("num_tokens is ", args.num_tokens, " and num_heads_k ",
                                                       args.num_heads_k, "; they must be >= 0 and > 0"));
    }
    if (const fas_status status = validate_head_dim(args.head_dim); status != FAS_SUCCESS) return status;
    if (args.num_pages <= 0 || args.page_size <= 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat("num_pages is ", args.num_pages, " and page_size ", args.page_size,
                                                       "; a cache has at least one page of at least one slot"));
    }
    const bool fp8 = args.cache_dtype == FAS_DTYPE_E4M3;
    const int64_t row = static_cast<int64_t>(args.num_heads_k) * args.head_dim;
    *launch = fas_paged::AppendLaunch{args.dtype, args.cache_dtype, args.num_tokens, args.num_heads_k, args.head_dim,
                                      args.k_new, args.v_new, 0, 0, args.slot_mapping, args.k_cache, args.v_cache,
                                      args.page_size, static_cast<int64_t>(args.num_pages) * args.page_size, 0, 0, 0, 0,
                                      args.k_scale, args.v_scale, args.invalid_slots};
    const struct {
        int64_t given;
        const char* name;
        int64_t* out;
    } row_strides[] = {{args.k_new_row_stride, "k_new_row_stride", &launch->k_new_row_stride},
                       {args.v_new_row_stride, "v_new_row_stride", &launch->v_new_row_stride},
                       {args.k_row_stride, "k_row_stride", &launch->k_row_stride},
                       {args.v_row_stride, "v_row_stride", &launch->v_row_stride}};
    for (const auto& stride : row_strides) {
        *stride.out = stride.given;
        if (const fas_status status = resolve_row_stride(stride.out, row, stride.name); status != FAS_SUCCESS) {
            return status;
        }
    }
    const struct {
        int64_t given, row_stride;
        const char* name;
        int64_t* out;
    } page_strides[] = {{args.k_page_stride, launch->k_row_stride, "k_page_stride", &launch->k_page_stride},
                        {args.v_page_stride, launch->v_row_stride, "v_page_stride", &launch->v_page_stride}};
    for (const auto& stride : page_strides) {  // the caches plans read (PAGED KV CACHE)
        const fas_status status = resolve_page_stride(stride.given, stride.row_stride, args.page_size, stride.name,
                                                      stride.out);
        if (status != FAS_SUCCESS) return status;
    }
    // The caches: where they are, their alignment, and that the new rows lie outside them.
    const size_t cache_alignment = fp8 ? 8 : 16;
    for (const auto& check : {std::make_pair(static_cast<const void*>(args.k_cache), "k_cache"),
                              std::make_pair(static_cast<const void*>(args.v_cache), "v_cache")}) {
        const fas_status status = check_device_pointer(check.first, cache_alignment, check.second, "paged cache");
        if (status != FAS_SUCCESS) return status;
    }
    if (fp8) {
        for (const auto& check : {std::make_pair(args.k_scale, "k_scale"), std::make_pair(args.v_scale, "v_scale")}) {
            const fas_status status =
                check_device_pointer(check.first, sizeof(float), check.second, "fp32 array of num_heads_k e4m3 scales");
            if (status != FAS_SUCCESS) return status;
        }
    }
    if (args.invalid_slots != nullptr && !is_aligned(args.invalid_slots, sizeof(int))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "invalid_slots is not 4-byte aligned; pass a device int32 or NULL");
    }
    if (args.num_tokens == 0) return FAS_SUCCESS;
    for (const auto& check : {std::make_pair(args.k_new, "k_new"), std::make_pair(args.v_new, "v_new")}) {
        const fas_status status = check_device_pointer(check.first, 16, check.second, "rows of the new tokens");
        if (status != FAS_SUCCESS) return status;
    }
    const fas_status slots_status =
        check_device_pointer(args.slot_mapping, sizeof(int64_t), "slot_mapping", "int64 array of num_tokens slots");
    if (slots_status != FAS_SUCCESS) return slots_status;
    // A cache is one span (pages may be strided apart and interleave with the other cache).
    const auto cache_extent = [&](const void* base, int64_t page_stride, int64_t row_stride, const char* name) {
        const int64_t span = paged_span_elements(args.num_pages, args.page_size, page_stride, row_stride, row);
        return tensor_extent(base, 1, span, span, element_bytes(args.cache_dtype), name);
    };
    const Extent news[] = {
        tensor_extent(args.k_new, args.num_tokens, launch->k_new_row_stride, row, element_bytes(args.dtype), "k_new"),
        tensor_extent(args.v_new, args.num_tokens, launch->v_new_row_stride, row, element_bytes(args.dtype), "v_new")};
    const Extent caches[] = {cache_extent(args.k_cache, launch->k_page_stride, launch->k_row_stride, "k_cache"),
                             cache_extent(args.v_cache, launch->v_page_stride, launch->v_row_stride, "v_cache")};
    for (const Extent& rows : news) {
        for (const Extent& cache : caches) {
            if (overlaps(rows, cache)) {
                return fail(FAS_ERROR_INVALID_ARGUMENT,
                            concat(rows.name, " overlaps ", cache.name,
                                   "; the new rows must lie outside the caches they are written to"));
            }
        }
    }
    if (args.slot_mapping_host != nullptr) {
        for (int i = 0; i < args.num_tokens; ++i) {
            if (args.slot_mapping_host[i] >= launch->num_slots) {
                return fail(FAS_ERROR_INVALID_ARGUMENT,
                            concat("slot_mapping_host[", i, "] is ", args.slot_mapping_host[i],
                                   ", beyond the caches' num_pages * page_size = ", launch->num_slots,
                                   " slots; fix the slot mapping (or num_pages / page_size)"));
            }
        }
    }
    return FAS_SUCCESS;
}

}  // namespace

fas_status kv_append(const fas_kv_append_args* args) {
    return run_stream_op<fas_kv_append_args, fas_paged::AppendLaunch>(
        args, "fas_kv_append_args", "fas_kv_append_args_init()", "KV append kernel launch", validate,
        [](const fas_paged::AppendLaunch& launch, const DeviceProps&, cudaStream_t stream) {
            return fas_paged::launch_append(launch, stream);
        });
}

}  // namespace fas

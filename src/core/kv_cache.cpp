// Validation of a plan's KV arguments (core/kv_cache.h).
#include "core/kv_cache.h"

#include <algorithm>
#include <climits>

#include "core/status.h"

namespace fas {

fas_status read_kv_cache(const fas_plan_args& args, KvCache* kv, Layout* layout) {
    if (args.kv_layout != FAS_KV_VARLEN && args.kv_layout != FAS_KV_PAGED) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("kv_layout ", static_cast<int>(args.kv_layout),
                           " is not a fas_kv_layout; use FAS_KV_VARLEN (0) or FAS_KV_PAGED (1)"));
    }
    if (args.kv_layout == FAS_KV_VARLEN) {
        fas_status status = check_host_offsets(args.cu_seqlens_k, args.batch_size, "cu_seqlens_k");
        if (status != FAS_SUCCESS) return status;
        kv->cu_seqlens_k = args.cu_seqlens_k;
        for (int i = 0; i < args.batch_size; ++i) {
            layout->max_seqlen_k = std::max(layout->max_seqlen_k, args.cu_seqlens_k[i + 1] - args.cu_seqlens_k[i]);
        }
        layout->total_k = args.cu_seqlens_k[args.batch_size];
        return FAS_SUCCESS;
    }
    kv->paged = true;
    layout->paged = true;
    if (args.cu_seqlens_k != nullptr) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    "cu_seqlens_k is set but kv_layout is FAS_KV_PAGED; a paged plan takes the key counts in kv_lengths: "
                    "set cu_seqlens_k to NULL");
    }
    fas_status status = check_host_array(args.kv_lengths, "kv_lengths", "batch_size int32 key counts");
    if (status != FAS_SUCCESS) return status;
    if (args.page_size < 1) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("page_size is ", args.page_size, "; a paged plan needs the keys per page, >= 1"));
    }
    if (args.num_pages < 1) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("num_pages is ", args.num_pages, "; set it to the number of pages in the caches (>= 1)"));
    }
    kv->kv_lengths = args.kv_lengths;
    kv->page_size = args.page_size;
    kv->num_pages = args.num_pages;
    for (int i = 0; i < args.batch_size; ++i) {
        const int32_t length = args.kv_lengths[i];
        const int64_t pages = (static_cast<int64_t>(length) + args.page_size - 1) / args.page_size;
        if (length < 0) {
            return fail(FAS_ERROR_INVALID_ARGUMENT, concat("kv_lengths[", i, "] is ", length, "; key counts are >= 0"));
        }
        if (pages > args.num_pages) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat("kv_lengths[", i, "] is ", length, " keys, which needs ", pages, " pages of ", args.page_size,
                               " but the caches hold num_pages = ", args.num_pages,
                               "; pass the sequence's real length or a larger cache"));
        }
        kv->total_pages += pages;
        layout->max_seqlen_k = std::max(layout->max_seqlen_k, length);
    }
    if (args.device_lengths != 0) {  // a block table (DEVICE LENGTHS): batch rows of max_pages_per_sequence ids
        const int64_t most = (layout->max_seqlen_k + int64_t{args.page_size} - 1) / args.page_size;
        if (args.max_pages_per_sequence < std::max<int64_t>(most, 1)) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat("max_pages_per_sequence is ", args.max_pages_per_sequence,
                               " but a capacity in kv_lengths (", layout->max_seqlen_k, " keys) needs ",
                               std::max<int64_t>(most, 1), " pages of ", args.page_size,
                               "; pass the block table's row length"));
        }
        if (args.page_indices_host != nullptr) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        "page_indices_host is set, but a device-length plan's block table changes per step; pass NULL");
        }
        kv->table_stride = args.max_pages_per_sequence;
        kv->total_pages = int64_t{args.batch_size} * args.max_pages_per_sequence;
    }
    if (kv->total_pages > INT32_MAX) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("the batch lists ", kv->total_pages, " pages; the page table holds at most ", INT32_MAX,
                           " int32 entries: split the batch"));
    }
    layout->total_k = 0;  // the caches are addressed by page, not by row (see k_span_elements)
    return FAS_SUCCESS;
}

fas_status resolve_page_stride(int64_t given, int64_t row_stride, int page_size, const char* name, int64_t* stride) {
    *stride = given == 0 ? row_stride * page_size : given;
    if (*stride < 0 || *stride % 8 != 0 || *stride > kMaxPagedStride || row_stride > kMaxPagedStride) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat(name, " is ", *stride, " elements (row stride ", row_stride,
                           "); page and row strides must be multiples of 8 below 2^32 (the paged kernels hold "
                           "them in 32 bits)"));
    }
    return FAS_SUCCESS;
}

// The caches' element type: dtype (kv_dtype 0 or dtype), or e4m3 under 16-bit q of a paged plan.
fas_status resolve_kv_dtype(const fas_plan_args& args, fas_dtype* kv_dtype) {
    *kv_dtype = args.dtype;
    if (args.kv_dtype == FAS_DTYPE_FP16 || args.kv_dtype == args.dtype) return FAS_SUCCESS;
    if (args.kv_dtype != FAS_DTYPE_E4M3) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("kv_dtype ", static_cast<int>(args.kv_dtype), " is not valid here; pass 0 (the caches "
                           "hold dtype) or FAS_DTYPE_E4M3 (an FP8 KV cache)"));
    }
    if (args.kv_layout != FAS_KV_PAGED || !is_16bit_dtype(args.dtype)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    "kv_dtype FAS_DTYPE_E4M3 (an FP8 KV cache) needs kv_layout FAS_KV_PAGED and dtype FAS_DTYPE_FP16 "
                    "or FAS_DTYPE_BF16 (q and out stay 16-bit)");
    }
    *kv_dtype = FAS_DTYPE_E4M3;
    return FAS_SUCCESS;
}

fas_status resolve_paged_strides(const fas_plan_args& args, KvCache* kv, Layout* layout) {
    const struct {
        int64_t given;
        int64_t row_stride;
        int64_t* resolved;
        int64_t* span;
        const char* name;
    } caches[] = {
        {args.k_page_stride, layout->k_row_stride, &kv->k_page_stride, &layout->k_span_elements, "k_page_stride"},
        {args.v_page_stride, layout->v_row_stride, &kv->v_page_stride, &layout->v_span_elements, "v_page_stride"},
    };
    const int64_t row_elements = static_cast<int64_t>(layout->num_heads_k) * layout->head_dim;
    for (const auto& cache : caches) {
        const fas_status status =
            resolve_page_stride(cache.given, cache.row_stride, kv->page_size, cache.name, cache.resolved);
        if (status != FAS_SUCCESS) return status;
        *cache.span = paged_span_elements(kv->num_pages, kv->page_size, *cache.resolved, cache.row_stride, row_elements);
        // The decode kernel loads e4m3 cache rows in 16-byte units of 16 elements.
        for (const auto& [stride, name] : {std::pair<int64_t, const char*>{cache.row_stride, "row stride"},
                                           std::pair<int64_t, const char*>{*cache.resolved, cache.name}}) {
            if (has_fp8_kv_cache(*layout) && stride % 16 != 0) {
                return fail(FAS_ERROR_INVALID_ARGUMENT,
                            concat(cache.name[0] == 'k' ? "k " : "v ", name, " is ", stride,
                                   " elements; an e4m3 KV cache's rows and pages must be multiples of 16 "
                                   "elements (16 bytes) apart"));
            }
        }
    }
    if (args.page_indices_host != nullptr) {
        const fas_status status = check_host_array(args.page_indices_host, "page_indices_host", "total_pages int32 page ids");
        if (status != FAS_SUCCESS) return status;
        for (int64_t i = 0; i < kv->total_pages; ++i) {
            const int32_t page = args.page_indices_host[i];
            if (page < 0 || page >= kv->num_pages) {
                return fail(FAS_ERROR_INVALID_ARGUMENT,
                            concat("page_indices_host[", i, "] is ", page, ", outside the cache's pages [0, ",
                                   kv->num_pages, "); fix the page table (or num_pages)"));
            }
        }
    }
    return FAS_SUCCESS;
}

fas_status check_page_indices(const int32_t* page_indices, int64_t total_pages) {
    if (page_indices == nullptr && total_pages > 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("page_indices is NULL; a paged plan's run needs the DEVICE array of its ", total_pages,
                           " page ids (fas_plan_info.total_pages)"));
    }
    if (!is_aligned(page_indices, sizeof(int32_t))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "page_indices is not 4-byte aligned; pass an int32 device array");
    }
    return FAS_SUCCESS;
}

}  // namespace fas

// The KV side of a plan's arguments: the varlen offsets (cu_seqlens_k) or a paged cache
// (kv_lengths, page_size, num_pages, page strides, an optional host copy of the page ids),
// validated on the host into the lengths and spans the planners and tensor checks use.
#ifndef FAS_CORE_KV_CACHE_H
#define FAS_CORE_KV_CACHE_H

#include "flash_attn_standalone.h"

#include <cstdint>

#include "core/layout.h"

namespace fas {

// Plans whose sequences all have at most this many queries (decode, speculative decoding) go to
// the paged family, which packs a KV head's query heads into one tile and splits the KV; paged
// plans with longer queries (chunked prefill) go to the SM90 paged kernels where one serves.
constexpr int kMaxDecodeQueries = 8;
constexpr int64_t kMaxPagedStride = (int64_t{1} << 32) - 1;  // the paged kernels hold strides in 32 bits

struct KvCache {
    bool paged = false;
    const int32_t* cu_seqlens_k = nullptr;  // host (varlen)
    const int32_t* kv_lengths = nullptr;    // host (paged)
    int page_size = 0;
    int num_pages = 0;
    int64_t total_pages = 0;
    int64_t k_page_stride = 0;  // elements, resolved (paged)
    int64_t v_page_stride = 0;
    int table_stride = 0;  // > 0: a device-length plan's block table row (max_pages_per_sequence)
};

// Checks the KV fields of args (its kv_layout and what goes with it) and their host arrays.
// Sets kv->... and layout->max_seqlen_k / total_k; for paged caches, after resolve_layout has
// settled the row strides, call resolve_paged_strides.
fas_status read_kv_cache(const fas_plan_args& args, KvCache* kv, Layout* layout);

// One cache's page stride (0 = page_size * row stride) checked against the limits of PAGED KV
// CACHE (multiples of 8 below 2^32, as the paged kernels hold them): plans and fas_kv_append
// take the same caches.
fas_status resolve_page_stride(int64_t given, int64_t row_stride, int page_size, const char* name, int64_t* stride);

// Elements a paged cache spans from its base pointer.
inline int64_t paged_span_elements(int num_pages, int page_size, int64_t page_stride, int64_t row_stride,
                                   int64_t row_elements) {
    return (num_pages - 1) * page_stride + (page_size - 1) * row_stride + row_elements;
}

// The caches' element type from fas_plan_args.kv_dtype: dtype (0 or dtype), or FAS_DTYPE_E4M3
// for a paged plan of 16-bit q (an FP8 KV cache; an FP8 plan's caches are e4m3 already).
fas_status resolve_kv_dtype(const fas_plan_args& args, fas_dtype* kv_dtype);

// Page strides (0 = page_size * row stride), their limits (e4m3 caches: multiples of 16), the caches' spans for the tensor
// checks, and the optional host page ids.
fas_status resolve_paged_strides(const fas_plan_args& args, KvCache* kv, Layout* layout);

// A paged plan's run: page_indices must be a 4-byte aligned device array (non-NULL when the plan
// has pages).
fas_status check_page_indices(const int32_t* page_indices, int64_t total_pages);

}  // namespace fas

#endif  // FAS_CORE_KV_CACHE_H

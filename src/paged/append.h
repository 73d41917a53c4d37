// KV append (fas_kv_append): the launcher of the kernel that writes new K/V rows into paged
// caches through a slot mapping, free of CUTLASS types. The API (api/kv_append.cpp) validates
// every field first; this side trusts them.
#ifndef FAS_PAGED_APPEND_H
#define FAS_PAGED_APPEND_H

#include "flash_attn_standalone.h"

#include <cstdint>

#include <cuda_runtime_api.h>

namespace fas_paged {

struct AppendLaunch {
    fas_dtype dtype;        // of k_new / v_new (fp16 or bf16)
    fas_dtype cache_dtype;  // dtype, or e4m3 (quantized by k_scale / v_scale)
    int num_tokens;
    int num_heads;
    int head_dim;
    const void* k_new;
    const void* v_new;
    int64_t k_new_row_stride;  // elements, resolved
    int64_t v_new_row_stride;
    const int64_t* slots;      // device, num_tokens
    void* k_cache;
    void* v_cache;
    int page_size;
    int64_t num_slots;         // num_pages * page_size: slots at or past it are skipped and counted
    int64_t k_row_stride;      // elements, resolved
    int64_t v_row_stride;
    int64_t k_page_stride;
    int64_t v_page_stride;
    const float* k_scale;      // e4m3 caches: device [num_heads]
    const float* v_scale;
    int* invalid_slots;        // optional device counter
};

// Enqueues the write on stream; returns the launch status.
cudaError_t launch_append(const AppendLaunch& args, cudaStream_t stream);

}  // namespace fas_paged

#endif  // FAS_PAGED_APPEND_H

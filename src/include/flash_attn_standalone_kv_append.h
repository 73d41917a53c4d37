/* flash_attn_standalone: writing a step's new keys and values into paged KV caches (the plans'
 * caches: flash_attn_standalone_paged.h, PAGED KV CACHE). Included by flash_attn_standalone.h.
 *
 * KV APPEND (fas_kv_append, since 0.3): writes a step's new keys and values into the paged
 *   caches, as vLLM's cache write does: token i of k_new / v_new ([num_tokens, num_heads_k,
 *   head_dim], 16-bit, rows k_new_row_stride / v_new_row_stride apart) goes to slot
 *   slot_mapping[i] = page * page_size + offset of the caches (the layout of PAGED KV CACHE:
 *   element (page, offset, head, d) at page * page_stride + offset * row_stride + head * head_dim
 *   + d); a negative slot skips the token (padding). slot_mapping is a DEVICE array of int64, so
 *   that a step's layout never needs a synchronize. Stream-ordered on args->stream: no host
 *   work beyond validation, no allocation, no synchronize. Slots at or beyond num_pages *
 *   page_size are never written: they are skipped, and counted into *invalid_slots (an optional
 *   device int32 the call adds to) so that an engine can check them later without a
 *   synchronize; pass slot_mapping_host (a HOST copy) to have the call refuse them with
 *   FAS_ERROR_INVALID_ARGUMENT before launching. Two tokens with the same slot leave one of them.
 *   cache_dtype FAS_DTYPE_E4M3 quantizes on the way in: stored = e4m3(value / scale[head]) with
 *   saturation to +-448, from the DEVICE fp32 arrays k_scale / v_scale [num_heads_k] (required;
 *   an attention over the cache reads value = stored * scale). The new rows must not overlap
 *   the caches. Alignment: k_new, v_new and 16-bit caches 16-byte aligned, e4m3 caches 8-byte
 *   aligned, row and page strides multiples of 8 elements, slot_mapping 8-byte aligned.
 */
#ifndef FLASH_ATTN_STANDALONE_KV_APPEND_H
#define FLASH_ATTN_STANDALONE_KV_APPEND_H

#include "flash_attn_standalone.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Arguments of fas_kv_append (see KV APPEND). Initialise with fas_kv_append_args_init(); same
 * ABI rule as fas_fwd_args. Added in 0.3. */
typedef struct fas_kv_append_args {
    size_t struct_size;     /* must be sizeof(fas_kv_append_args) */
    fas_dtype dtype;        /* of k_new and v_new: FAS_DTYPE_FP16 or FAS_DTYPE_BF16 */
    fas_dtype cache_dtype;  /* of the caches: dtype itself, or FAS_DTYPE_E4M3 (quantized) */
    int num_tokens;         /* rows of k_new / v_new and entries of slot_mapping, >= 0 (0: no work) */
    int num_heads_k;        /* > 0 */
    int head_dim;           /* multiple of 8 in [8, 256] */

    const void* k_new;      /* DEVICE [num_tokens, num_heads_k, head_dim] */
    const void* v_new;
    int64_t k_new_row_stride; /* elements between tokens; 0 = num_heads_k * head_dim */
    int64_t v_new_row_stride;

    const int64_t* slot_mapping;      /* DEVICE, num_tokens slots; < 0 = skip the token */
    const int64_t* slot_mapping_host; /* optional HOST copy, checked before launching (NULL = not checked) */

    void* k_cache;          /* DEVICE paged caches [num_pages, page_size, num_heads_k, head_dim] */
    void* v_cache;
    int num_pages;          /* > 0 */
    int page_size;          /* >= 1 */
    int64_t k_row_stride;   /* elements; 0 = num_heads_k * head_dim */
    int64_t v_row_stride;
    int64_t k_page_stride;  /* elements; 0 = page_size * row stride */
    int64_t v_page_stride;

    const float* k_scale;   /* DEVICE [num_heads_k], e4m3 caches only (required there) */
    const float* v_scale;
    int* invalid_slots;     /* optional DEVICE int32: += the number of slots beyond the caches */

    cudaStream_t stream;    /* stream of the current device; 0 = legacy default stream */
} fas_kv_append_args;

/* Sets every field of *args to zero and args->struct_size to sizeof(fas_kv_append_args). */
FAS_API void fas_kv_append_args_init(fas_kv_append_args* args);

/* Enqueues the write of args->num_tokens new K/V rows into the paged caches on args->stream
 * (see KV APPEND). FAS_ERROR_INVALID_ARGUMENT for bad arguments (the message names the field),
 * FAS_ERROR_UNSUPPORTED_DEVICE where fas_check_device fails, FAS_ERROR_CUDA for a failed launch
 * or a pending CUDA error (the pending-error rule of fas_fwd). */
FAS_API fas_status fas_kv_append(const fas_kv_append_args* args);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASH_ATTN_STANDALONE_KV_APPEND_H */

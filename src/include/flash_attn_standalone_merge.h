/* flash_attn_standalone: merging partial attentions by their LSE (shared-prefix or cascade
 * attention, context parallelism). Included by flash_attn_standalone.h.
 *
 * MERGE STATES (fas_merge_states, since 0.5): num_states partial attentions of the same queries
 *   over disjoint sets of keys -- each an output v_s and its natural-log LSE lse_s, as fas_fwd
 *   and plan runs return them -- merged into the attention over the union of the keys:
 *     lse = log(sum_s exp(lse_s)),   out = sum_s exp(lse_s - lse) * v_s
 *   computed in fp32 per (token, head) row, out rounded once to dtype. A partial whose LSE is
 *   +infinity or -infinity saw no key (the library writes +infinity for such rows, FlashInfer
 *   -infinity) and weighs nothing; a row that no partial saw gets out = 0 and lse = +infinity,
 *   the library's convention. A NaN LSE makes its row's out and lse NaN.
 *   Layouts by strides, in elements: element d of row (token t, head h) of a partial output
 *   lies at v[s] + t * token_stride + h * head_stride + d, of out at out + t * out_token_stride
 *   + h * out_head_stride + d; LSE (t, h) at lse[s] + t * lse_token_stride[s] + h * lse_head_stride[s]
 *   (out_lse likewise). A stride of 0 means the token-major default: [num_tokens, num_heads,
 *   head_dim] rows and [num_tokens, num_heads] LSEs, the layout of plan outputs and of the
 *   SM90 and paged families' LSE (FAS_LSE_TOKEN_MAJOR); FA2's head-major LSE ([num_heads,
 *   total_q], FAS_LSE_HEAD_MAJOR) is lse_token_stride[s] = 1, lse_head_stride[s] = total_q.
 *   Each partial's LSE has its own layout (parts from plans of different families: ask each
 *   plan's fas_plan_info.lse_layout); the partial outputs share one. out and out_lse have their own, in which no two rows may share
 *   an element. out and out_lse share no byte with any partial or with each other (no merge in
 *   place: write to a separate buffer).
 *   Alignment: v[s] and out 16-byte aligned, token and head strides multiples of 8, LSEs 4-byte
 *   aligned. Stream-ordered on args->stream: no allocation, no synchronize, nothing kept after
 *   the call, so a captured call replays with the pointers it was given.
 */
#ifndef FLASH_ATTN_STANDALONE_MERGE_H
#define FLASH_ATTN_STANDALONE_MERGE_H

#include "flash_attn_standalone.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Partials one call merges at most (merge more in a tree: a merged output and its LSE are a
 * partial again). */
#define FAS_MERGE_MAX_STATES 16

/* Arguments of fas_merge_states (see MERGE STATES). Initialise with fas_merge_states_args_init();
 * same ABI rule as fas_fwd_args. Added in 0.5. */
typedef struct fas_merge_states_args {
    size_t struct_size;  /* must be sizeof(fas_merge_states_args) */
    fas_dtype dtype;     /* of the partial outputs and of out: FAS_DTYPE_FP16 or FAS_DTYPE_BF16 */
    int num_states;      /* partials to merge, 1 .. FAS_MERGE_MAX_STATES */
    int num_tokens;      /* rows (queries) of each partial, >= 0 (0: no work) */
    int num_heads;       /* > 0 */
    int head_dim;        /* multiple of 8 in [8, 512] */

    const void* v[FAS_MERGE_MAX_STATES];    /* DEVICE partial outputs; the first num_states are read */
    const float* lse[FAS_MERGE_MAX_STATES]; /* DEVICE natural-log LSE of each partial */
    int64_t token_stride;                   /* elements between tokens of a partial; 0 = num_heads * head_dim */
    int64_t head_stride;                    /* elements between heads of a partial; 0 = head_dim */
    int64_t lse_token_stride[FAS_MERGE_MAX_STATES]; /* floats, per partial; 0 = num_heads */
    int64_t lse_head_stride[FAS_MERGE_MAX_STATES];  /* floats, per partial; 0 = 1 */

    void* out;                    /* DEVICE merged output */
    int64_t out_token_stride;     /* 0 = num_heads * head_dim */
    int64_t out_head_stride;      /* 0 = head_dim */
    float* out_lse;               /* optional DEVICE merged LSE (NULL: not written) */
    int64_t out_lse_token_stride; /* 0 = num_heads */
    int64_t out_lse_head_stride;  /* 0 = 1 */

    cudaStream_t stream;  /* stream of the current device; 0 = legacy default stream */
} fas_merge_states_args;

/* Sets every field of *args to zero and args->struct_size to sizeof(fas_merge_states_args). */
FAS_API void fas_merge_states_args_init(fas_merge_states_args* args);

/* Enqueues the merge of args->num_states partial attentions into out (and out_lse) on
 * args->stream (see MERGE STATES). FAS_ERROR_INVALID_ARGUMENT for bad arguments (the message
 * names the field), FAS_ERROR_UNSUPPORTED_DEVICE where fas_check_device fails, FAS_ERROR_CUDA
 * for a failed launch or a pending CUDA error (the pending-error rule of fas_fwd). */
FAS_API fas_status fas_merge_states(const fas_merge_states_args* args);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASH_ATTN_STANDALONE_MERGE_H */

/* flash_attn_standalone: plans over a paged KV cache (fas_plan_args.kv_layout = FAS_KV_PAGED),
 * FP8 KV caches, mixed decode + prefill plans, and the paged family's support query. Included by
 * flash_attn_standalone.h; the rules of flash_attn_standalone_plan.h (PLANS, MASKS) hold here too.
 *
 * PAGED KV CACHE (plans; fas_plan_args.kv_layout = FAS_KV_PAGED)
 *   k and v of each run then point at the key and value caches:
 *     k, v : [num_pages, page_size, num_heads_k, head_dim]   (the layout of vLLM and FlashInfer)
 *   Within a page, token t of page p starts at element p * page_stride + t * row_stride; the
 *   heads of a token are contiguous, head_dim elements each. k_row_stride / v_row_stride are the
 *   row strides (0 = num_heads_k * head_dim) and k_page_stride / v_page_stride the page strides
 *   (0 = page_size * row stride), so K and V may also be two views of one buffer (e.g. FlashInfer's
 *   [num_pages, 2, page_size, heads, head_dim]: page stride 2 * page_size * heads * head_dim, v =
 *   k + page_size * heads * head_dim). Strides are multiples of 8 elements and below 2^32.
 *   page_size is any value >= 1 (1, 16, 32, 64, 128, 256 ... need no power of two).
 *
 *   The page table is CSR, as FlashInfer takes it: sequence i owns
 *   pages(i) = ceil(kv_lengths[i] / page_size) pages, listed in order in the DEVICE array
 *   fas_plan_run_args.page_indices at entries first(i) .. first(i) + pages(i) - 1, where
 *   first(i) = pages(0) + ... + pages(i-1); its last page holds kv_lengths[i] - (pages(i)-1) *
 *   page_size keys. fas_plan_info.total_pages = first(batch_size) is the array's length. A vLLM /
 *   FA3 block table [batch, max_pages_per_seq] converts by concatenating each row's first
 *   pages(i) entries (on the device: one gather, or cudaMemcpy2DAsync when every sequence has
 *   the same page count).
 *   The plan captures the lengths (kv_lengths, cu_seqlens_q), page_size, the strides and
 *   num_pages, never the page ids: a plan made for one step may run with a different
 *   page_indices array (or the same array rewritten) as long as every sequence keeps its
 *   lengths. Page ids must be in [0, num_pages); the device array is not checked (pass
 *   page_indices_host at creation to have the plan check a host copy once).
 *   Queries are in the varlen layout (cu_seqlens_q, host, as for every plan); out must be
 *   contiguous (out_row_stride 0 or num_heads_q * head_dim). Causal masking is bottom-right
 *   aligned: with sq queries and sk cached keys (the new tokens' keys included), query i sees
 *   keys 0 .. i + sk - sq. Rows that see no key (sk = 0) get out = 0 and LSE = +infinity.
 *
 *   Which kernels serve a paged plan: where some sequence has more than 8 queries (chunked
 *   prefill), the SM90 paged kernels (family FAS_FAMILY_SM90; causal, fp16/bf16, head dims 64/128
 *   in `minimal`, also 256 in `full`) when one is built for the request, K and V have equal row
 *   and page strides, and every sequence with queries has at least as many keys; they read the
 *   pages through the page table as they stream keys (one tile of 128 or 192 query rows per
 *   query head, one CTA per SM, no KV split). Every other paged plan (decode, speculative
 *   decoding, non-causal, or one those conditions exclude: fas_plan_info.sm90_unused_reason says
 *   which) runs on the paged family below. Both take the same page table and arguments.
 *
 *   FP8 KV CACHE (since 0.4; fas_plan_args.kv_dtype = FAS_DTYPE_E4M3, paged caches only): the
 *   caches hold e4m3 values (1 byte each, e.g. written by fas_kv_append with cache_dtype
 *   FAS_DTYPE_E4M3), q and out stay fp16/bf16 (dtype). Every run must pass the DEVICE fp32
 *   descale arrays k_descale[num_heads_k] and v_descale[num_heads_k] (real value = stored value
 *   * descale of its KV head: the scales fas_kv_append quantized with); positive and finite.
 *   The paged family's decode kernel serves these plans (family "paged_e4m3kv" in
 *   fas_get_kernel_info; `full` builds head dims 64, 128, 256, causal), for any number of
 *   queries per sequence: decode, speculative decoding, and chunked prefill over the cached
 *   pages (16 packed rows per tile; slower than the 16-bit SM90 paged kernels per query, it
 *   exists so that a whole batch can use one cache), with windows and softcap as for 16-bit
 *   caches. Scores and P*V are computed from the exact e4m3 values widened to dtype (no
 *   rounding beyond the 16-bit cache's), so results match an attention over the dequantized
 *   cache. Row strides and page strides of the caches must be multiples of 16 elements
 *   (bytes), the caches 16-byte aligned. Batches with an FP8 cache are not split into mixed
 *   plans (both parts would run the same kernel).
 *   FP8 q too (dtype FAS_DTYPE_E4M3, kv_layout FAS_KV_PAGED, kv_dtype 0 or E4M3, out as out_dtype):
 *   q holds e4m3 values (row stride a multiple of 16), runs may add q_descale[num_heads_q] (DEVICE
 *   fp32, NULL = 1) to k_descale and v_descale, and the kernel built for out_dtype serves it as
 *   above, q * q_descale rounded to fp16 (exact for power-of-two descales, else within 2^-11),
 *   probabilities not rounded to e4m3 (unlike the SM90 FP8 kernels).
 *
 *   MIXED PLANS (since 0.4): a paged batch in which some sequences decode (at most 8 queries each)
 *   and others are in chunked prefill, as a continuous-batching scheduler produces it, becomes
 *   one plan of family FAS_FAMILY_MIXED made of two parts: the decode sequences at the START or
 *   at the END of the batch (the longer such run; order the batch so that every decode
 *   sequence is in it, as vLLM does by putting decodes first) go to the paged family's decode
 *   kernel, the other sequences to the family a plan of them alone would take
 *   (fas_plan_info.prefill_family: SM90 where its paged kernel serves them, else PAGED). Decode
 *   sequences between prefill ones stay in the prefill part. fas_plan_run launches the prefill
 *   part on the run's stream and the decode part on a stream the plan owns, forked from the
 *   run's stream and joined back into it with events (no host wait; work queued after the run
 *   on its stream, and CUDA graph capture of the run, see both parts), so that decode CTAs use
 *   the SMs a short prefill leaves idle; each part reads its own share of page_indices (the
 *   batch's CSR array as one: nothing changes for the caller). Runs of one mixed plan from
 *   several threads are serialized around the fork and join (a mutex). A batch whose decode
 *   sequences would not fit the decode kernel's 16-row tiles (queries x query heads per KV head
 *   > 16, or several queries of a non-causal plan), or one of whose parts could not be planned
 *   alone, is planned as one plan, as before.
 *   fas_plan_info of a mixed plan: decode_sequences, prefill_family, the prefill part's
 *   kernel_head_dim, query_tile_rows, query_tiles and ctas_per_sm, the decode part's packed_gqa,
 *   the larger kv_splits, and num_ctas, total_pages and device_bytes summed. The parts' rules
 *   hold: runs of a plan with kv_splits > 1 must be ordered with each other.
 *
 *   Contiguous (varlen) KV plans whose sequences have at most 8 queries each take the paged
 *   family's kernels: the plan describes the varlen K/V as pages (the largest power of two <= 256 that
 *   divides every sequence's first row) and uploads their ids itself.
 *
 *   Paged plans need an exact head dim (64, 128, 256 where built), fp16/bf16 (caches also e4m3:
 *   FP8 KV CACHE). Paged-family plans' runs may write a partial-result buffer the plan owns
 *   (fas_plan_info.kv_splits > 1): runs of such a plan must be ordered with each other (one
 *   stream, or joined with events), unlike other plans. The LSE is token-major ([total_q,
 *   num_heads_q], FAS_LSE_TOKEN_MAJOR). Writing into the caches: KV APPEND (its own header).
 *
 *   DEVICE LENGTHS (since 0.5; fas_plan_args.device_lengths): for engines that capture a decode
 *   step in a CUDA graph once and replay it while sequences grow. The plan is made for a capacity:
 *   batch_size sequences (at most 2048; padding slots included), cu_seqlens_q (host, fixed: every
 *   run has these query rows), kv_lengths (host) the most keys each sequence may hold, and the page
 *   table is a BLOCK TABLE: a DEVICE int32 array [batch_size, max_pages_per_sequence] (vLLM's and
 *   FA3's layout), row i listing sequence i's pages in order; only its first ceil(len_i /
 *   page_size) entries are read, so the rest may hold anything (e.g. -1). max_pages_per_sequence
 *   must cover every capacity; page_indices_host must be NULL. Runs pass the block table as
 *   fas_plan_run_args.page_indices (fas_plan_info.total_pages = batch_size *
 *   max_pages_per_sequence). fas_plan_update(plan, args) enqueues on args->stream a kernel that
 *   reads this step's key counts from the DEVICE array args->kv_lengths [batch_size] and writes
 *   the plan's schedule (work items, KV split, merge) on the device, with the rules a plan made
 *   on the host for those lengths follows; every later run on that stream (every layer of the
 *   step) uses it, and writes the same bits as such a host plan where both take the same decode
 *   shape (fas_plan_info.ctas_per_sm: the shape is chosen at creation, for the capacity). Nothing
 *   is read on the host, nothing allocated or synchronized: capture update + runs in a graph and
 *   replay it. Lengths outside [0, capacity] are held to it (memory stays safe; such rows are
 *   wrong). A sequence of length 0 (a padding slot) writes out = 0 and LSE = +infinity. Until the
 *   first update a run sees the capacity lengths; fas_plan_info describes the plan at its capacity
 *   (kv_splits, num_ctas: the grid). Updates and runs of one plan must be ordered
 *   (one stream); the update's kernel must have completed before a run reads its schedule, which
 *   stream order gives unless a kernel in between was launched with programmatic dependent
 *   launch and never waited for its predecessor. Device-length plans run on the paged family's
 *   decode kernel only: queries per sequence x query heads per KV head must fit its 16-row tiles
 *   (32-row ones where pages hold a multiple of 8 rows, on every card); others fail with
 *   FAS_ERROR_NOT_BUILT.
 */
#ifndef FLASH_ATTN_STANDALONE_PAGED_H
#define FLASH_ATTN_STANDALONE_PAGED_H

#include "flash_attn_standalone.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the paged family can serve a plan for (dtype, head_dim, causal) with at most
 * max_query_len queries per sequence and `group` = num_heads_q / num_heads_k query heads per KV
 * head on the CURRENT device: a paged KV cache, or a varlen plan of at most 8 queries per sequence
 * (see PAGED KV CACHE), or the SM90 paged kernel for a paged plan with more than 8 queries in some
 * sequence, assuming the conditions listed there hold. On FAS_SUCCESS stores the query tile rows
 * of the kernel that would serve it (fas_plan_info.query_tile_rows of such a plan: paged family
 * 16, 32 or 64, SM90 128 or 192; 32 assumes pages of a multiple of 8 rows or contiguous KV, other
 * pages take 64 there) in *query_tile_rows (may be NULL). FAS_ERROR_NOT_BUILT (the message lists
 * the paged kernels of this build), FAS_ERROR_UNSUPPORTED_DEVICE, or FAS_ERROR_INVALID_ARGUMENT
 * for a bad dtype, head_dim, max_query_len (>= 1) or group (>= 1). Added in 0.2. */
FAS_API fas_status fas_query_paged_support(fas_dtype dtype, int head_dim, int causal, int max_query_len, int group,
                                           int* query_tile_rows);

/* Arguments of fas_plan_update. Initialise with fas_plan_update_args_init(); same ABI rule as
 * fas_plan_args. */
typedef struct fas_plan_update_args {
    size_t struct_size;        /* must be sizeof(fas_plan_update_args) */
    const int32_t* kv_lengths; /* DEVICE, batch_size key counts of this step, 4-byte aligned */
    cudaStream_t stream;       /* stream of the plan's device; 0 = legacy default stream */
} fas_plan_update_args;

/* Sets every field of *args to zero and args->struct_size to sizeof(fas_plan_update_args). */
FAS_API void fas_plan_update_args_init(fas_plan_update_args* args);

/* Enqueues a device-length plan's schedule for args->kv_lengths on args->stream (DEVICE
 * LENGTHS). FAS_ERROR_INVALID_ARGUMENT for a plan made without device_lengths or a bad argument;
 * pending-CUDA-error rule as fas_plan_run. Added in 0.5. */
FAS_API fas_status fas_plan_update(fas_plan* plan, const fas_plan_update_args* args);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASH_ATTN_STANDALONE_PAGED_H */

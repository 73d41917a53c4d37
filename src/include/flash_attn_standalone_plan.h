/*
 * flash_attn_standalone_plan.h - the plan API of libflash_attn_standalone: plans made once per
 * batch layout and run per layer on the SM90, FA2 and paged families, and the paged KV cache.
 * flash_attn_standalone.h includes it (include that one); that header's rules (tensor layouts,
 * aliasing, alignment, devices and streams, errors, thread safety, ABI) hold here too.
 *
 * PLANS (varlen layout only)
 *   fas_plan_create(args, &plan) takes the batch layout with the offsets in HOST memory
 *   (cu_seqlens_q / cu_seqlens_k of fas_plan_args), the heads, head_dim, strides, scale, causal
 *   flag and dtype, and chooses the family:
 *     MIXED for a paged batch of decode and chunked-prefill sequences (see MIXED PLANS);
 *     PAGED for a paged KV cache (see PAGED KV CACHE for the share of SM90's paged kernels),
 *          and for a varlen plan whose sequences all have at most 8 queries (decode) when a
 *          paged kernel of exactly this (dtype, head_dim) is built, the device has compute
 *          capability 9.0, out is contiguous and args->disable_sm90 is 0;
 *     SM90 if the current device has compute capability 9.0, an SM90 kernel serves (dtype,
 *          head_dim, causal) (see HEAD DIMS), args->disable_sm90 is 0, and the layout suits it
 *          (every sequence with queries has keys; a causal sequence has no more queries than
 *          keys; query tiles (128 or 192 rows) times num_heads_q at most
 *          2^30);
 *     FA2  otherwise, with the smallest built FA2 head dim >= head_dim;
 *     FAS_ERROR_NOT_BUILT (message says why SM90 was not usable) if neither serves it.
 *   fas_plan_get_info() says which family a plan uses and why SM90 was passed over.
 *
 *   Creation does the host work: it validates the offsets and, for SM90 plans, lists the
 *   layout's query tiles once, not per head (32 bytes a tile; causal plans pair tile j with
 *   tile n-1-j of a sequence; the kernel combines them with the heads and deals the work to its
 *   CTAs itself), and enqueues the upload of that list WITHOUT waiting for it, on a stream of
 *   the library's own (one non-blocking stream per device, kept for the process), so that it
 *   overlaps the work already queued on the caller's streams. The list's device memory (with
 *   a pinned staging twin and an event) comes from a small
 *   per-device cache inside the library; only when no cached block is large enough does
 *   creation call cudaMalloc / cudaMallocHost. FA2 plans allocate a device copy of the
 *   offsets and an LSE scratch of num_heads_q * total_q floats with cudaMalloc, upload on
 *   args->stream and wait for that stream. fas_plan_run() then only fills the kernel arguments
 *   from the plan and launches: no host scheduling, no host-to-device copy, no allocation, no
 *   synchronization. (An SM90 run whose stream might not yet see the upload first makes its
 *   stream wait for it with cudaStreamWaitEvent; once a run has found the upload complete,
 *   later runs skip even that check.) fas_plan_get_info() reports the plan's device bytes. A
 *   run reads the offsets captured at creation: the q, k, v and out tensors of every run must
 *   follow that layout.
 *
 *   A plan belongs to the device that was current at creation; runs must be made with that
 *   device current, on one of its streams (checked). fas_plan_run never modifies the plan, so
 *   one plan may be run concurrently from several threads and on several streams at once (the
 *   FA2 LSE scratch is written, never read, when softmax_lse is NULL, so concurrent runs may
 *   share it; "never modifies" includes the one atomic flag that records a finished upload),
 *   except a paged-family plan that splits keys (fas_plan_info.kv_splits > 1, and every
 *   device-length plan): its runs use the plan's own partial rows and arrival counts on the
 *   device, so they must be ordered, one after the other (one stream, or events between them).
 *   fas_plan_destroy releases the plan's memory: call it only after every
 *   run that uses the plan has completed on the device (e.g. after cudaStreamSynchronize) and
 *   while no other thread uses the plan. SM90 schedule memory goes back to the library's cache
 *   (at most 16 blocks per device are kept, for later plans; the rest is freed, and cached blocks
 *   live until the process ends). fas_plan_destroy_async(plan, stream) needs no synchronize:
 *   the release waits on the device for the runs enqueued on that stream (SM90 plans; FA2 plans
 *   synchronize the stream). An engine that plans per batch: create, run every layer, destroy
 *   async, all on one stream. Using a destroyed plan is undefined behaviour (the library
 *   detects some such uses and returns FAS_ERROR_INVALID_ARGUMENT).
 *
 *   MASKS (plans): FlashAttention's, bottom-right aligned. With sq queries and sk keys in a
 *   sequence, query i's diagonal key is d(i) = i + sk - sq. Causal: query i sees keys 0 .. d(i).
 *   Local (fas_plan_args.use_window, FlashAttention's window_size = (left, right)): query i sees
 *   keys max(0, d(i) - left) .. min(sk - 1, d(i) + right), -1 meaning no limit on that side;
 *   causal sets right to 0, so (left, 0) is a causal sliding window (Mistral, Gemma) and
 *   (-1, -1) no window at all. Families: SM90 serves right = 0 (its causal kernels) and right =
 *   -1 (its non-causal kernels) with any left, skipping the key tiles left of every window of a
 *   query tile (a plan's cost grows with the window, not with the sequence); since 0.5 it
 *   serves right > 0 too, on its causal kernels with the diagonal moved right (varlen, paged,
 *   softcap and packed; FP8 on the causal FP8 kernels, with a left window on "sm90_fp8_window" or
 *   "sm90_fp8_softcap" ones): the keys right of every window are not loaded either; a right
 *   window that reaches every row's last key, right >= the longest sequence's queries - 1, is no
 *   limit and runs the non-causal kernel. Other right > 0 plans run on FA2
 *   (fas_plan_info.sm90_unused_reason says why). The paged family's decode kernel (paged and
 *   decode-shaped varlen plans whose queries per sequence x query heads per KV head fit its
 *   16-row tiles, e.g. one query at GQA 16, or 32-row ones, e.g. 4 queries at GQA 8 on every
 *   card, caches of q's type up to head dim 128) serves
 *   any left window, its KV splits covering only the keys inside the window; the SM90 paged
 *   kernels (chunked prefill over a paged cache, since 0.5) serve any left window as SM90's
 *   varlen kernels do, each query tile's keys starting at the page that holds its first
 *   row's first key; other paged plans with a window (the 64-row paged tiles, e.g. paged plans
 *   on cards other than SM90) fail with FAS_ERROR_NOT_BUILT. A row that sees no key (e.g.
 *   left = 0 and right = 0 with sk < sq) gets out = 0. FP8 plans over contiguous K and V take a
 *   left window (right 0 or -1; or > 0 on the causal one) on FP8 kernels of their own (family
 *   "sm90_fp8_window", since 0.5;
 *   `full` builds them causal at head dims 128 and 256; elsewhere FAS_ERROR_NOT_BUILT; with a
 *   softcap too, "sm90_fp8_softcap" below). Softcap
 *   (fas_plan_args.softcap > 0, any mask): SM90 runs it on its softcap kernels (family
 *   "sm90_softcap" in fas_get_kernel_info; `full` builds them at head dims 128 and 256, with
 *   round-up below them; chunked prefill over a paged cache on "sm90_paged_softcap", since 0.5,
 *   at the exact head dims built, 128 and 256 in `full`; FP8 plans over contiguous K and V,
 *   with a left window or not, on "sm90_fp8_softcap", since 0.5, causal at head dims 128 and 256
 *   in `full`, rounding up as the FP8 kernels do), FA2 on any of its kernels, the paged family on
 *   its decode kernel (as windows); the 64-row paged tiles take none. The LSE is that of the
 *   capped scores.
 *
 *   SINKS (since 0.5; fas_plan_args.use_sinks, gpt-oss's attention sinks): a learned logit s_h
 *   per query head joins every row's softmax as one more score that has no value. With x_j the
 *   scaled (and capped) scores of the keys a row of head h sees:
 *     out = sum_j exp(x_j) v_j / (sum_j exp(x_j) + exp(s_h)),  LSE = log(sum_j exp(x_j) + exp(s_h)).
 *   A plan made with use_sinks != 0 needs fas_plan_run_args.sinks in every run (DEVICE fp32
 *   [num_heads_q], 4-byte aligned, read when the kernel runs: a captured graph reads each
 *   replay's values); runs of other plans must pass NULL. A row that sees no key keeps out = 0
 *   and LSE = +infinity. Kernels that apply sinks: the SM90 16-bit kernels (varlen with or
 *   without a left window, packed, and chunked prefill over a paged cache; not the softcap
 *   kernels) and the paged family's decode kernel (16- and 32-row tiles, 16-bit and e4m3 caches;
 *   split plans count the sink once); fas_plan_create returns FAS_ERROR_NOT_BUILT, naming why,
 *   for a plan none of them serves (FA2, SM90 FP8 or softcap, the 64-row paged tiles). Merging
 *   partial attentions (fas_merge_states) over one set of queries: give the sinks to one part.
 *
 *   PACKED PLANS (SM90): a varlen batch of short sequences, e.g. the Qwen2.5-VL vision tower's
 *   windows of 64 patches or many short prompts, wastes most of a query tile when every
 *   sequence gets tiles of its own. Where a packed kernel is built (family "sm90_packed" in
 *   fas_get_kernel_info: fp16/bf16, head dims as the SM90 kernels, round-up included; `minimal`
 *   builds 96 and 128, `full` all five) and no softcap is asked for, fas_plan_create packs
 *   consecutive sequences into shared query tiles: every sequence with queries must fit one
 *   query tile and one key tile of the kernel (128 or 192 queries, 64 to 128 keys by head dim:
 *   fas_plan_info.query_tile_rows; at head dim 128 both are 128; at head dim 96, since 0.5, 64
 *   and 64, a kernel of which three CTAs share an SM), and the packs must number at most three
 *   quarters of those sequences (any number at head dim 96); else the plan is made as before. A packed tile's
 *   rows see only their own sequence's keys, cut by the causal mask and the left window of
 *   MASKS, so results equal an unpacked plan's (up to the summation order of floating point).
 *   fas_plan_info.packed is 1, query_tiles counts the packs, kernel_head_dim names the packed
 *   kernel (its head dim may exceed the one fas_query_plan_support names: `minimal` packs head
 *   dim 64 onto its hd96 kernel), and the schedule holds 4 bytes more per query row (device_bytes).
 *
 *   HEAD DIMS of the SM90 family: fp16/bf16 kernels exist for head dims 64, 96, 128, 192 and 256
 *   (`minimal` builds 64, 96 and 128; `full` all five), FP8 kernels for 64, 128, 192 and 256
 *   (`full`; none at 96: their V transpose works in 64 x 64 blocks; 96 rounds up). An fp16/bf16 varlen plan
 *   whose head_dim (a multiple of 8) has no kernel of its own runs on the kernel of the next
 *   larger built head dim (ROUND-UP: head dim 80, the Qwen2.5-VL vision tower's, and 72 or 88 run
 *   on 96; 112 on 128; 160 or 176 on 192): the kernel reads q, k and v at their real width (the
 *   missing columns count as zeros, so scores and the softmax are those of the real head dim) and
 *   writes only head_dim columns of out; nothing beyond them is read or written, so the tensors
 *   need no padding. fas_plan_info.kernel_head_dim names the kernel that runs, and
 *   fas_query_plan_support's *kernel_head_dim that of an unpacked plan (a packed one may run a
 *   larger head dim: PACKED PLANS). FP8 kernels of head dim up to 192 round up too, since 0.5, for
 *   head dims that are multiples of 16 (e4m3 heads start 16 bytes apart): 96 and 112 (and 80) run
 *   on 128, 160 and 176 on 192, 48 on 64; none on 256. Paged-KV kernels serve their exact head dim
 *   only. The scale default (1/sqrt(head_dim)) uses the real head dim.
 *
 *   FP8 (dtype FAS_DTYPE_E4M3, SM90 family only, plans only): q, k and v hold e4m3 values (1 byte
 *   each; row strides in elements must then be multiples of 16), out is fp16 or bf16 as
 *   fas_plan_args.out_dtype says. Each run may pass fp32 DESCALE factors in DEVICE memory:
 *   q_descale[num_heads_q], k_descale[num_heads_k], v_descale[num_heads_k] (real value = stored
 *   e4m3 value * descale of its head; NULL = 1; for a per-tensor scale fill every head with it).
 *   The kernel also rounds the softmax probabilities to e4m3 (scaled by 448) before the P*V
 *   product, so expect errors of a few percent of the output's magnitude against an exact
 *   reference on the same e4m3 inputs (tests/gpu/reference.h states the bound). There is no FA2
 *   fallback for FP8: fas_plan_create returns FAS_ERROR_NOT_BUILT or FAS_ERROR_UNSUPPORTED_DEVICE
 *   when no SM90 FP8 kernel can serve the plan. FP8 plans over a PAGED cache run on the paged
 *   family instead, with their own rules: FP8 KV CACHE.
 *
 *   Plan runs, both families: out has the varlen layout above; the scale, masking (bottom-right
 *   causal), GQA and alignment rules are those of fas_fwd. The LSE is natural-log, but its
 *   LAYOUT DEPENDS ON THE FAMILY and fas_plan_info.lse_layout states it:
 *     FA2 : FAS_LSE_HEAD_MAJOR  [num_heads_q, total_q] (as fas_fwd);
 *     SM90: FAS_LSE_TOKEN_MAJOR [total_q, num_heads_q] (the kernel's own layout; the run
 *           converts it from log2 to natural log in place with one small extra kernel).
 *   total_q is cu_seqlens_q[batch_size] (rows of q addressed from its base pointer).
 *
 * PAGED KV CACHE, FP8 KV CACHE and MIXED PLANS (the paged family's rules, and
 * fas_query_paged_support): flash_attn_standalone_paged.h.
 */
#ifndef FLASH_ATTN_STANDALONE_PLAN_H
#define FLASH_ATTN_STANDALONE_PLAN_H

#include "flash_attn_standalone.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel family used by a plan. */
typedef enum fas_family {
    FAS_FAMILY_FA2 = 0,
    FAS_FAMILY_SM90 = 1,
    FAS_FAMILY_PAGED = 2, /* tensor-core attention over a paged KV cache; decode (see PAGED KV CACHE) */
    FAS_FAMILY_MIXED = 3  /* a decode part on PAGED and a prefill part, one plan (see MIXED PLANS; since 0.4) */
} fas_family;

/* Where a plan's keys and values live. */
typedef enum fas_kv_layout {
    FAS_KV_VARLEN = 0, /* k, v in the varlen layout, offsets cu_seqlens_k (the default) */
    FAS_KV_PAGED = 1   /* k, v are paged caches; lengths kv_lengths (see PAGED KV CACHE) */
} fas_kv_layout;

/* Layout of the softmax LSE written by a plan run (see PLANS). */
typedef enum fas_lse_layout {
    FAS_LSE_HEAD_MAJOR = 0, /* [num_heads_q, total_q] */
    FAS_LSE_TOKEN_MAJOR = 1 /* [total_q, num_heads_q] */
} fas_lse_layout;

/* Opaque plan: a varlen batch layout bound to a kernel and its device-resident schedule. */
typedef struct fas_plan fas_plan;

/* Arguments of fas_plan_create. Initialise with fas_plan_args_init(). Same ABI rule as
 * fas_fwd_args: struct_size = sizeof(fas_plan_args), later versions only append fields. */
typedef struct fas_plan_args {
    size_t struct_size; /* must be sizeof(fas_plan_args) */
    fas_dtype dtype;

    /* HOST pointers to batch_size+1 non-decreasing int32 offsets, cu_seqlens_q[0] >= 0 (rows of
     * q/out for sequence i: cu_seqlens_q[i] .. cu_seqlens_q[i+1]-1; likewise k/v). Read only
     * during fas_plan_create; the plan keeps its own copies. */
    const int32_t* cu_seqlens_q;
    const int32_t* cu_seqlens_k;
    int batch_size;  /* > 0 */

    int num_heads_q; /* > 0 */
    int num_heads_k; /* > 0, divides num_heads_q */
    int head_dim;    /* multiple of 8 in [8, 256] */

    /* Elements between consecutive tokens; 0 = contiguous. Rules as in fas_fwd_args. */
    int64_t q_row_stride;
    int64_t k_row_stride;
    int64_t v_row_stride;
    int64_t out_row_stride;

    float softmax_scale; /* > 0, or 0 = 1/sqrt(head_dim) */
    int causal;          /* non-zero = causal mask, bottom-right aligned */
    int disable_sm90;    /* non-zero = use the FA2 family even where SM90 or the paged family could
                          * serve a varlen plan (ignored by paged-KV plans) */

    /* FA2 plans: stream of the current device for the upload during fas_plan_create, which
     * synchronizes it; 0 = legacy default stream. SM90 plans upload on the library's own
     * stream (see PLANS) and do not use it. Runs may use any stream of the device. */
    cudaStream_t stream;

    /* Element type of out when dtype is FAS_DTYPE_E4M3: FAS_DTYPE_FP16 or FAS_DTYPE_BF16.
     * Ignored for fp16/bf16 plans (out has the dtype of q). */
    fas_dtype out_dtype;

    /* ---- appended in 0.2: the paged KV cache (see PAGED KV CACHE) ---- */
    fas_kv_layout kv_layout; /* FAS_KV_VARLEN (0) or FAS_KV_PAGED */
    /* FAS_KV_PAGED: HOST array of batch_size key counts (>= 0), the new tokens' keys included;
     * cu_seqlens_k must then be NULL. Read only during fas_plan_create. */
    const int32_t* kv_lengths;
    int page_size;           /* FAS_KV_PAGED: keys per page, >= 1 */
    int num_pages;           /* FAS_KV_PAGED: pages in each cache (page ids are < num_pages) */
    int64_t k_page_stride;   /* FAS_KV_PAGED: elements between pages; 0 = page_size * k_row_stride */
    int64_t v_page_stride;   /* likewise for v */
    /* FAS_KV_PAGED, optional: a HOST copy of the page ids the runs will use (total_pages
     * entries, layout of fas_plan_run_args.page_indices); if set, creation checks that each is
     * in [0, num_pages). NULL = not checked. */
    const int32_t* page_indices_host;

    /* ---- appended in 0.3: local (sliding-window) attention and a logits softcap (see MASKS) ---- */
    int use_window;        /* non-zero: window_size_left / window_size_right apply; 0 = no window */
    int window_size_left;  /* with use_window: keys before a query's diagonal key that it sees, >= 0,
                            * or -1 = all of them */
    int window_size_right; /* with use_window: keys after the diagonal key, >= 0, or -1 = all; a
                            * causal plan takes 0 whatever is set here */
    /* > 0: logits softcap (Gemma 2: 50, Grok: 30): each score s = softmax_scale * q.k becomes
     * softcap * tanh(s / softcap) before the softmax; 0 = off (see MASKS) */
    float softcap;

    /* ---- appended in 0.4: an FP8 KV cache (see FP8 KV CACHE) ---- */
    /* FAS_KV_PAGED: element type of the caches: FAS_DTYPE_FP16 (0, the default) or dtype = the
     * caches hold dtype; FAS_DTYPE_E4M3 = they hold e4m3 values (q and out stay dtype) */
    fas_dtype kv_dtype;
    /* ---- appended in 0.5 ---- */
    int use_sinks; /* non-zero: runs pass sinks (see SINKS in MASKS); 0 = none */
    /* FAS_KV_PAGED: non-zero makes a device-length plan (DEVICE LENGTHS in
     * flash_attn_standalone_paged.h): kv_lengths are then each sequence's capacity, and the page
     * table a block table of max_pages_per_sequence ids per sequence */
    int device_lengths;
    int max_pages_per_sequence;
} fas_plan_args;

/* Arguments of fas_plan_run. Initialise with fas_plan_run_args_init(). */
typedef struct fas_plan_run_args {
    size_t struct_size; /* must be sizeof(fas_plan_run_args) */
    const void* q;      /* device pointers, 16-byte aligned, in the plan's layout */
    const void* k;
    const void* v;
    void* out;          /* shares no byte with q, k or v (see ALIASING) */
    float* softmax_lse; /* optional (NULL = not computed), num_heads_q * total_q floats, 4-byte
                         * aligned; layout fas_plan_info.lse_layout */
    cudaStream_t stream; /* stream of the plan's device; 0 = legacy default stream */

    /* FP8 plans only (ignored otherwise): optional DEVICE arrays of fp32 descale factors,
     * q_descale[num_heads_q], k_descale[num_heads_k], v_descale[num_heads_k], 4-byte aligned;
     * NULL = 1. Read by the kernel when it runs. See PLANS. Plans over an FP8 KV cache
     * (kv_dtype FAS_DTYPE_E4M3) REQUIRE k_descale and v_descale (see FP8 KV CACHE). */
    const float* q_descale;
    const float* k_descale;
    const float* v_descale;

    /* ---- appended in 0.2 ---- */
    /* Paged plans: DEVICE array of fas_plan_info.total_pages int32 page ids (CSR order, see
     * PAGED KV CACHE), 4-byte aligned; k and v are then the caches. Ignored otherwise. */
    const int32_t* page_indices;

    /* ---- appended in 0.5 ---- */
    /* Plans made with use_sinks: DEVICE fp32 [num_heads_q] sink logits (see SINKS); else NULL. */
    const float* sinks;
} fas_plan_run_args;

/* What fas_plan_get_info reports. Set struct_size = sizeof(fas_plan_info) before the call. */
typedef struct fas_plan_info {
    size_t struct_size;         /* must be sizeof(fas_plan_info) */
    fas_family family;          /* family that fas_plan_run launches */
    const char* family_name;    /* "fa2", "sm90", "paged" or "mixed"; static string */
    int kernel_head_dim;        /* head dim of the kernel that runs */
    fas_lse_layout lse_layout;  /* layout of softmax_lse written by fas_plan_run */
    int total_q;                /* cu_seqlens_q[batch_size] */
    int total_k;                /* cu_seqlens_k[batch_size]; 0 for a paged KV cache */
    int device;                 /* CUDA device the plan belongs to */
    size_t device_bytes;        /* device memory owned by the plan */
    const char* sm90_unused_reason; /* "" for SM90 plans, else why SM90 was not used; valid
                                     * until the plan is destroyed */

    /* ---- appended in 0.2 (0 for families where they do not apply) ---- */
    int kv_splits;        /* paged, SM90: most KV chunks one sequence is split into (1 = none) */
    int packed_gqa;       /* paged, SM90: query heads packed into one tile's rows per KV head (SM90: 1) */
    int query_tile_rows;  /* paged, SM90: rows of a query tile (paged family 16, 32 or 64, SM90 64-192) */
    int num_ctas;         /* paged, SM90: CTAs of the attention launch */
    int total_pages;      /* paged KV cache (either family): entries of fas_plan_run_args.page_indices
                           * (0 for other plans; contiguous-KV paged-family plans list their pages
                           * themselves) */
    int ctas_per_sm;      /* paged, SM90: CTAs per SM the attention launch is planned for; the decode
                           * kernel (16-row tiles) runs 1 on cards whose memory outruns its cp.async
                           * shapes (an H200: a persistent CTA per SM loading with the TMA engine) where
                           * pages hold a multiple of 8 rows or the KV is contiguous (17-32 rows per
                           * tile: 32-row tiles), and so on every card over an FP8 KV cache at head dim
                           * 128 or 256; otherwise 1 for long KV chunks (CTAs averaging more than 2048
                           * keys, head dim 128), else 2; over an FP8 KV cache 3 when the plan fills at
                           * most a wave of those, else 2; SM90 plans 1 */

    /* ---- appended in 0.3 ---- */
    int query_tiles;      /* SM90: query tiles the plan's schedule lists per query head (causal plans
                           * count empty pairing slots); fewer than the sequences when packed */
    int packed;           /* SM90: 1 when short sequences share query tiles (see PACKED PLANS) */

    /* ---- appended in 0.4 ---- */
    fas_family prefill_family; /* mixed plans: the family of the prefill part (SM90 or PAGED) */
    int decode_sequences;      /* mixed plans: sequences in the decode part (PAGED); 0 otherwise */
} fas_plan_info;

/* Sets every field of *args to zero and args->struct_size to sizeof(fas_plan_args). */
FAS_API void fas_plan_args_init(fas_plan_args* args);

/* Sets every field of *args to zero and args->struct_size to sizeof(fas_plan_run_args). */
FAS_API void fas_plan_run_args_init(fas_plan_run_args* args);

/* Makes a plan for the varlen layout in *args on the current device and stores it in *plan (set
 * to NULL on failure). Host work; may allocate device memory; see PLANS. */
FAS_API fas_status fas_plan_create(const fas_plan_args* args, fas_plan** plan);

/* Enqueues the forward pass of plan on args->stream. No host scheduling, host-to-device copy
 * or allocation. May be called concurrently with the same plan (see PLANS). Pending-CUDA-error
 * rule and validation as in fas_fwd. */
FAS_API fas_status fas_plan_run(const fas_plan* plan, const fas_plan_run_args* args);

/* Frees the plan: FA2 device memory with cudaFree, SM90 schedule memory back to the library's
 * cache. NULL is a no-op returning FAS_SUCCESS. Call only once every run of the plan has
 * completed and no other thread uses it. */
FAS_API fas_status fas_plan_destroy(fas_plan* plan);

/* Stream-ordered fas_plan_destroy, for engines that make a plan per batch and never wait for
 * the device: returns at once, and the plan's memory is released once `stream` has completed
 * the work enqueued on it before this call. Every run of the plan must be ordered before this
 * call on `stream` (enqueued on it, or joined to it with cudaStreamWaitEvent), and no other
 * thread may use the plan. The plan's device must be current. The handle is dead after a
 * FAS_SUCCESS return; on failure the plan stays live (fas_plan_destroy still frees it).
 *   SM90 and paged plans: the schedule block returns to the library's cache when the stream
 *     gets there; a later fas_plan_create reuses it. At most 8 blocks per device wait so; when
 *     8 are still waiting, the next fas_plan_create on that device waits for the oldest. On a
 *     stream that is capturing a CUDA graph the block belongs to that graph instead (the
 *     captured runs replay with it) and returns to the cache once the graph and every
 *     executable graph instantiated from it are destroyed.
 *   FA2 plans: this synchronizes `stream` and then frees as fas_plan_destroy does (their
 *     memory is freed with cudaFree, which must not overlap the runs).
 * NULL is a no-op returning FAS_SUCCESS. */
FAS_API fas_status fas_plan_destroy_async(fas_plan* plan, cudaStream_t stream);

/* Describes a plan: family, kernel head dim, LSE layout, memory, why SM90 was not used. */
FAS_API fas_status fas_plan_get_info(const fas_plan* plan, fas_plan_info* info);

/* Which family a plan for (dtype, head_dim, causal) would use on the CURRENT device, assuming a
 * layout the SM90 kernels accept (see PLANS for the layout conditions) and no window or softcap
 * (those may move a plan to another kernel or family: see MASKS), and the head dim of the kernel
 * that would run (SM90 or FA2 round-up: see HEAD DIMS) when the plan is not packed: a batch of
 * short sequences may run a packed kernel of a larger head dim instead (PACKED PLANS), which
 * fas_plan_info.kernel_head_dim names. For FAS_DTYPE_E4M3 it succeeds (family SM90) when an FP8
 * kernel with either output dtype is built; fas_get_kernel_info lists the output dtypes. On
 * FAS_SUCCESS stores the family in *family and the kernel head dim in *kernel_head_dim (either
 * may be NULL). FAS_ERROR_NOT_BUILT if no kernel fits, FAS_ERROR_INVALID_ARGUMENT for a bad
 * dtype or head_dim; device errors as fas_check_device. */
FAS_API fas_status fas_query_plan_support(fas_dtype dtype, int head_dim, int causal, fas_family* family,
                                          int* kernel_head_dim);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASH_ATTN_STANDALONE_PLAN_H */

/*
 * flash_attn_standalone.h - C API of libflash_attn_standalone: FlashAttention forward kernels
 * packaged as a shared library with no PyTorch dependency. Two kernel families:
 *   "fa2"  - FlashAttention-2 (FA2 2.8.3) forward kernels, batch and varlen layouts, split-KV;
 *   "sm90" - Hopper-native (FA3-class) varlen prefill kernels: FlashInfer's SM90 ragged prefill
 *            kernels (warp-specialized, TMA + wgmma, persistent), fp16/bf16 and FP8 e4m3
 *            inputs, sliding windows and a logits softcap, short sequences packed into shared
 *            query tiles, and chunked prefill over a paged KV cache, reached through the plan API.
 *   "paged" - attention over a paged KV cache for decode (1-8 query tokens per sequence): the
 *            project's decode kernel (16- and 32-row tiles) and FlashInfer's tensor-core batch kernel
 *            (64-row tiles), query heads of one KV head packed into the rows of one tile, the KV
 *            split across CTAs and merged when the batch alone does not fill the GPU, reached
 *            through the plan API (see PAGED KV CACHE).
 *
 * This header is the API documentation.
 *
 * OVERVIEW
 *   fas_fwd() computes softmax(scale * Q K^T [+ causal mask]) V for fp16 or bf16 tensors that
 *   already live in device memory, asynchronously on a caller-provided stream, with the FA2
 *   family, except batch-layout requests the plan families serve (BATCH-LAYOUT fas_fwd ON PLANS
 *   below), which run on the SM90 or paged family through a plan made inside the call. The plan API (fas_plan_create / fas_plan_run / fas_plan_destroy, see PLANS in flash_attn_standalone_plan.h)
 *   does the same for the varlen layout in two steps: a plan made once from the batch layout
 *   (host copies of the offsets), then any number of runs that reuse it; it uses the SM90
 *   family where this build and the device have it, FA2 otherwise.
 *   Only the kernels chosen at build time are present; use the capability queries
 *   (fas_num_kernels, fas_get_kernel_info, fas_query_support, fas_query_plan_support) to find
 *   out what a given build holds, and fas_check_device() to find out whether a GPU can run it.
 *
 * TENSOR LAYOUTS (all element counts and strides are in ELEMENTS of the dtype, not bytes)
 *   Within a token, the heads are contiguous and each head holds head_dim contiguous elements:
 *   head stride = head_dim, element stride = 1. Between tokens the row stride applies
 *   (q_row_stride etc.; 0 means contiguous, i.e. num_heads * head_dim).
 *
 *   Batch (padded) layout - cu_seqlens_q and cu_seqlens_k both NULL:
 *     q, out : [batch_size, max_seqlen_q, num_heads_q, head_dim]
 *     k, v   : [batch_size, max_seqlen_k, num_heads_k, head_dim]
 *     The batch stride is max_seqlen * row_stride. Every sequence has exactly max_seqlen_q
 *     queries and max_seqlen_k keys.
 *
 *   Varlen (packed) layout - cu_seqlens_q and cu_seqlens_k both set:
 *     q, out : [total_q, num_heads_q, head_dim], sequence i = rows cu_seqlens_q[i] ..
 *              cu_seqlens_q[i+1]-1
 *     k, v   : [total_k, num_heads_k, head_dim], sequence i = rows cu_seqlens_k[i] ..
 *              cu_seqlens_k[i+1]-1
 *     cu_seqlens_* are DEVICE pointers to batch_size+1 non-decreasing int32 offsets. Each
 *     sequence length must be <= max_seqlen_q / max_seqlen_k; this cannot be checked on the host
 *     (the arrays live on the device) and longer sequences are silently truncated.
 *
 *   GQA / MQA: num_heads_q must be a multiple of num_heads_k; query head h reads key/value head
 *   h / (num_heads_q / num_heads_k).
 *
 *   Causal masking is aligned to the bottom-right corner like FA2: in a sequence with sq queries
 *   and sk keys, query row i attends key j iff j <= i + sk - sq. Query rows that see no key at
 *   all (only possible when sq > sk) get out = 0 and LSE = +infinity.
 *
 * SOFTMAX LSE (optional output, float32, natural logarithm of the row sum of exp(scale*q.k))
 *   Batch layout : [batch_size, num_heads_q, max_seqlen_q]
 *   Varlen layout: [num_heads_q, total_q], indexed by the absolute row of q; total_q is
 *                  args->total_q, the number of rows of q (cu_seqlens_q[batch_size] when the
 *                  offsets start at 0), which must be set whenever softmax_lse is not NULL.
 *
 * ALIASING
 *   out must share no byte with q, k or v: the kernels read the inputs while they write out.
 *   Every call checks the byte ranges the tensors' rows span from their base pointers (rows x
 *   row stride) and returns FAS_ERROR_INVALID_ARGUMENT on overlap; rows that interleave within
 *   one row stride without sharing bytes (q and out as the two halves of each row of one buffer)
 *   are accepted, and q, k and v may overlap each other (a packed QKV buffer). The rows checked
 *   are the ones the library knows on the host: batch_size * max_seqlen in the batch layout,
 *   cu_seqlens_*[batch_size] for plans, and for fas_fwd's varlen layout total_q (when set, else
 *   max_seqlen_q) rows of q and out and max_seqlen_k rows of k and v.
 *
 * ALIGNMENT
 *   q, k, v, out and workspace must be 16-byte aligned and all row strides multiples of 8
 *   elements (kernels use 16-byte vector accesses); softmax_lse, cu_seqlens_q and cu_seqlens_k
 *   must be 4-byte aligned.
 *
 * HEAD DIMENSIONS
 *   head_dim must be a multiple of 8 in [8, 256]. A head_dim that has no FA2 kernel of exactly
 *   that size is served by the smallest built FA2 kernel head dim above it (the kernel masks the
 *   extra columns, as FA2's own wrapper does); fas_query_support reports which one. SM90 plans
 *   round up the same way (fp16/bf16 kernels at 64, 96, 128, 192 and 256: e.g. 80 runs on 96;
 *   FP8 ones up to 192 for multiples of 16, e.g. 96 on 128; paged-KV kernels serve their exact
 *   head dim): HEAD DIMS in
 *   flash_attn_standalone_plan.h; fas_query_plan_support reports which kernel serves.
 *
 * DEVICE AND STREAM
 *   fas_fwd runs on the calling thread's current CUDA device (cudaSetDevice); args->stream
 *   must belong to that device (0 = legacy default stream). The call returns once the work is
 *   enqueued; results are ready when the stream reaches that point. Inputs must stay alive and
 *   unchanged until then.
 *
 * WORKSPACE AND MEMORY OWNERSHIP
 *   The library never keeps caller memory beyond the call's stream work and never frees it.
 *   Some calls need device scratch: on FA2, the LSE when softmax_lse is NULL and the split-KV
 *   accumulators when the split-KV kernel is chosen (batch layout, short query, long key, and
 *   not a call that runs on a plan); on a plan, the plan's own LSE when softmax_lse is asked for
 *   with max_seqlen_q > 1, and the partial results of a split of the keys on SM90 (below).
 *   fas_fwd_workspace_size() reports the bytes; pass that much in workspace/workspace_bytes to
 *   avoid allocation. Otherwise (workspace NULL or too small) fas_fwd allocates the scratch
 *   with cudaMallocAsync and releases it with cudaFreeAsync, both on args->stream. A workspace
 *   must not be used by other work that can run concurrently with the call on the device.
 *
 * BATCH-LAYOUT fas_fwd ON PLANS
 *   A batch-layout call with at least one key per sequence (causal: at least as many keys as
 *   queries) and out contiguous (out_row_stride 0 or num_heads_q * head_dim), on an SM90 device,
 *   runs on a plan where this build has, with at most 8 queries per sequence, a paged decode
 *   kernel for it, or an SM90 kernel for the dtype, head dim (or one above it) and mask.
 *   With few query tiles over long keys (the SM90 kernel's query tiles times num_heads_q fill at
 *   most half of the SMs, and the keys before the last max_seqlen_q, rounded up to 128, make two
 *   chunks of at least 2048) the SM90 kernels split the keys: the chunks every query sees whole on
 *   the non-causal kernel (which a causal call needs too), the last one on the causal kernel, and
 *   the partial outputs, rounded to the dtype, merged by their LSE; fas_fwd_workspace_size then
 *   reports their scratch (partial outputs and LSEs, each chunk's copy of q). A call whose SM90
 *   tiles fill less than half of the SMs stays on FA2 where this build's split-KV kernel would
 *   divide its keys (fas_fwd_workspace_size then reports its accumulators) and either its keys
 *   are too short for that split or batch_size * max_seqlen_q * max_seqlen_k * num_heads_q *
 *   head_dim is below 2^32 (less work than repays the split's fixed cost against FA2's).
 *   Else fas_fwd makes a plan for the
 *   call (host offsets i * max_seqlen_q and i * max_seqlen_k; the plan API's family choice,
 *   fas_plan_create), runs it once and releases it
 *   with fas_plan_destroy_async on args->stream. Its device memory comes from the library's cache
 *   of plan blocks, so fas_fwd_workspace_size() reports 0 for such a call, or, with softmax_lse
 *   and max_seqlen_q > 1, batch_size * max_seqlen_q * num_heads_q * 4 bytes: the plan writes its
 *   LSE token-major there and a small kernel on args->stream reorders it into the batch layout
 *   above (should the plan turn out to be FA2's, for a layout the SM90 kernels refuse, the call
 *   runs FA2 and allocates its scratch with cudaMallocAsync as above). While args->stream is
 *   capturing a CUDA graph (any capture mode) the call is captured the same way: the plan is made
 *   during the capture, which may allocate device and pinned host memory and wait on the host for
 *   its upload (under a relaxed capture mode on the calling thread, touching no captured stream),
 *   and the graph owns the plan's memory until it and every executable graph made from it are
 *   destroyed; replays give the eager call's results bit for bit. Results agree with FA2's within
 *   the same precision; they are not bit-identical to it.
 *
 * ERRORS
 *   Every function returning fas_status validates its arguments before it launches anything and
 *   never aborts or exits the process. On failure it returns a non-zero status and stores a
 *   message for fas_get_last_error() that names the problem and how to fix it. CUDA errors
 *   raised by the library's own calls are consumed (cudaGetLastError) after being reported.
 *   If a non-sticky CUDA error from earlier caller code is still pending on the thread when
 *   fas_fwd is called, fas_fwd returns FAS_ERROR_CUDA without launching and leaves that error
 *   pending, so that it is not blamed on the kernel launch.
 *
 * THREAD SAFETY
 *   All functions may be called concurrently from several threads, on different or the same
 *   streams, with one exception: fas_plan_destroy(_async) must not overlap any other use of the
 *   same plan (see PLANS). The last-error message is per thread. The global state is a lazily
 *   filled cache of per-device properties (compute capability, SM count) and the cache of SM90
 *   schedule blocks, each guarded by a mutex.
 *
 * PLANS AND THE PAGED KV CACHE
 *   are documented in flash_attn_standalone_plan.h and flash_attn_standalone_paged.h, which this
 *   header includes at its end.
 *
 * ABI
 *   fas_fwd_args begins with struct_size, which must be sizeof(fas_fwd_args) of the header the
 *   caller compiled against. Later versions only append fields; the library reads only the
 *   fields that fit within struct_size (the rest count as zero) and rejects struct_size smaller
 *   than the first version of the struct. The same holds for fas_plan_args, fas_plan_run_args
 *   and fas_plan_info (fields appended in 0.2: kv_layout and what follows it; in 0.3:
 *   fas_plan_args.use_window and what follows it, up to softcap, and fas_plan_info.query_tiles
 *   and packed; in 0.4: fas_plan_args.kv_dtype, fas_plan_info.prefill_family and
 *   decode_sequences).
 */
#ifndef FLASH_ATTN_STANDALONE_H
#define FLASH_ATTN_STANDALONE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#if defined(__GNUC__)
#define FAS_API \
    __attribute__((visibility("default")))
#else
#define FAS_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fas_status {
    FAS_SUCCESS = 0,
    FAS_ERROR_INVALID_ARGUMENT = 1,
    /* The dtype / head dim / variant was not compiled into this build. */
    FAS_ERROR_NOT_BUILT = 2,
    /* The current device cannot run the code in this build (wrong compute capability). */
    FAS_ERROR_UNSUPPORTED_DEVICE = 3,
    /* A CUDA runtime call or kernel launch failed; the message carries the CUDA error. */
    FAS_ERROR_CUDA = 4,
    /* Unexpected internal failure (e.g. out of host memory); the message says what. */
    FAS_ERROR_INTERNAL = 5
} fas_status;

typedef enum fas_dtype {
    FAS_DTYPE_FP16 = 0, /* IEEE binary16 */
    FAS_DTYPE_BF16 = 1, /* bfloat16 */
    FAS_DTYPE_E4M3 = 2  /* FP8 e4m3 (OCP, max 448): q/k/v of FP8 plans only (see PLANS) */
} fas_dtype;

/* Arguments of fas_fwd / fas_fwd_workspace_size. Initialise with fas_fwd_args_init() or
 * FAS_FWD_ARGS_INIT so that struct_size is right and every optional field is zero. */
typedef struct fas_fwd_args {
    size_t struct_size; /* must be sizeof(fas_fwd_args) */
    fas_dtype dtype;    /* element type of q, k, v and out */

    const void* q;      /* device pointers, 16-byte aligned, layouts above */
    const void* k;
    const void* v;
    void* out;          /* same layout and row-stride rules as q; shares no byte with q, k or v
                         * (see ALIASING) */
    float* softmax_lse; /* optional device output (may be NULL), layout above */

    /* Device pointers to batch_size+1 int32 offsets each. Both NULL = batch (padded) layout,
     * both set = varlen layout; exactly one set is an error. */
    const int32_t* cu_seqlens_q;
    const int32_t* cu_seqlens_k;

    int batch_size;   /* > 0 */
    int max_seqlen_q; /* batch layout: the query length; varlen: upper bound per sequence */
    int max_seqlen_k; /* batch layout: the key length;   varlen: upper bound per sequence */
    int num_heads_q;  /* > 0 */
    int num_heads_k;  /* > 0, divides num_heads_q */
    int head_dim;     /* multiple of 8 in [8, 256] */

    /* Elements between consecutive tokens; 0 = contiguous (num_heads * head_dim). Must be a
     * multiple of 8 and >= num_heads * head_dim. The head stride is always head_dim. */
    int64_t q_row_stride;
    int64_t k_row_stride;
    int64_t v_row_stride;
    int64_t out_row_stride;

    float softmax_scale; /* > 0, or 0 = 1/sqrt(head_dim) */
    int causal;          /* non-zero = causal mask, bottom-right aligned (see above) */

    cudaStream_t stream; /* stream of the current device that runs the work; 0 = default */

    /* Optional device scratch, 16-byte aligned; see WORKSPACE above. */
    void* workspace;
    size_t workspace_bytes;

    /* Varlen layout: number of rows of q (and out), >= cu_seqlens_q[batch_size]; it is the head
     * stride of the LSE. Required (> 0) when softmax_lse is set in the varlen layout; otherwise
     * optional (0 = unknown), used only by the aliasing check (see ALIASING). The library cannot
     * derive it on the host without reading cu_seqlens_q back from the device, which would
     * block. Without softmax_lse the kernel's LSE goes to scratch in the padded
     * [batch_size, num_heads_q, max_seqlen_q] layout, whose size does not depend on where the
     * offsets start. */
    int total_q;
} fas_fwd_args;

/* Initialiser equivalent to fas_fwd_args_init(), for declarations:
 *     fas_fwd_args args = FAS_FWD_ARGS_INIT;
 * Every field is spelled out so that -Wmissing-field-initializers stays quiet; keep it in step
 * with the struct. */
#define FAS_FWD_ARGS_INIT                                                         \
    {                                                                             \
        sizeof(fas_fwd_args), FAS_DTYPE_FP16, NULL, NULL, NULL, NULL, NULL, NULL, \
        NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0f, 0, NULL, NULL, 0, 0             \
    }

/* Describes one kernel compiled into this build. */
typedef struct fas_kernel_info {
    fas_dtype dtype;
    int head_dim;       /* the kernel's head dim; it also serves smaller head_dim requests */
    int causal;         /* 1 = causal variant, 0 = non-causal */
    int split_kv;       /* 1 = split-KV (decode-oriented) variant, 0 = plain forward */
    const char* family; /* kernel family, "fa2" (fas_fwd and FA2 plans), "sm90" (plans only, compute
                         * capability 9.0; fp16/bf16 ones also serve narrower head dims: see HEAD
                         * DIMS in flash_attn_standalone_plan.h), "sm90_softcap" (the same with a
                         * logits softcap; since 0.3), "sm90_fp8_window" (FP8 plans with a left
                         * window; since 0.5), "sm90_fp8_softcap" (FP8 plans with a softcap, window
                         * or not; since 0.5), "sm90_packed" (short sequences sharing query
                         * tiles: PACKED PLANS; causal 0, serves causal plans too; since 0.3),
                         * "sm90_paged" (over a paged KV cache: chunked
                         * prefill, exact head dim; since 0.2), "sm90_paged_softcap" (the same with
                         * a logits softcap; since 0.5) or "paged" (plans only, exact head
                         * dim, 9.0; split_kv = 1; listed once per query tile size) or
                         * "paged_e4m3kv" (the same over an FP8 e4m3 KV cache: dtype is q's, or
                         * out's under e4m3 q; since 0.4); static string */
    fas_dtype out_dtype; /* element type of out: dtype itself, or fp16/bf16 for an E4M3 kernel */
} fas_kernel_info;

/* Sets every field of *args to zero and args->struct_size to sizeof(fas_fwd_args). */
FAS_API void fas_fwd_args_init(fas_fwd_args* args);

/* Enqueues the attention forward pass on args->stream. See the sections above. */
FAS_API fas_status fas_fwd(const fas_fwd_args* args);

/* Stores in *bytes the workspace size that lets fas_fwd(args) run without allocating (0 when
 * no scratch is needed). Performs the same validation and device check as fas_fwd; the
 * result depends on the shapes, head_dim, causal, softmax_lse == NULL and the current device,
 * not on the data pointers. */
FAS_API fas_status fas_fwd_workspace_size(const fas_fwd_args* args, size_t* bytes);

/* Message of the last failing call made on this thread, or "" if none failed yet. Successful
 * calls leave it unchanged. The pointer stays valid until the next failing call on this
 * thread. */
FAS_API const char* fas_get_last_error(void);

/* Library version (semantic versioning). Any pointer may be NULL. */
FAS_API void fas_get_version(int* major, int* minor, int* patch);

/* Library version as "MAJOR.MINOR.PATCH"; static string. */
FAS_API const char* fas_version_string(void);

/* Number of kernels compiled into this build. */
FAS_API int fas_num_kernels(void);

/* Describes kernel number index, 0 <= index < fas_num_kernels(). */
FAS_API fas_status fas_get_kernel_info(int index, fas_kernel_info* info);

/* Whether fas_fwd can serve (dtype, head_dim, causal) with a plain (non split-KV) kernel of
 * this build. On FAS_SUCCESS stores the head dim of the kernel that will run in
 * *kernel_head_dim (if kernel_head_dim is not NULL): head_dim itself or the smallest built
 * head dim above it. FAS_ERROR_NOT_BUILT if no kernel fits, FAS_ERROR_INVALID_ARGUMENT for a
 * head_dim that no build can serve. Does not touch the GPU. It answers for FA2: a batch-layout
 * call (BATCH-LAYOUT fas_fwd ON PLANS) runs on the SM90 or paged kernel fas_query_plan_support or
 * fas_query_paged_support reports, where one is built. */
FAS_API fas_status fas_query_support(fas_dtype dtype, int head_dim, int causal,
                                     int* kernel_head_dim);

/* FAS_SUCCESS if CUDA device number `device` can run this build: compute capability 9.0 for the
 * sm_90a code (and 8.x when the build also contains sm_80 code). Otherwise
 * FAS_ERROR_UNSUPPORTED_DEVICE (message names the device's capability),
 * FAS_ERROR_INVALID_ARGUMENT for a device number that does not exist, or FAS_ERROR_CUDA. */
FAS_API fas_status fas_check_device(int device);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* The plan API (PLANS, PAGED KV CACHE), KV APPEND and MERGE STATES: including this header gives
 * the whole C API. */
#include "flash_attn_standalone_plan.h"
#include "flash_attn_standalone_paged.h"
#include "flash_attn_standalone_kv_append.h"
#include "flash_attn_standalone_merge.h"

#endif /* FLASH_ATTN_STANDALONE_H */

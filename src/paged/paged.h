// The paged families as the API sees them, free of kernel types: attention over a paged KV
// cache that packs the query heads of one KV head into the rows of a query tile and splits long
// KVs across CTAs, merged after. 16-row tiles (decode: 1-8 query tokens per sequence) run the
// project's own kernel (decode.cuh); 64-row tiles (longer queries, prefill over cached pages)
// FlashInfer's FA2-class tensor-core batch prefill (launch.cuh). Kernel TUs
// (kernels/paged_*.cu) define launch_paged / occupancy_paged from those templates. KV caches
// hold q's type, or FP8 e4m3 with per-KV-head descales (the decode kernel only, at any query
// length: fp8_kv.cuh), under fp16/bf16 q or e4m3 q with per-head descales (an FP8 plan).
#ifndef FAS_PAGED_PAGED_H
#define FAS_PAGED_PAGED_H

#include "flash_attn_standalone.h"

#include <cuda.h>  // CUtensorMap (a type only: the library calls the driver through cudart)
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/device_block.h"
#include "core/layout.h"

namespace fas_paged {

// The decode kernel's shapes (16-row tiles), chosen per plan: kShort and kLong load with cp.async
// (decode.cuh), kStream, kWideStream (twice the consumer warps), kPairStream (32-row tiles, two
// 16-row blocks on each stage) and kFineStream (stages of half the keys) with the TMA engine
// (decode_tma.cuh). The 64-row kernel has kShort only.
enum DecodeShape : int { kShort = 0, kLong = 1, kStream = 2, kWideStream = 3, kPairStream = 4, kFineStream = 5 };
constexpr bool is_stream(DecodeShape shape) {
    return shape == kStream || shape == kWideStream || shape == kPairStream || shape == kFineStream;
}

// Everything one launch reads; device pointers unless said. Int32 arrays come from the plan's
// schedule (schedule.cpp), tensors from the run.
struct LaunchArgs {
    const void* q;
    void* out;
    float* lse;            // token-major [rows, num_heads_q], log2 as the kernel writes it; may be NULL
    const void* k_cache;
    const void* v_cache;
    int64_t q_row_stride;  // elements
    uint32_t k_page_stride, k_row_stride, v_page_stride, v_row_stride;  // elements
    int num_heads_q, num_heads_k, page_size, batch_size;
    float softmax_scale;
    const int32_t* page_indices;
    const int32_t* page_indptr;    // [batch + 1]
    const int32_t* last_page_len;  // [batch]
    const int32_t* q_indptr;       // [batch + 1], absolute rows of q
    const int32_t* o_indptr;       // [batch + 1]: rows of out, or of the partial buffer when split
    const int32_t* request_indices, *qo_tile_indices, *kv_tile_indices;  // [num_ctas]
    const int32_t* kv_chunk_size;  // [1]
    int num_ctas;
    // Device-length plans (fas_plan_update): the CTA count of the latest update ([1] on the device,
    // read after the previous kernel; num_ctas is then the plan's most, which sizes the grid).
    // NULL: a host plan.
    const int32_t* device_ctas;
    // Split plans: the kernel writes partial rows (tmp_v, tmp_s), the merge combines them.
    bool split;
    void* tmp_v;
    float* tmp_s;
    const int32_t* merge_indptr;  // [merge_rows + 1]
    // Split decode plans that fold in the kernel (fold.cuh): an arrival count per 16-row tile
    // (fold_slot), zero between runs; the CTA that stores a tile's last chunk folds the tile into
    // out, and no merge kernel follows. NULL: the merge kernel folds.
    int32_t* fold_counts;
    int merge_rows;               // rows of out from first_row on
    int first_row;                // cu_seqlens_q[0]
    int sm_count;
    DecodeShape shape;            // of the decode kernel (the 64-row kernel: kShort)
    // The decode kernel's masks beyond causal (the 64-row kernel takes neither): a left window
    // (-1: none; the plan's KV chunks start at window_start) and the logits softcap (0: off).
    int window_left;
    float softcap;
    // FP8 (e4m3) caches: real K = stored * k_descale[kv_head], V likewise; [num_heads_k] floats
    // on the device, NULL meaning 1. 16-bit caches ignore them.
    const float* k_descale;
    const float* v_descale;
    // e4m3 caches only: q holds e4m3 values too (an FP8 plan; a q row stride in bytes), real q =
    // stored * q_descale[q_head] ([num_heads_q] floats, NULL meaning 1); out stays T. The e4m3
    // TUs compile each shape twice, for 16-bit and for e4m3 q, and q_fp8 picks the launch.
    bool q_fp8;
    const float* q_descale;
    // The decode kernel: sink logits per query head ([num_heads_q] fp32 on the device, natural-log
    // units), counted once per row: unsplit, or in a split plan's first chunk; NULL = none.
    const float* sinks;
    // kStream: the caches as tensor maps (tensor_map.h; a box is 1 << box_shift rows of one
    // 128-byte segment of a KV head's row), the plan's with each run's cache address. tma_flat:
    // the map's rows are the cache's rows, one page of them (contiguous KV: row = the first
    // page's id + key); else rows of a page, and pages.
    int box_shift;
    bool tma_flat;
    CUtensorMap k_map, v_map;
    // Stream shapes, unsplit launches of more work items than CTAs (decode_items.cuh, the tail;
    // last, so that the fields before keep their offsets in the kernels' parameter space):
    // the items past the last whole round are cut into pieces spread over the CTAs; a piece of an
    // item cut in several writes fp32 rows here ([item][piece][tile row] x head_dim, and their log2
    // LSE), and the CTA that stores an item's last piece folds them into out (an arrival count per
    // item and 16-row block, zero between runs). NULL: no tail.
    float* tail_v;
    float* tail_s;
    int32_t* tail_counts;
};

using LaunchFn = cudaError_t (*)(const LaunchArgs&, cudaStream_t);
// CTAs per SM on the current device of the kernel in one shape (0: it has no such shape); also
// opts that kernel into its dynamic shared memory there (a per-device attribute), which is why
// plan creation calls it before any of the plan's runs.
using OccupancyFn = cudaError_t (*)(DecodeShape shape, int* ctas_per_sm);

// Defined by each kernel TU (explicit specializations; registry.cpp lists them). Dtype (q and
// out) and KvDtype (the caches: Dtype, or FAS_DTYPE_E4M3) are fas_dtype values.
template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t launch_paged(const LaunchArgs& args, cudaStream_t stream);
template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t occupancy_paged(DecodeShape shape, int* ctas_per_sm);

// The decode kernel (16-row tiles) has three shapes, chosen per plan. Stream (and its wide form): a
// persistent CTA per SM whose producer warp copies boxes of page rows with the TMA engine while
// consumer warps compute (docs/design/decode-roofline.md), every plan whose pages hold a multiple
// of kMinStreamBox rows (and contiguous KV) on the cards below, and e4m3 plans at head dims 128
// and 256 on every card. The other two, whose warps both load (cp.async, a row at a time) and compute, take
// the other plans. Short: two CTAs per SM, each warp 16 keys of a 64-key stage (32 at head dim
// 256). Long (head dim 128): one CTA per SM, each warp 32 keys of a 128-key stage in a 200 KiB
// ring, planned when its CTAs average more than kLongDecodeMinKeys keys (docs/design/decode-plan.md,
// "Two shapes"). e4m3 caches: the second shape is instead "dense",
// three CTAs per SM of the short shape's stages in 64 KiB rings, planned when the plan fills at
// most one wave of it (split plans) or, unsplit, when its waves cost no more
// (docs/design/mixed-and-fp8-kv.md). The planner learns which shapes a kernel has, and their CTAs
// per SM, from OccupancyFn.
constexpr bool has_long_decode(int head_dim, int tile_q, bool fp8_kv = false) {
    return tile_q == 16 && (head_dim == 128 || fp8_kv);
}
constexpr int kLongDecodeMinKeys = 2048;
// Rows per TMA copy of the stream shape: 16 (pages of a multiple of 16 rows, and contiguous KV:
// on an H200 16-row copies streamed as fast as 128-row ones, bench/stream_probe.cu), else 8.
constexpr int kStreamBoxRows = 16;
constexpr int kMinStreamBox = 8;
// The stream shape where the card's DRAM can move at least this many bytes per SM per SM clock
// (fas::DeviceProps): the other shapes stop at ~11.5 (their instruction stream, ~3 TB/s on 132
// SMs at 1.98 GHz), at the H100's roofline (12.8) but a quarter short of the H200's (18.4), where
// the stream shape's copies reach ~16.5; on the H100 they are 3-6% slower than the cp.async
// shapes (docs/design/decode-roofline.md).
constexpr double kStreamMinBytesPerSmClock = 15.0;

// e4m3 caches at head dims 128 and 256 take a stream shape on every card: on the H100 too their
// cp.async shapes were 0.5-18% slower at 128, and at 256 up to 13% slower on five rows of six (5%
// faster at 8 x 32k). At head dim 64 the H100's dense shape was faster (37 against 42 us at
// 64 x 4k), so the card rule stands there.
constexpr bool streams_on_any_card(int head_dim, bool fp8_kv) { return fp8_kv && head_dim >= 128; }

// The wide stream shape: 8 consumer warps, two per scheduler, for e4m3 caches up to head dim 128
// on the cards above. An e4m3 stage carries twice the keys per byte, and one warp per scheduler
// left the chains of widening and mma exposed: on an H200 at hd128 4 warps read 2.3-3.4 TB/s, 8
// warps 2.4-3.9 (hd64: 14-17% faster). On an H100 8 were 0-5% slower than 4, and for 16-bit caches
// slower on both cards.
constexpr bool has_wide_stream(int head_dim, bool fp8_kv) { return fp8_kv && head_dim <= 128; }
// The pair shape: the stream shape with 32-row query tiles (two 16-row blocks, each with its own
// 4 consumer warps on the same stages), for plans of 17-32 packed rows per sequence (speculative
// decode: 4 queries x GQA 8) that would otherwise take the 64-row kernel. 16-bit caches up to
// head dim 128 (at 256 a warp's O would not fit the 168 registers of 9 warps), on the stream
// shape's cards and, since device-length plans need it, on the others too: on an H200 it ran 64 x
// 4k 4-query GQA 8 at 73 us against the 64-row kernel's 89 (docs/design/decode-roofline.md).
constexpr bool has_pair_stream(int head_dim, bool fp8_kv) { return !fp8_kv && head_dim <= 128; }
constexpr int kPairTileRows = 32;
// The fine shape: the stream shape with stages of 16 keys per consumer warp (6 x 32 KiB at head
// dim 128 instead of 3 x 64 KiB), so that more of the ring is in flight while the consumers hold
// one stage. For 16-bit contiguous KV on the stream shape's cards: on an H200 it read contiguous
// keys 1-3.5% faster, and pages of 16 1-6% slower (docs/design/decode-roofline.md), so pages keep
// kStream. Head dim 256 already stages 16 keys a warp.
constexpr bool has_fine_stream(int head_dim, bool fp8_kv) { return !fp8_kv && head_dim <= 128; }
constexpr int stream_consumer_warps(bool wide) { return wide ? 8 : 4; }
// The wide shape at head dim 64 (e4m3) takes 64 keys a warp a stage, not 32 (stages of 512 keys,
// 64 KiB as at head dim 128), so that a stage's fixed work (the row max's shuffles, O's rescale,
// barriers, bookkeeping) spreads over twice the keys: 10-12% faster on an H200
// (docs/design/decode-e4m3.md, "Head dim 64"). FAS_DECODE_HD64_E4M3_WARP_KEYS=32 builds the old
// shape for comparison.
#ifndef FAS_DECODE_HD64_E4M3_WARP_KEYS
#define FAS_DECODE_HD64_E4M3_WARP_KEYS 64
#endif
// Keys per stage of the stream shapes: 32 per consumer warp (16 for 16-bit caches at head dim 256,
// whose warps hold twice the accumulators, and in the fine shape).
constexpr int stream_keys(int head_dim, bool fp8_kv, bool wide = false, bool fine = false) {
    if ((head_dim == 256 && !fp8_kv) || fine) return 16 * stream_consumer_warps(wide);
    if (head_dim == 64 && fp8_kv && wide) return FAS_DECODE_HD64_E4M3_WARP_KEYS * stream_consumer_warps(wide);
    return 32 * stream_consumer_warps(wide);
}
// The stream producer copies a box of rows a lane (decode_producer.cuh): a shape serves boxes of
// `box_rows` only where its stages hold at most 32 of them.
constexpr bool stream_boxes_fit(int keys, int box_rows) { return box_rows > 0 && keys / box_rows <= 32; }

// Rows of keys one CTA loads per iteration (split chunks are multiples): decode.cuh's stage for
// 16-row tiles (the same for e4m3 caches: their stages hold as many keys in half the bytes),
// launch.cuh's KV tile for 64-row ones.
constexpr int kv_tile_rows(int head_dim, int tile_q, DecodeShape shape = kShort, bool fp8_kv = false) {
    if (tile_q != 16) return head_dim <= 128 ? 128 : 64;
    if (is_stream(shape)) return stream_keys(head_dim, fp8_kv, shape == kWideStream, shape == kFineStream);
    return shape == kLong && !fp8_kv ? 128 : head_dim <= 128 ? 64 : 32;
}

// The first key any query of a sequence sees under a left window (FlashAttention's, bottom-right
// aligned: query i of qo_len sees keys from i + kv_len - qo_len - window_left on); 0 without one.
// Planner and kernel both count a sequence's KV chunks from here.
constexpr int window_start(int kv_len, int qo_len, int window_left) {
    return window_left < 0 || kv_len - qo_len - window_left < 0 ? 0 : kv_len - qo_len - window_left;
}

// The tail of a stream launch (LaunchArgs::tail_v): at most this many leftover items (fewer than
// the grid, one CTA per SM) and pieces per item (the decode kernel folds them itself).
constexpr int kTailMaxItems = 160;  // a multiple of 32, at least the H100's and H200's 132 SMs
constexpr int kTailMaxPieces = 4;

// Bytes per element of a split plan's partial rows: fp32 from both kernels (launch.cuh).
constexpr int kPartialElementBytes = 4;

// The fold of a split row's chunks (fold.cuh) keeps this many running states, chunk c in state
// c % kFoldStates; the planner lets the decode kernel fold tiles of at most this many chunks
// (plan.cpp: one round of loads).
constexpr int kFoldStates = 8;

struct Kernel {
    fas_dtype dtype;     // q and out
    fas_dtype kv_dtype;  // the caches: dtype, or FAS_DTYPE_E4M3
    int head_dim;
    bool causal;
    int tile_q;  // query tile rows: 16 (decode) or 64
    const char* family;  // fas_kernel_info.family (its build family's info_family, kernel_registry.inc)
    LaunchFn launch;
    OccupancyFn occupancy;
};

int num_kernels();
const Kernel& kernel(int index);

// The kernel for a layout: the 16-row tile when max_query_len * group fits it (causal kernels
// serve non-causal single-query plans too: one query sees every key either way), else 64 rows.
// E4M3 caches: the 16-row e4m3 kernel at any query length (several 16-row tiles per sequence;
// there is no 64-row one). pair_tiles: the caches' pages take the pair shape's copies (contiguous
// KV, or pages of a multiple of kMinStreamBox rows); then the 16-row kernel takes up to
// kPairTileRows rows where it has that shape. NULL with *why set when none is built.
const Kernel* choose_kernel(fas_dtype dtype, fas_dtype kv_dtype, int head_dim, bool causal, int max_query_len,
                            int group, bool pair_tiles, std::string* why);
// The query tile rows a plan of `kernel` takes for sequences of up to packed_rows rows: 32 (the
// pair shape) where the 16-row kernel has it and some sequence has more than 16 rows (choose_kernel
// gives it such plans only where pair_tiles holds), else the kernel's. (A plan whose caches the
// stream copies cannot address falls back to 16-row tiles: fas_plan_info says so.)
inline int planned_tile_rows(const Kernel& kernel, int64_t packed_rows) {
    const bool paired = kernel.tile_q == 16 && packed_rows > 16 &&
                        has_pair_stream(kernel.head_dim, kernel.kv_dtype == FAS_DTYPE_E4M3);
    return paired ? kPairTileRows : kernel.tile_q;
}
// Whether the pair shape may take a plan (see choose_kernel): caches whose pages the stream
// shape's copies take, on every card: it takes device lengths, which the 64-row kernel does not
// (on the H100 it is 3-7% faster than that kernel on two rows, 4-7% slower on three:
// docs/design/device-lengths.md).
inline bool pair_tiles(bool contiguous, int page_size) { return contiguous || page_size % kMinStreamBox == 0; }
// Whether any kernel of this build serves (dtype, kv_dtype, head_dim, causal) in some layout.
bool has_kernel(fas_dtype dtype, fas_dtype kv_dtype, int head_dim, bool causal);

// What a plan is made from: host lengths and the KV addressing. Device-length plans: kv_lengths
// are each sequence's capacity and table_stride > 0 the block table's row (pages per sequence).
struct PlanRequest {
    const int32_t* cu_seqlens_q;  // host, batch + 1
    const int32_t* kv_lengths;    // host, batch (paged); NULL for contiguous KV
    const int32_t* cu_seqlens_k;  // host, batch + 1 (contiguous KV); NULL for paged
    int batch_size;
    int page_size;  // paged: the caller's; contiguous: chosen by the planner
    int num_pages;  // paged: the caches' pages; contiguous: 0
    int64_t k_page_stride, v_page_stride;  // elements (resolved)
    int table_stride = 0;  // > 0: a device-length plan
};
// Sequence i's keys: its length in the paged cache, or its rows of contiguous KV.
inline int32_t kv_length(const PlanRequest& request, int i) {
    return request.kv_lengths != nullptr ? request.kv_lengths[i] : request.cu_seqlens_k[i + 1] - request.cu_seqlens_k[i];
}

// Device-length plans (fas_plan_update): the host schedule's rules, run on the device
// (device_plan.cu) into the plan's arrays from a step's KV lengths. At most kMaxDeviceBatch
// sequences (one CTA plans them); the page table is a block table, row i of table_stride ids at
// i * table_stride (page_indptr), and an unsplit update sets the chunk to kUnsplitChunk (every
// sequence one chunk of all its keys: the kernels then write out themselves).
constexpr int kMaxDeviceBatch = 2048;
constexpr int32_t kUnsplitChunk = 1 << 30;
struct DeviceUpdate {
    int batch, group, tile_q, kv_tile, num_heads_k, window_left, page_size, table_stride, max_ctas;
    long long wave;             // CTAs of one wave of the plan's shape
    const int32_t* capacity;    // [batch] keys each sequence may hold (device)
    const int32_t* q_indptr;    // [batch + 1] (device)
    int32_t *last_page_len, *o_indptr, *merge_indptr, *kv_chunk_size, *requests, *qo_tiles, *kv_tiles, *device_ctas;
};
cudaError_t launch_update(const DeviceUpdate& update, const int32_t* kv_lengths, cudaStream_t stream);

struct Plan {
    fas::DeviceBlock* block = nullptr;  // schedule arrays, contiguous-KV page ids, partial buffers
    const Kernel* kernel = nullptr;
    LaunchArgs args{};  // tensors and page_indices filled per run
    bool contiguous_kv = false;
    int total_q = 0;
    int total_pages = 0;
    int kv_splits = 1;
    int ctas_per_sm = 1;  // of the attention launch, as planned (fas_plan_info.ctas_per_sm)
    int tile_rows = 16;   // of a query tile (fas_plan_info.query_tile_rows): the kernel's, 32 paired
    int group = 1;
    DeviceUpdate update{};  // device-length plans (args.device_ctas set): what fas_plan_update runs

    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() { fas::device_block_release(block); }
};

// Contiguous KV as pages: a plan lists each sequence's keys as pages of this many rows whose ids
// are row numbers (each page's first row), with the row stride as page stride, so that a sequence
// may start at any row and still lists one id per 256 keys (docs/design/fa2-routing.md).
constexpr int kContiguousPageSize = 256;

fas_status create_plan(const fas::Layout& layout, const Kernel* kernel, const PlanRequest& request,
                       const fas::DeviceProps& device, std::unique_ptr<Plan>* out);
// One run with the tensors of `run` (its descales: e4m3 caches need k_descale and v_descale,
// e4m3 q takes q_descale; the others ignore them).
fas_status run_plan(const Plan& plan, const fas_plan_run_args& run);
fas_status retire_plan(Plan* plan, cudaStream_t stream);
// A device-length plan's schedule (args.device_ctas set) for the DEVICE kv_lengths [batch],
// enqueued on stream.
fas_status update_plan(const Plan& plan, const int32_t* kv_lengths, cudaStream_t stream);

}  // namespace fas_paged

#endif  // FAS_PAGED_PAGED_H

// fas_fwd's keys split on SM90 (api/fwd_split.h): the chunks' plans over host offsets the split
// lists itself, and the merge of their partial results.
#include "api/fwd_split.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "core/capture.h"
#include "core/kv_cache.h"
#include "core/lse.h"
#include "core/merge_states.h"
#include "core/rows.h"
#include "core/status.h"

namespace fas {

namespace {

// Keys of the shortest chunk. With chunks of ~1.5k keys (1 x 64 x 3000, 16/2) a split call took
// 41 us against 38 for one SM90 plan, the split's launches and its two plans a call outweighing
// its parallelism (docs/design/fa2-routing.md); from 4k keys a chunk it runs 0.2-0.5x.
constexpr int32_t kMinChunkKeys = 2048;
constexpr int32_t kKeyTile = 128;  // chunk boundaries on the SM90 kernels' key tiles
// Where FA2's split-KV kernel is built, the key split takes a call only from this much work
// (multiply-adds of one score matrix product: batch x queries x keys x query heads x head dim).
// H200, bf16 hd128 causal 16/2: 1 x 64 x 32k (2^32) ran 75 us split here against 74 for FA2's,
// 1 x 64 x 6000 55 against 24, 1 x 128 x 32k 77 against 130 (docs/design/fa2-routing.md).
constexpr int64_t kKeySplitOverFa2Macs = int64_t{1} << 32;
constexpr size_t kAlign = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Where each part of the scratch starts (bytes from its base).
struct ScratchLayout {
    size_t partial_out = 0, partial_lse = 0, q_copies = 0, merged_lse = 0, total = 0;
};

ScratchLayout scratch_layout(const Layout& layout, const KeySplit& split, const float* softmax_lse) {
    const size_t rows = static_cast<size_t>(layout.batch_size) * layout.max_seqlen_q;
    const size_t row_bytes = static_cast<size_t>(layout.num_heads_q) * layout.head_dim * 2;  // 16-bit dtypes
    const size_t lse_bytes = rows * layout.num_heads_q * sizeof(float);
    ScratchLayout s;
    s.partial_lse = s.partial_out + aligned(split.states() * rows * row_bytes);
    s.q_copies = s.partial_lse + aligned(split.states() * lse_bytes);
    s.merged_lse = s.q_copies + aligned(split.chunks * rows * row_bytes);
    s.total = s.merged_lse + (batch_lse_needs_reorder(softmax_lse, layout.max_seqlen_q) ? aligned(lse_bytes) : 0);
    return s;
}

// Pieces of sequences as one plan lists them: piece j's queries are rows cu_q[j].. of its q, its
// keys cu_k[j + 1] - cu_k[j] rows of the call's K and V from kv_starts[j].
struct Pieces {
    std::vector<int32_t> cu_q{0}, cu_k{0}, kv_starts;
    void add(int32_t queries, int32_t keys, int32_t first_key) {
        cu_q.push_back(cu_q.back() + queries);
        cu_k.push_back(cu_k.back() + keys);
        kv_starts.push_back(first_key);
    }
};

// One plan of the split over `pieces`, run into out and lse (rows of num_heads_q x head_dim,
// token-major) and retired on the call's stream.
fas_status run_piece(const fas_fwd_args& args, const Layout& request, const fas_sm90::Kernel* kernel,
                     const Pieces& pieces, const void* q, int64_t q_row_stride, void* out, float* lse,
                     const DeviceProps& device) {
    const std::vector<int32_t>& cu_q = pieces.cu_q;
    const int sequences = static_cast<int>(cu_q.size()) - 1;
    Layout layout = request;
    layout.varlen = true;
    layout.batch_size = sequences;
    layout.causal = kernel->causal;
    layout.q_row_stride = q_row_stride;
    layout.out_row_stride = static_cast<int64_t>(request.num_heads_q) * request.head_dim;
    layout.total_q = cu_q.back();
    layout.total_k = request.batch_size * request.max_seqlen_k;  // every key row K and V hold
    fas_sm90::PlanLayout schedule{};
    schedule.cu_seqlens_q = cu_q.data();
    schedule.cu_seqlens_k = pieces.cu_k.data();
    schedule.batch_size = sequences;
    schedule.num_heads_q = request.num_heads_q;
    schedule.num_heads_k = request.num_heads_k;
    schedule.head_dim = kernel->head_dim;
    schedule.causal = kernel->causal;
    schedule.sm_count = device.sm_count;
    schedule.kv_starts = pieces.kv_starts.data();
    std::unique_ptr<fas_sm90::Plan> plan;
    {
        RelaxedCaptureScope relaxed;  // as fwd_route.cpp's plans: the schedule's block may allocate
        const fas_status status = fas_sm90::create_plan(layout, kernel, schedule, 0, KvCache{}, device, &plan);
        if (status != FAS_SUCCESS) return status;
    }
    fas_sm90::RunTensors tensors{};
    tensors.q = q;
    tensors.k = args.k;
    tensors.v = args.v;
    tensors.out = out;
    tensors.softmax_lse = lse;
    const fas_status status = fas_sm90::run_plan(*plan, tensors, args.stream);
    const fas_status retired = fas_sm90::retire_plan(plan.get(), args.stream);
    return status != FAS_SUCCESS ? status : retired;
}

}  // namespace

KeySplit choose_key_split(const Layout& layout, const DeviceProps& device) {
    KeySplit split;
    const fas_sm90::Kernel* served = fas_sm90::find_kernel(layout.dtype, layout.dtype, layout.head_dim, layout.causal);
    if (served == nullptr) return split;
    const int64_t items =
        layout.batch_size * ceil_div(layout.max_seqlen_q, fas_sm90::query_tile_rows(*served)) * layout.num_heads_q;
    split.few_tiles = items * 2 <= device.sm_count;
    const int64_t row_bytes = static_cast<int64_t>(layout.num_heads_q) * layout.head_dim * 2;
    if (!split.few_tiles || !is_16bit_dtype(layout.dtype) || layout.q_row_stride * 2 % 16 != 0 || row_bytes % 16 != 0) {
        return split;
    }
    const fas_sm90::Kernel* unmasked = fas_sm90::find_kernel(layout.dtype, layout.dtype, layout.head_dim, false);
    if (unmasked == nullptr) return split;
    const int32_t last_keys =
        layout.causal
            ? static_cast<int32_t>(std::min<int64_t>(layout.max_seqlen_k, ceil_div(layout.max_seqlen_q, kKeyTile) * kKeyTile))
            : 0;
    const int32_t unmasked_keys = layout.max_seqlen_k - last_keys;
    const int64_t most = std::min<int64_t>(
        {device.sm_count / items, FAS_MERGE_MAX_STATES - (layout.causal ? 1 : 0), unmasked_keys / kMinChunkKeys});
    if (most < 2) return split;
    split.unmasked = unmasked;
    split.causal = layout.causal ? served : nullptr;
    split.last_keys = last_keys;
    split.unmasked_keys = unmasked_keys;
    split.chunk_keys = static_cast<int32_t>(ceil_div(ceil_div(unmasked_keys, most), kKeyTile) * kKeyTile);
    split.chunks = static_cast<int>(ceil_div(unmasked_keys, split.chunk_keys));
    return split;
}

bool key_split_beats_fa2(const Layout& layout) {
    return static_cast<int64_t>(layout.batch_size) * layout.max_seqlen_q * layout.max_seqlen_k * layout.num_heads_q *
               layout.head_dim >= kKeySplitOverFa2Macs;
}

size_t key_split_scratch_bytes(const Layout& layout, const KeySplit& split, const float* softmax_lse) {
    return split.states() > 0 ? scratch_layout(layout, split, softmax_lse).total : 0;
}

fas_status run_key_split(const fas_fwd_args& args, const Layout& layout, const KeySplit& split,
                         const DeviceProps& device, void* scratch) {
    const ScratchLayout at = scratch_layout(layout, split, args.softmax_lse);
    char* const base = static_cast<char*>(scratch);
    const int batch = layout.batch_size, queries = layout.max_seqlen_q, keys = layout.max_seqlen_k;
    const int64_t rows = static_cast<int64_t>(batch) * queries;
    const int64_t row_elements = static_cast<int64_t>(layout.num_heads_q) * layout.head_dim;
    const auto partial_out = [&](int state) { return base + at.partial_out + state * rows * row_elements * 2; };
    const auto partial_lse = [&](int state) {
        return reinterpret_cast<float*>(base + at.partial_lse) + state * rows * layout.num_heads_q;
    };
    // Each unmasked chunk reads its own copy of the query rows (the kernels write out where they read q).
    cudaError_t error = replicate_rows(args.q, layout.q_row_stride * 2, rows, row_elements * 2, split.chunks,
                                       base + at.q_copies, device.sm_count, args.stream);
    if (error != cudaSuccess) return fail_cuda(error, "the query rows' copies for the key split");

    // Piece j = c * batch + i: chunk c of sequence i, its queries at rows j * queries of the copies.
    Pieces unmasked;
    for (int c = 0; c < split.chunks; ++c) {
        const int32_t length = std::min(split.chunk_keys, split.unmasked_keys - c * split.chunk_keys);
        for (int i = 0; i < batch; ++i) unmasked.add(queries, length, i * keys + c * split.chunk_keys);
    }
    fas_status status = run_piece(args, layout, split.unmasked, unmasked, base + at.q_copies, row_elements,
                                  partial_out(0), partial_lse(0), device);
    if (status != FAS_SUCCESS) return status;
    if (split.last_keys > 0) {  // sequence i's last keys, from the call's own query rows
        Pieces last;
        for (int i = 0; i < batch; ++i) last.add(queries, split.last_keys, i * keys + split.unmasked_keys);
        status = run_piece(args, layout, split.causal, last, args.q, layout.q_row_stride, partial_out(split.chunks),
                           partial_lse(split.chunks), device);
        if (status != FAS_SUCCESS) return status;
    }

    MergeLaunch merge{};
    merge.dtype = layout.dtype;
    merge.num_states = split.states();
    merge.num_tokens = static_cast<int>(rows);
    merge.num_heads = layout.num_heads_q;
    merge.head_dim = layout.head_dim;
    for (int s = 0; s < merge.num_states; ++s) {
        merge.v[s] = partial_out(s);
        merge.lse[s] = partial_lse(s);
        merge.lse_token_stride[s] = layout.num_heads_q;
        merge.lse_head_stride[s] = 1;
    }
    merge.token_stride = row_elements;
    merge.head_stride = layout.head_dim;
    merge.out = args.out;
    merge.out_token_stride = layout.out_row_stride;
    merge.out_head_stride = layout.head_dim;
    // With one query a sequence the token-major LSE is fas_fwd's [batch, heads, 1] already.
    const bool reorder = batch_lse_needs_reorder(args.softmax_lse, queries);
    merge.out_lse = reorder ? reinterpret_cast<float*>(base + at.merged_lse) : args.softmax_lse;
    merge.out_lse_token_stride = layout.num_heads_q;
    merge.out_lse_head_stride = 1;
    error = launch_merge_states(merge, device.sm_count, args.stream);
    if (error != cudaSuccess) return fail_cuda(error, "the merge of the key split's partial results");
    if (reorder) {
        error = reorder_lse_to_batch(merge.out_lse, args.softmax_lse, batch, queries, layout.num_heads_q, args.stream);
        if (error != cudaSuccess) return fail_cuda(error, "the LSE's reorder into the batch layout");
    }
    return FAS_SUCCESS;
}

}  // namespace fas

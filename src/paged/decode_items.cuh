// The stream shape's work items (decode_tma.cuh) as its warps walk them: an item's description from
// the plan's schedule (ItemStream: loads issued an item or two ahead of their use), and the page ids
// of the producer's stages (StageIds: loaded an id group of stages ahead). Both exist for one reason:
// a load issued behind a ring of copies in flight returns only after them (Little's law: ~3 stages,
// several microseconds, on an H200), and whatever waits for it waits with the copies' slots unfilled
// (docs/design/decode-producer.md).
#ifndef FAS_PAGED_DECODE_ITEMS_CUH
#define FAS_PAGED_DECODE_ITEMS_CUH

#include <cstdint>

#include "paged/paged.h"

namespace fas_paged {
namespace decode {

// Work items of the launch: its CTAs' schedule rows times the KV heads.
__device__ __forceinline__ int item_count(const LaunchArgs& a) {
    return (a.device_ctas != nullptr ? *a.device_ctas : a.num_ctas) * a.num_heads_k;
}

// One work item (a 16-row query tile x KV chunk x KV head): what producer and consumers agree on.
struct Item {
    int request, qo_tile, kv_tile, kv_head;
    int q_begin, qo_len, kv_len, kv_begin, kv_end;
    int first;       // the first stage's first key: kv_begin rounded down to a whole box
    int iterations;  // stages
    int num_chunks;
    int page_begin;
};

// An item's schedule loads, apart so that they can be issued an item or two ahead of its use: its
// row of the schedule, then (once that has landed) its sequence's bounds.
struct ItemRow {
    int request, qo_tile, kv_tile;
};
struct ItemSeq {
    int q_begin, q_end, page_begin, page_end, last_page_len;
};
__device__ __forceinline__ ItemRow load_row(const LaunchArgs& a, int index) {
    const int cta = index / a.num_heads_k;
    return {a.request_indices[cta], a.qo_tile_indices[cta], a.kv_tile_indices[cta]};
}
__device__ __forceinline__ ItemSeq load_seq(const LaunchArgs& a, int request) {
    return {a.q_indptr[request], a.q_indptr[request + 1], a.page_indptr[request], a.page_indptr[request + 1],
            a.last_page_len[request]};
}

// chunk: the plan's KV chunk (kv_chunk_size[0]) when split, else 0; read once per CTA.
template <int Keys>
__device__ __forceinline__ Item describe(const LaunchArgs& a, int index, const ItemRow& r, const ItemSeq& q, int chunk_size) {
    Item w;
    w.kv_head = index % a.num_heads_k;  // KV heads fastest: one sequence's heads read the same rows together
    w.request = r.request;
    w.qo_tile = r.qo_tile;
    w.kv_tile = r.kv_tile;
    w.q_begin = q.q_begin;
    w.qo_len = q.q_end - q.q_begin;
    w.page_begin = q.page_begin;
    const int pages = q.page_end - q.page_begin;
    w.kv_len = pages == 0 ? 0 : (pages - 1) * a.page_size + q.last_page_len;
    const int kv_start = window_start(w.kv_len, w.qo_len, a.window_left);
    const int span = w.kv_len - kv_start;
    const int chunk = a.split ? chunk_size : span;
    w.kv_begin = kv_start + (a.split ? min(w.kv_tile * chunk, span) : 0);
    w.kv_end = a.split ? min(w.kv_begin + chunk, w.kv_len) : w.kv_len;
    w.first = w.kv_begin >> a.box_shift << a.box_shift;
    w.iterations = w.kv_end > w.kv_begin ? (w.kv_end - w.first + Keys - 1) / Keys : 0;
    w.num_chunks = a.split ? (max(span, 1) + chunk - 1) / chunk : 1;
    return w;
}

template <int Keys>
__device__ __forceinline__ Item describe(const LaunchArgs& a, int index, int chunk_size) {
    const ItemRow r = load_row(a, index);
    return describe<Keys>(a, index, r, load_seq(a, r.request), chunk_size);
}

// A CTA's items (blockIdx.x, + gridDim.x, ...) in order, each described from loads issued ahead:
// its schedule row two items before, its sequence's bounds one item before. Described on the
// spot, an item's two dependent loads (L2 latency each, under a full memory pipe) held the
// producer between items with its freed slots unfilled, and the consumers with landed stages
// unread: the cost of many short items (docs/design/decode-producer.md).
template <int Keys>
struct ItemStream {
    int index;        // the next item take() returns
    int chunk;        // the plan's KV chunk, split plans (loaded here once, not per item)
    ItemRow row[2];   // of index and index + gridDim.x
    ItemSeq seq;      // of index
    // used: whether take() will be called (nothing is loaded ahead otherwise). The first row is
    // loaded whatever the launch's item count (a CTA's index is below the grid, which the plan's
    // schedule rows bound), beside a device-length plan's load of that count instead of after it:
    // a round trip less at every launch's start.
    __device__ __forceinline__ ItemStream(const LaunchArgs& a, int items, bool used)
        : index(blockIdx.x), chunk(a.split ? a.kv_chunk_size[0] : 0) {
        row[0] = used ? load_row(a, index) : ItemRow{};
        seq = used && index < items ? load_seq(a, row[0].request) : ItemSeq{};
        row[1] = used && index + static_cast<int>(gridDim.x) < items ? load_row(a, index + gridDim.x) : ItemRow{};
    }
    // Item `index` (which must be < items), then the loads of the two after it.
    __device__ __forceinline__ Item take(const LaunchArgs& a, int items) {
        const Item w = describe<Keys>(a, index, row[0], seq, chunk);
        index += gridDim.x;
        row[0] = row[1];
        seq = index < items ? load_seq(a, row[0].request) : ItemSeq{};
        row[1] = index + static_cast<int>(gridDim.x) < items ? load_row(a, index + gridDim.x) : ItemRow{};
        return w;
    }
};

// An id group: the page ids of a run of the producer's stages, in one register of each lane: lane
// j holds the id of box j % B of stage first + j / B of an item (B boxes a stage, 32 / B stages a
// group). The producer loads an item's next group when it takes one, a group (4 stages of 128 keys
// at pages of 16) ahead of its use, and the next item's first group a group before the item's end.
// Loaded at each stage instead, a stage's copies waited for its ids whenever they missed L1 (every
// 32 pages): pages of 16 ran 5-12% slower than contiguous keys, in order as slowly as shuffled, and
// as fast as them with the ids not loaded at all (a diagnostic build; docs/design/decode-producer.md).
template <int Keys>
struct StageIds {
    static constexpr int kKeysShift = Keys == 256 ? 8 : Keys == 128 ? 7 : Keys == 64 ? 6 : Keys == 32 ? 5 : 4;
    static_assert(1 << kKeysShift == Keys, "stages of 16 to 256 keys");
    int index = -1;  // the item's (-1: none)
    int first = 0;   // its first stage
    int id = 0;
    // The group of item w (index) from stage `first` on; boxes of 1 << box_shift rows.
    __device__ __forceinline__ void load(const LaunchArgs& a, const Item& w, int item, int from, int box_shift,
                                         int page_shift, int lane) {
        const int per_stage_shift = kKeysShift - box_shift;  // log2 B
        const int stage = from + (lane >> per_stage_shift);
        const int key = w.first + stage * Keys + ((lane & ((1 << per_stage_shift) - 1)) << box_shift);
        index = item;
        first = from;
        id = 0;
        if (stage < w.iterations && key < w.kv_end) {
            id = a.page_indices[w.page_begin + (page_shift >= 0 ? key >> page_shift : key / a.page_size)];
        }
    }
    // Lane `box`'s id at stage `stage` of the group (every lane takes part).
    __device__ __forceinline__ int at(int stage, int box, int box_shift) const {
        return __shfl_sync(0xffffffffu, id, ((stage - first) << (kKeysShift - box_shift)) + box);
    }
};

}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_ITEMS_CUH
